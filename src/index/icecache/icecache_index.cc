#include "index/icecache/icecache_index.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "backend/backend.h"
#include "core/check.h"
#include "core/env_switch.h"
#include "core/thread_pool.h"
#include "index/icecache/head_norm.h"
#include "index/icecache/list_layout.h"
#include "index/icecache/mips.h"
#include "index/key_reader.h"
#include "index/policies.h"
#include "index/regions.h"
#include "kv/key_mean.h"

namespace icecache {

namespace ice {

namespace {

// The soft maximum of q.k over `n` keys and the group's query heads: the log-mean-exp of the
// softmax logits s q.k (s = 1 / sqrt(dim)), in q.k units: (log sum exp(s q_g.k_t) - log(n G)) / s.
// With the query's shift (mass scoring), each head's q.k less its normalizer: the mean mass.
// It ranks units by the softmax mass per token they add (what attention-mass recall counts;
// the best single key ranks a page full of near-best keys below one lucky key), and it is at
// most the best q.k, so every bound of the tree still caps it. The products go through a small
// buffer a chunk at a time: each chunk's maximum first, then one float exp per product (every
// exponent <= 0), merged into the running sum as the maximum moves; no allocation.
float SoftScore(const TreeQuery& query, const float* keys, int n) {
  constexpr int kChunk = 64;
  const float s = 1.0f / std::sqrt(static_cast<float>(query.dim));
  float dots[kChunk];
  float best = -std::numeric_limits<float>::infinity();
  float sum = 0;  // sum of exp(s (dot - best))
  const int terms = n * query.group;
  for (int first = 0; first < terms; first += kChunk) {
    const int count = std::min(kChunk, terms - first);
    float top = best;
    for (int i = 0; i < count; ++i) {
      const int t = (first + i) / query.group, g = (first + i) % query.group;
      dots[i] = DotF(query.q + static_cast<size_t>(g) * query.dim,
                     keys + static_cast<size_t>(t) * query.dim, query.dim) -
                ShiftOf(query, g);
      top = std::max(top, dots[i]);
    }
    if (top > best) {
      sum *= std::exp(s * (best - top));  // 0 while best is still -inf
      best = top;
    }
    for (int i = 0; i < count; ++i) sum += std::exp(s * (dots[i] - best));
  }
  return std::min(best, best + std::log(sum / static_cast<float>(terms)) / s);
}

class PageScorer : public LeafScorer {
 public:
  PageScorer(const KvPoolView& pool, const std::vector<PageRef>& pages, int32_t first_leaf,
             const TreeQuery& query)
      : reader_(pool), pages_(pages), first_leaf_(first_leaf), query_(query) {}
  float Score(int32_t leaf) override {
    const PageRef& p = pages_[first_leaf_ + leaf];
    return SoftScore(query_, reader_.Keys(p.id, p.len), p.len);
  }

 private:
  KeyReader reader_;
  const std::vector<PageRef>& pages_;
  int32_t first_leaf_;
  const TreeQuery& query_;
};

}  // namespace

IceCacheIndex::IceCacheIndex(const IndexContext& context)
    : context_(context), search_stats_(!context.config.exact && context.config.rank != "centroid") {
  const int p = context_.layout.page_size;
  sink_pages_ = (context_.limits.sink + p - 1) / p;
  lists_.resize(static_cast<size_t>(context_.layout.n_layers) * context_.layout.n_kv_heads);
  for (ListState& s : lists_) s.tree = LeafTree(context_.layout.head_dim, search_stats_);
}

SearchWidth IceCacheIndex::Width(const KvConfig& config, int64_t pages) {
  const int64_t leaves = config.search_leaves > 0 ? config.search_leaves : pages + kExtraLeaves;
  return {config.ResolvedSearchRadius(), static_cast<int>(std::min<int64_t>(leaves, 1 << 30))};
}

IceCacheIndex::~IceCacheIndex() { DropAhead(); }

void IceCacheIndex::JoinAhead() {
  if (ahead_thread_.joinable()) ahead_thread_.join();
}

void IceCacheIndex::DropAhead() {
  JoinAhead();
  for (std::vector<SegmentLayout>& runs : ahead_) {
    for (SegmentLayout& r : runs) DiscardSegment(*ahead_pool_, &r);
  }
  ahead_.clear();
  ahead_runs_ = 0;
  ahead_scratch_.clear();
}

std::span<SegmentLayout> IceCacheIndex::AheadOf(int layer, int head) {
  if (ahead_.empty() || !Indexed(layer)) return {};
  return ahead_[static_cast<size_t>(layer - context_.config.dense_layers) *
                    context_.layout.n_kv_heads +
                head];
}

Status IceCacheIndex::OnPrefillChunk(const KvSequence& seq, int64_t prompt_end,
                                     const std::function<void()>& kv_ready) {
  if (!context_.overlap_prefill || context_.workers == nullptr || ahead_busy_.load()) {
    return Status::Ok();  // not allowed, or the runs handed out last are still being laid out
  }
  JoinAhead();
  const int n_layers = context_.layout.n_layers, heads = context_.layout.n_kv_heads;
  const int l0 = context_.config.dense_layers, p = context_.layout.page_size;
  if (l0 >= n_layers || started_ || prompt_end <= context_.limits.budget) return Status::Ok();
  // The pages the prompt's OnAppend will bulk-build in every list: from the sink pages to the
  // last page that has left the window. The runs among them whose pages are all written.
  const int64_t limit = prompt_end - context_.limits.window;
  const int64_t end = limit / p, written = seq.length() / p;
  if (end <= sink_pages_) return Status::Ok();
  const std::vector<int32_t> lengths = RunLengths(static_cast<int32_t>(end - sink_pages_), p);
  std::vector<int64_t> starts{sink_pages_};
  for (int32_t n : lengths) starts.push_back(starts.back() + n);
  int32_t runs = 0;
  while (runs < static_cast<int32_t>(lengths.size()) && starts[runs + 1] <= written) ++runs;
  if (runs <= ahead_runs_) return Status::Ok();
  for (int l = l0; l < n_layers; ++l) {
    for (int h = 0; h < heads; ++h) {
      if (seq.tail_index(l, h) != 0) return Status::Ok();  // not a first prompt's lists
    }
  }
  // Room for the runs' leaves and for the pages the rest of the prompt will write.
  const int64_t lists = static_cast<int64_t>(n_layers - l0) * heads;
  const int32_t k0 = ahead_runs_;
  const int64_t need =
      lists * (starts[runs] - starts[k0]) +
      static_cast<int64_t>(n_layers) * heads * ((prompt_end + p - 1) / p - written + 1);
  PagePool& pool = seq.pool();
  if (pool.spare() < need) return Status::Ok();

  kv_ready();  // the runs' pages hold the device's writes
  ahead_pool_ = &pool;
  ahead_.resize(static_cast<size_t>(lists));
  for (int64_t i = 0; i < lists; ++i) {
    const std::vector<PageRef>& pages = seq.pages(l0 + static_cast<int>(i / heads), i % heads);
    ahead_[i].resize(runs);
    for (int32_t k = k0; k < runs; ++k) {
      ahead_[i][k].source.assign(pages.begin() + starts[k], pages.begin() + starts[k + 1]);
    }
  }
  ahead_runs_ = runs;
  runs_ahead_ += runs - k0;
  ahead_scratch_.resize(context_.workers->size());
  ahead_busy_ = true;
  ahead_thread_ = std::thread([this, &pool, k0, runs, lists] {
    const int64_t per_list = runs - k0;
    context_.workers->ParallelFor(lists * per_list, 1, [&](int thread, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        // A run the pool has no room for stays empty and is laid out by OnAppend.
        LayOutSegment(pool, &ahead_[i / per_list][k0 + i % per_list], &ahead_scratch_[thread],
                      search_stats_);
      }
    });
    ahead_busy_ = false;
  });
  return Status::Ok();
}

Status IceCacheIndex::OnAppend(KvSequence& seq, int64_t first, std::span<const int32_t> tokens) {
  JoinAhead();
  // The tokens written so far: run beside the next decode step, the sequence already holds that
  // step's slot, whose K/V the device is still writing. (Without the ids: all of them.)
  const int64_t written =
      tokens.empty() ? seq.length() : first + static_cast<int64_t>(tokens.size());
  ICECACHE_CHECK(written <= seq.length());
  Status s = Append(seq, written);
  DropAhead();  // runs that no bulk build took
  return s;
}

Status IceCacheIndex::Append(KvSequence& seq, int64_t len) {
  const int n_layers = context_.layout.n_layers, heads = context_.layout.n_kv_heads;
  const int l0 = context_.config.dense_layers;
  if (l0 >= n_layers) return Status::Ok();  // nothing is sparse
  if (!started_) {
    if (Arranged(seq)) {
      ICECACHE_RETURN_IF_ERROR(Adopt(seq));
    } else if (len <= context_.limits.budget) {
      return Status::Ok();  // the whole context fits the budget: nothing to index yet
    }
    started_ = true;
  }
  const int64_t limit = len - context_.limits.window;  // positions before it left the window
  const int64_t lists = static_cast<int64_t>(n_layers - l0) * heads;
  // List i is (layer l0 + i / heads, KV head i % heads).
  auto layer = [&](int64_t i) { return l0 + static_cast<int>(i / heads); };
  auto head = [&](int64_t i) { return static_cast<int>(i % heads); };
  auto absorb = [&](int64_t i, BuildScratch* scratch) {
    Absorb(seq, layer(i), head(i), limit, scratch);
  };
  if (context_.workers == nullptr || context_.workers->size() < 2 || lists < 2) {
    scratch_.resize(1);
    for (int64_t i = 0; i < lists; ++i) absorb(i, &scratch_[0]);
  } else {
    // Lists with pages to re-arrange go in waves whose page needs (before they free any) fit
    // the pool's free pages together: every list in a wave re-arranges at once, as it would
    // alone. A list that does not fit even alone runs by itself (and skips what has no room).
    std::vector<std::pair<int64_t, int64_t>> todo;  // (list, pages it may allocate)
    scratch_.resize(context_.workers->size());
    for (int64_t i = 0; i < lists; ++i) {
      const int64_t need = AbsorbPages(seq, layer(i), head(i), limit);
      if (need > 0) {
        todo.emplace_back(i, need);
      } else {
        absorb(i, &scratch_[0]);  // at most the sink pages leave the tail: nothing to lay out
      }
    }
    const PagePool& pool = seq.pool();
    const int64_t n = static_cast<int64_t>(todo.size());
    for (int64_t begin = 0; begin < n;) {
      const int64_t free = pool.spare();
      int64_t end = begin, sum = 0;
      while (end < n && sum + todo[end].second <= free) sum += todo[end++].second;
      if (end - begin < 2) {
        absorb(todo[begin].first, &scratch_[0]);
        begin = std::max(end, begin + 1);
        continue;
      }
      ++parallel_appends_;
      context_.workers->ParallelFor(end - begin, 1, [&](int thread, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) absorb(todo[begin + i].first, &scratch_[thread]);
      });
      begin = end;
    }
  }
  scratch_.clear();  // a prompt's bulk build needs it, the steps after it seldom do
  return Status::Ok();
}

bool IceCacheIndex::Staggered() {
  static const bool on = EnvSwitch("ICECACHE_INDEX_STAGGER", true);
  return on;
}

bool IceCacheIndex::Arranged(const KvSequence& seq) const {
  for (int l = context_.config.dense_layers; l < context_.layout.n_layers; ++l) {
    for (int h = 0; h < context_.layout.n_kv_heads; ++h) {
      if (seq.tail_index(l, h) > 0) return true;
    }
  }
  return false;
}

int64_t IceCacheIndex::AppendPagesBound(const KvSequence& seq) {
  if (ahead_busy_.load() || !ahead_.empty()) return -1;  // a prompt's runs are laid out ahead
  const int n_layers = context_.layout.n_layers, heads = context_.layout.n_kv_heads;
  const int l0 = context_.config.dense_layers;
  const int64_t len = seq.length();
  if (l0 >= n_layers) return 0;
  if (!started_) {
    if (Arranged(seq)) return -1;  // a fork's lists, adopted first: not counted
    if (len <= context_.limits.budget) return 0;
  }
  const int64_t limit = len - context_.limits.window;
  int64_t pages = 0;
  for (int l = l0; l < n_layers; ++l) {
    for (int h = 0; h < heads; ++h) pages += AbsorbPages(seq, l, h, limit);
  }
  return pages;
}

int64_t IceCacheIndex::AbsorbPages(const KvSequence& seq, int layer, int head, int64_t limit) {
  const int p = context_.layout.page_size;
  const ListState& s = state(layer, head);
  const int64_t tail_pos =
      s.started ? seq.tail_pos(layer, head) : static_cast<int64_t>(sink_pages_) * p;
  const int64_t absorb = (ListLimit(s, layer, head, limit) - tail_pos) / p;
  if (absorb <= 0) return 0;
  // A bulk build (what Absorb does for an empty tree, or when it absorbs at least as many tokens
  // as the tree holds) lays out every indexed token again, run by run, in ceil(tokens / P) leaves
  // per run (runs laid out ahead need none); an insertion splits at most one leaf per token.
  if (s.tree.empty() || absorb * p >= s.tree.keys()) {
    const int32_t tail = s.started ? seq.tail_index(layer, head) : sink_pages_;
    return RebuildPages(seq.pages(layer, head), sink_pages_, tail + static_cast<int32_t>(absorb), p,
                        AheadOf(layer, head));
  }
  return InsertPages(static_cast<int32_t>(absorb), p, seq.pool().holding());
}

Status IceCacheIndex::Adopt(const KvSequence& seq) {
  for (int l = context_.config.dense_layers; l < context_.layout.n_layers; ++l) {
    for (int h = 0; h < context_.layout.n_kv_heads; ++h) {
      if (seq.tail_index(l, h) == 0) continue;  // still positional: starts as usual
      ListState& s = state(l, h);
      ICECACHE_RETURN_IF_ERROR(AdoptList(seq, l, h, sink_pages_, &s.tree));
      s.started = true;
    }
  }
  return Status::Ok();
}

void IceCacheIndex::Absorb(KvSequence& seq, int layer, int head, int64_t limit,
                           BuildScratch* scratch) {
  const int p = context_.layout.page_size;
  ListState& s = state(layer, head);
  if (!s.started) {
    // The sink pages stay where they are: they only leave the tail.
    if (static_cast<int64_t>(sink_pages_) * p > limit) return;
    seq.AdvanceTail(layer, head, sink_pages_);
    s.started = true;
  }
  const int64_t absorb = (ListLimit(s, layer, head, limit) - seq.tail_pos(layer, head)) / p;
  if (absorb <= 0) return;
  const int32_t pages = static_cast<int32_t>(absorb);
  if (s.tree.empty() || absorb * p >= s.tree.keys()) {
    if (RebuildList(seq, layer, head, sink_pages_, pages, &s.tree, scratch, AheadOf(layer, head))) {
      ++rebuilds_;
      s.routes.clear();
      return;
    }
    if (s.tree.empty()) {
      ++skipped_;
      return;
    }
  }
  // The routes of the absorbed tokens, as leaves (-1: none); older ones are dropped, and the
  // used ones once the insertion is done (a skipped one keeps them for the next call).
  const int64_t first = seq.tail_pos(layer, head), end = first + absorb * p;
  thread_local std::vector<int32_t> routed;
  routed.clear();
  if (!s.routes.empty()) {
    s.routes.erase(s.routes.begin(), s.routes.lower_bound(first));
    routed.assign(static_cast<size_t>(absorb * p), -1);
    for (auto it = s.routes.begin(); it != s.routes.end() && it->first < end; ++it) {
      routed[it->first - first] = it->second >= sink_pages_ ? it->second - sink_pages_ : -1;
    }
  }
  int64_t followed = 0;
  if (InsertIntoList(seq, layer, head, sink_pages_, pages, &s.tree, routed, &followed)) {
    ++insertions_;
    routed_tokens_ += followed;
    searched_tokens_ += absorb * p - followed;
    s.routes.erase(s.routes.begin(), s.routes.lower_bound(end));
  } else {
    ++skipped_;
  }
}

void IceCacheIndex::AcceptRoutes(std::span<const KeyRoute> routes) {
  for (const KeyRoute& r : routes) {
    if (!Indexed(r.layer) || r.layer >= context_.layout.n_layers || r.head < 0 ||
        r.head >= context_.layout.n_kv_heads) {
      continue;
    }
    state(r.layer, r.head).routes[r.position] = r.entry;
  }
}

void IceCacheIndex::Select(const KvSequence& seq, int layer, const float* q,
                           std::span<std::vector<PageRef>> out, SelectionStats* stats) {
  const int heads = context_.layout.n_kv_heads, d = context_.layout.head_dim;
  const int group = context_.n_heads / heads;
  const SelectionLimits& lim = context_.limits;
  const KvPoolView pool = seq.pool().view();
  KeyReader reader(pool);
  const int leader = ReuseLeader(layer);
  if (leader >= 0 && reuse_.layer == leader && reuse_.length == seq.length()) {
    SelectReused(seq, layer, out);
    return;
  }
  const bool record = context_.config.reuse_layers > 1 && leader < 0;
  const bool centroid = !context_.config.exact && context_.config.rank == "centroid";
  if (record) {
    reuse_.layer = layer;
    reuse_.length = seq.length();
    reuse_.positions.assign(heads, {});
  }
  searched_.clear();
  for (int h = 0; h < heads; ++h) {
    out[h].clear();
    if (SelectAllIfCovered(seq, layer, h, &out[h])) continue;
    if (!centroid) {
      searched_.push_back(h);
      continue;
    }
    const ListRegions r = RegionsOf(seq, layer, h, lim);
    ranker_.Select(seq, layer, h, r, lim, q + static_cast<size_t>(h) * group * d, group, reader,
                   &out[h], stats);
    if (record) RecordPositions(r, out[h], reader, &reuse_.positions[h]);
  }
  // The tree search, one KV head per worker thread where the engine lends some.
  SearchHeads(context_.workers, searched_, &head_scratch_, stats, [&](int h, HeadScratch* s) {
    SearchHead(seq, layer, h, q + static_cast<size_t>(h) * group * d, &out[h], s);
  });
  if (record) {
    for (int h : searched_) {
      RecordPositions(RegionsOf(seq, layer, h, lim), out[h], reader, &reuse_.positions[h]);
    }
  }
}

void IceCacheIndex::RecordPositions(const ListRegions& r, const std::vector<PageRef>& selected,
                                    const KeyReader& reader, std::vector<int32_t>* positions) {
  // The selected pages between the sink and the window pages.
  for (size_t i = r.sink_end; i + (r.end - r.window_begin) < selected.size(); ++i) {
    const int32_t* pos = reader.Positions(selected[i].id);
    positions->insert(positions->end(), pos, pos + selected[i].len);
  }
}

void IceCacheIndex::SearchHead(const KvSequence& seq, int layer, int h, const float* qh,
                               std::vector<PageRef>* out, HeadScratch* s) {
  const int d = context_.layout.head_dim;
  const int group = context_.n_heads / context_.layout.n_kv_heads;
  const SelectionLimits& lim = context_.limits;
  const KvPoolView pool = seq.pool().view();
  KeyReader reader(pool);
  const std::vector<PageRef>& pages = seq.pages(layer, h);
  const ListRegions r = RegionsOf(seq, layer, h, lim);
  const ListState& st = state(layer, h);
  const bool indexed = Indexed(layer) && st.started;
  static const LeafTree kEmpty;
  const LeafTree& tree = indexed ? st.tree : kEmpty;
  TreeQuery query{qh, group, d};
  const bool mass = indexed && !context_.config.exact && context_.config.search_score == "mass";
  if (mass) {
    MassShift(seq, layer, h, r, query, s);
    query.shift = s->shift.data();
  }
  // Loose pages: tail pages older than the window that are in no leaf yet.
  const int32_t tail = seq.tail_index(layer, h);
  const int32_t loose_begin = std::max(r.sink_end, indexed ? tail : 0);
  ScoreLoose(pages, loose_begin, r.window_begin, query, reader, s);
  const int64_t tokens = static_cast<int64_t>(lim.budget) - r.sink_tokens - r.window_tokens;
  const int64_t page_room =
      static_cast<int64_t>(lim.max_pages) - r.sink_end - (r.end - r.window_begin);
  if (context_.config.exact) {
    ExactSelect(tree, query, s->loose, tokens, page_room, &s->search, &s->picks, &s->stats);
  } else {
    PageScorer scorer(pool, pages, sink_pages_, query);
    BestFirstSelect(tree, query, Width(context_.config, page_room), s->loose, tokens, page_room,
                    scorer, &s->search, &s->picks, &s->stats);
  }
  if (mass) RecordGain(seq, layer, h, query, s);
  std::vector<PageRef>& o = *out;
  for (int32_t i = 0; i < r.sink_end; ++i) o.push_back(pages[i]);
  for (const Pick& pick : s->picks) {
    o.push_back(pick.loose ? pages[s->loose_page[pick.id]] : pages[sink_pages_ + pick.id]);
  }
  for (int32_t i = r.window_begin; i < r.end; ++i) o.push_back(pages[i]);
}

void IceCacheIndex::MassShift(const KvSequence& seq, int layer, int h, const ListRegions& r,
                              const TreeQuery& query, HeadScratch* s) const {
  const std::vector<PageRef>& pages = seq.pages(layer, h);
  KeyReader reader(seq.pool().view());
  s->sink_window.Reset(query.group);
  auto add = [&](int32_t i) {
    s->sink_window.Add(query, reader.Keys(pages[i].id, pages[i].len), pages[i].len);
    s->stats.keys_scored += static_cast<int64_t>(pages[i].len) * query.group;
  };
  for (int32_t i = 0; i < r.sink_end; ++i) add(i);
  for (int32_t i = r.window_begin; i < r.end; ++i) add(i);
  const std::vector<float>& gain = state(layer, h).pick_gain;
  s->shift.assign(query.group, 0.0f);
  for (int g = 0; g < query.group; ++g) {
    if (s->sink_window.empty(g)) continue;
    s->shift[g] = s->sink_window.LogZ(g, query.dim) +
                  (static_cast<int>(gain.size()) == query.group ? gain[g] : 0.0f);
  }
}

void IceCacheIndex::RecordGain(const KvSequence& seq, int layer, int h, const TreeQuery& query,
                               HeadScratch* s) {
  const std::vector<PageRef>& pages = seq.pages(layer, h);
  KeyReader reader(seq.pool().view());
  s->picked.Reset(query.group);
  for (const Pick& pick : s->picks) {
    const PageRef& p = pick.loose ? pages[s->loose_page[pick.id]] : pages[sink_pages_ + pick.id];
    s->picked.Add(query, reader.Keys(p.id, p.len), p.len);  // HeadLse reads no shift
    s->stats.keys_scored += static_cast<int64_t>(p.len) * query.group;
  }
  std::vector<float>& gain = state(layer, h).pick_gain;
  gain.assign(query.group, 0.0f);
  for (int g = 0; g < query.group; ++g) {
    if (s->sink_window.empty(g) || s->picked.empty(g)) continue;
    const float base = s->sink_window.LogZ(g, query.dim);
    gain[g] = LogAddExp(base, s->picked.LogZ(g, query.dim), query.dim) - base;
  }
}

bool IceCacheIndex::SelectAllIfCovered(const KvSequence& seq, int layer, int head,
                                       std::vector<PageRef>* out) const {
  const SelectionLimits& lim = context_.limits;
  if (seq.length() > lim.budget ||
      static_cast<int64_t>(seq.pages(layer, head).size()) > lim.max_pages) {
    return false;
  }
  SelectAll(seq, layer, head, out);
  return true;
}

void IceCacheIndex::ScoreLoose(const std::vector<PageRef>& pages, int32_t begin, int32_t end,
                               const TreeQuery& query, KeyReader& reader, HeadScratch* s) const {
  const int d = query.dim;
  s->loose.clear();
  s->loose_page.clear();
  if (context_.config.exact) PrepareQuery(query, &s->search);
  for (int32_t i = begin; i < end; ++i) {
    const PageRef& page = pages[i];
    if (page.len == 0) continue;
    const float* k = reader.Keys(page.id, page.len);
    float score;
    if (context_.config.exact) {
      s->floats.resize(d);
      const float radius = BallOf(k, page.len, d, s->floats.data());
      score = Bound(query, s->search.q_norm, s->floats.data(), radius);
      ++s->stats.nodes_visited;
    } else {
      score = SoftScore(query, k, page.len);
      s->stats.keys_scored += static_cast<int64_t>(page.len) * query.group;
    }
    s->loose.push_back({score, page.len});
    s->loose_page.push_back(i);
  }
}

int IceCacheIndex::ReuseLeader(int layer) const {
  const int n = context_.config.reuse_layers, l0 = context_.config.dense_layers;
  if (n <= 1 || layer < l0 || (layer - l0) % n == 0) return -1;
  return layer - (layer - l0) % n;
}

void IceCacheIndex::SelectReused(const KvSequence& seq, int layer,
                                 std::span<std::vector<PageRef>> out) {
  const SelectionLimits& lim = context_.limits;
  const KeyReader reader(seq.pool().view());
  for (int h = 0; h < context_.layout.n_kv_heads; ++h) {
    out[h].clear();
    const std::vector<PageRef>& pages = seq.pages(layer, h);
    if (SelectAllIfCovered(seq, layer, h, &out[h])) continue;
    const ListRegions r = RegionsOf(seq, layer, h, lim);
    marked_.assign(static_cast<size_t>(seq.length()), 0);
    for (int32_t pos : reuse_.positions[h]) marked_[pos] = 1;
    overlap_.clear();
    for (int32_t i = r.sink_end; i < r.window_begin; ++i) {
      const int32_t* pos = reader.Positions(pages[i].id);
      int32_t n = 0;
      for (int t = 0; t < pages[i].len; ++t) n += marked_[pos[t]];
      if (n > 0) overlap_.emplace_back(-n, i);
    }
    std::sort(overlap_.begin(), overlap_.end());
    std::vector<PageRef>& o = out[h];
    for (int32_t i = 0; i < r.sink_end; ++i) o.push_back(pages[i]);
    int64_t tokens = static_cast<int64_t>(lim.budget) - r.sink_tokens - r.window_tokens;
    int64_t room = static_cast<int64_t>(lim.max_pages) - r.sink_end - (r.end - r.window_begin);
    for (const auto& [n, i] : overlap_) {
      if (room <= 0 || tokens <= 0) break;
      if (pages[i].len > tokens) continue;  // a smaller page may still fit
      o.push_back(pages[i]);
      tokens -= pages[i].len;
      --room;
    }
    for (int32_t i = r.window_begin; i < r.end; ++i) o.push_back(pages[i]);
  }
}

void IceCacheIndex::OnTruncate(const KvSequence& seq) {
  // The runs laid out ahead read pages the truncation may have freed: StopBackground must have
  // dropped them before it.
  ICECACHE_CHECK_MSG(!ahead_thread_.joinable() && ahead_.empty(),
                     "icecache: StopBackground must come before the sequence drops tokens");
  // Only tail tokens are ever dropped and the trees hold none of them; routes for dropped
  // positions are forgotten.
  for (int l = context_.config.dense_layers; l < context_.layout.n_layers; ++l) {
    for (int h = 0; h < context_.layout.n_kv_heads; ++h) {
      ICECACHE_CHECK(seq.tail_pos(l, h) <= seq.length());
      auto& routes = state(l, h).routes;
      routes.erase(routes.lower_bound(seq.length()), routes.end());
    }
  }
}

int64_t IceCacheIndex::MemoryBytes() const {
  int64_t b = static_cast<int64_t>(lists_.capacity()) * sizeof(ListState);
  for (const ListState& s : lists_) b += s.tree.MemoryBytes();
  return b + ranker_.MemoryBytes();
}

}  // namespace ice

Result<std::unique_ptr<SequenceIndex>> MakeIceCacheIndex(const IndexContext& context) {
  if (context.n_heads <= 0 || context.layout.n_kv_heads <= 0 ||
      context.n_heads % context.layout.n_kv_heads != 0) {
    return InvalidArgument("icecache: query heads must be a multiple of KV heads");
  }
  return std::unique_ptr<SequenceIndex>(new ice::IceCacheIndex(context));
}

}  // namespace icecache
