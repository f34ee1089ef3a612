#include "index/lychee/lychee_index.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "core/half.h"
#include "index/lychee/vec_math.h"
#include "index/policies.h"
#include "index/regions.h"

namespace icecache {

namespace lychee {

namespace {

// Keys of one page as f32 (pointer into the pool for f32 pools, else converted into `scratch`).
const float* PageKeys(const KvPoolView& pool, const PageRef& page, std::vector<float>* scratch) {
  const int64_t d = pool.head_dim;
  const int64_t offset = static_cast<int64_t>(page.id) * pool.page_size * d;
  if (pool.dtype == DType::kF32) return static_cast<const float*>(pool.k) + offset;
  scratch->resize(static_cast<size_t>(pool.page_size * d));
  const uint16_t* src = static_cast<const uint16_t*>(pool.k) + offset;
  const bool bf16 = pool.dtype == DType::kBF16;
  for (int64_t i = 0; i < page.len * d; ++i) {
    (*scratch)[i] = bf16 ? Bf16ToF32(src[i]) : F16ToF32(src[i]);
  }
  return scratch->data();
}

// Best q.k over the page's keys and the group's query heads.
float PageScore(const KvPoolView& pool, const PageRef& page, const float* q, int group,
                std::vector<float>* scratch) {
  const int d = pool.head_dim;
  const float* k = PageKeys(pool, page, scratch);
  float best = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < page.len; ++t) {
    for (int g = 0; g < group; ++g) {
      best =
          std::max(best, DotF(q + static_cast<size_t>(g) * d, k + static_cast<size_t>(t) * d, d));
    }
  }
  return best;
}

class SpanScorer : public ChunkScorer {
 public:
  SpanScorer(const KvPoolView& pool, const std::vector<PageRef>& pages,
             const std::vector<ChunkSpan>& spans, const float* q, int group,
             std::vector<float>* scratch)
      : pool_(pool), pages_(pages), spans_(spans), q_(q), group_(group), scratch_(scratch) {}
  float Score(int32_t chunk) override {
    const ChunkSpan& s = spans_[chunk];
    float best = -std::numeric_limits<float>::infinity();
    for (int32_t i = s.page_begin; i < s.page_begin + s.pages; ++i) {
      best = std::max(best, PageScore(pool_, pages_[i], q_, group_, scratch_));
    }
    return best;
  }

 private:
  const KvPoolView& pool_;
  const std::vector<PageRef>& pages_;
  const std::vector<ChunkSpan>& spans_;
  const float* q_;
  int group_;
  std::vector<float>* scratch_;
};

uint64_t SeedFor(int layer, int head, int64_t build) {
  return 0x6c79636865650000ull ^ (static_cast<uint64_t>(layer) << 32) ^
         (static_cast<uint64_t>(head) << 16) ^ static_cast<uint64_t>(build);
}

}  // namespace

LycheeIndex::LycheeIndex(const IndexContext& context)
    : context_(context),
      lens_(ChunkLengthsFor(context.layout.page_size)),
      classifier_(context.tokenizer) {
  const int p = context_.layout.page_size;
  sink_pages_ = (context_.limits.sink + p - 1) / p;
  heads_.assign(static_cast<size_t>(context_.layout.n_layers) * context_.layout.n_kv_heads,
                ClusterIndex(context_.layout.head_dim, context_.config.rank == "spread"));
}

int64_t LycheeIndex::rebuilds() const {
  int64_t n = 0;
  for (const ClusterIndex& h : heads_) n += h.rebuilds();
  return n;
}

void LycheeIndex::DropIdsBefore(int64_t pos) {
  const int64_t drop = std::clamp<int64_t>(pos - frontier_, 0, static_cast<int64_t>(ids_.size()));
  ids_.erase(ids_.begin(), ids_.begin() + drop);
}

Status LycheeIndex::OnAppend(KvSequence& seq, int64_t first, std::span<const int32_t> tokens) {
  const int64_t len = seq.length();
  if (first < length_) {  // tokens were dropped (only the positional tail can be)
    ids_.resize(static_cast<size_t>(std::max<int64_t>(0, first - frontier_)));
    length_ = first;
  }
  // Token ids of positions [frontier_, len): unknown ones (never shown) count as no boundary.
  ids_.resize(static_cast<size_t>(std::max<int64_t>(0, length_ - frontier_)), -1);
  for (int64_t pos = std::max(length_, frontier_); pos < len; ++pos) {
    const int64_t i = pos - first;
    ids_.push_back(i >= 0 && i < static_cast<int64_t>(tokens.size()) ? tokens[i] : -1);
  }
  length_ = len;
  const int n_layers = context_.layout.n_layers;
  if (context_.config.dense_layers >= n_layers) return Status::Ok();  // nothing is sparse
  if (!started_) {
    if (seq.tail_index(context_.config.dense_layers, 0) > 0) {
      ICECACHE_RETURN_IF_ERROR(Adopt(seq));
    } else if (len <= context_.limits.budget) {
      return Status::Ok();  // the whole context fits the budget: nothing to index yet
    }
  }
  const size_t first_chunk = spans_.size();
  Absorb(seq);
  if (spans_.size() > first_chunk && !centroid()) UpdateIndexes(seq, first_chunk);
  return Status::Ok();
}

int64_t LycheeIndex::AppendPagesBound(const KvSequence& seq) {
  const int p = context_.layout.page_size;
  const int l0 = context_.config.dense_layers, n_layers = context_.layout.n_layers;
  if (l0 >= n_layers) return 0;
  if (!started_) {
    // Not counted: a fork's lists (adopted first) and a first absorption (it moves the sink).
    const bool idle = seq.tail_index(l0, 0) == 0 && seq.length() <= context_.limits.budget;
    return idle ? 0 : -1;
  }
  const int64_t limit = seq.length() - context_.limits.window;
  if (limit - absorbed_ < p) return 0;
  // Each list re-lays the tokens from the frontier to at most `limit` into fresh pages, at most
  // one page per token (chunks of one token) plus the pending tokens' page, and the lists apply
  // one after another, each freeing its old pages only after it allocated its new ones.
  const int64_t lists = static_cast<int64_t>(n_layers - l0) * context_.layout.n_kv_heads;
  return lists * (limit - frontier_ + 1);
}

Status LycheeIndex::Adopt(const KvSequence& seq) {
  const int l0 = context_.config.dense_layers;
  const int heads = context_.layout.n_kv_heads;
  const std::vector<PageRef>& ref = seq.pages(l0, 0);
  const int32_t tail = seq.tail_index(l0, 0);
  if (tail < sink_pages_) {
    return Unsupported("lychee: cannot take over a sequence whose sink pages were re-arranged");
  }
  for (int l = l0; l < context_.layout.n_layers; ++l) {
    for (int h = 0; h < heads; ++h) {
      const std::vector<PageRef>& pages = seq.pages(l, h);
      bool same = seq.tail_index(l, h) == tail && seq.tail_pos(l, h) == seq.tail_pos(l0, 0);
      for (int32_t i = 0; same && i < tail; ++i) same = pages[i].len == ref[i].len;
      if (!same) {
        return Unsupported(
            "lychee: cannot take over a sequence whose lists were arranged differently (fork from "
            "a lychee session with the same dense layers)");
      }
    }
  }
  // Every page after the sink becomes a chunk of its own.
  const KvPoolView pool = seq.pool().view();
  for (int32_t i = sink_pages_; i < tail; ++i) {
    spans_.push_back(
        {i, 1, ref[i].len, pool.positions[static_cast<int64_t>(ref[i].id) * pool.page_size]});
  }
  started_ = true;
  chunk_pages_end_ = tail;
  pending_pages_ = 0;
  const int64_t tail_pos = seq.tail_pos(l0, 0);
  DropIdsBefore(tail_pos);
  frontier_ = absorbed_ = tail_pos;
  if (!spans_.empty() && !centroid()) UpdateIndexes(seq, 0);
  return Status::Ok();
}

void LycheeIndex::Absorb(KvSequence& seq) {
  const int p = context_.layout.page_size;
  const int l0 = context_.config.dense_layers;
  const int n_layers = context_.layout.n_layers, heads = context_.layout.n_kv_heads;
  const int64_t limit = length_ - context_.limits.window;  // positions before it left the window
  if (!started_) {
    // The sink pages stay where they are: they only leave the tail.
    if (static_cast<int64_t>(sink_pages_) * p > limit) return;
    for (int l = l0; l < n_layers; ++l) {
      for (int h = 0; h < heads; ++h) seq.AdvanceTail(l, h, sink_pages_);
    }
    started_ = true;
    const int64_t start = static_cast<int64_t>(sink_pages_) * p;
    DropIdsBefore(start);
    frontier_ = absorbed_ = start;
    chunk_pages_end_ = sink_pages_;
    pending_pages_ = 0;
  }
  if (limit - absorbed_ < p) return;
  AbsorbPlan plan;
  plan.keep_pages = chunk_pages_end_;
  plan.old_pending_pages = pending_pages_;
  plan.pending_pos = frontier_;
  plan.tail_pos = absorbed_;
  plan.advance_pages = static_cast<int32_t>((limit - absorbed_) / p);
  const int64_t end = absorbed_ + static_cast<int64_t>(plan.advance_pages) * p;
  // Cut chunks with the tokens known so far (the window gives the look-ahead).
  int64_t cursor = frontier_;
  while (true) {
    const int cut =
        NextCut(std::span<const int32_t>(ids_).subspan(cursor - frontier_), classifier_, lens_);
    if (cut == 0 || cursor + cut > end) break;
    plan.chunk_lens.push_back(cut);
    cursor += cut;
  }
  plan.new_pending_tokens = static_cast<int32_t>(end - cursor);
  // Every indexed list allocates and frees the same number of pages; re-arrange only when the
  // pool can hold the new pages of all of them, else leave the pages in the tail this time
  // (Select scores them as loose pages).
  const int64_t lists = static_cast<int64_t>(n_layers - l0) * heads;
  const int64_t need = plan.PagesAllocated(p);
  const int64_t net = std::max<int64_t>(0, need - plan.PagesFreed());
  if (seq.pool().spare() < need + (lists - 1) * net) {
    ++skipped_;
    return;
  }
  for (int l = l0; l < n_layers; ++l) {
    for (int h = 0; h < heads; ++h) {
      const Status s = ApplyAbsorb(seq, l, h, plan);
      ICECACHE_CHECK_MSG(s.ok(), "lychee: pages were counted before re-arranging");
    }
  }
  int64_t pos = frontier_;
  int32_t page = chunk_pages_end_;
  for (int32_t cut : plan.chunk_lens) {
    const int32_t n = (cut + p - 1) / p;
    spans_.push_back({page, n, cut, pos});
    page += n;
    pos += cut;
  }
  chunk_pages_end_ = page;
  pending_pages_ = (plan.new_pending_tokens + p - 1) / p;
  DropIdsBefore(cursor);
  frontier_ = cursor;
  absorbed_ = end;
}

void LycheeIndex::UpdateIndexes(const KvSequence& seq, size_t first_chunk) {
  const KvPoolView pool = seq.pool().view();
  const int d = context_.layout.head_dim;
  for (int l = context_.config.dense_layers; l < context_.layout.n_layers; ++l) {
    for (int h = 0; h < context_.layout.n_kv_heads; ++h) {
      ClusterIndex& index = head(l, h);
      const std::vector<PageRef>& pages = seq.pages(l, h);
      keys_.clear();
      offsets_.assign(1, 0);
      for (size_t c = first_chunk; c < spans_.size(); ++c) {
        GatherKeys(pool, pages, spans_[c].page_begin, spans_[c].pages, &keys_);
        offsets_.push_back(static_cast<int64_t>(keys_.size()) / d);
      }
      for (size_t i = 0; i + 1 < offsets_.size(); ++i) {
        index.AddChunk(keys_.data() + offsets_[i] * d,
                       static_cast<int>(offsets_[i + 1] - offsets_[i]),
                       spans_[first_chunk + i].pages);
      }
      if (!index.built() || index.chunks() >= ClusterIndex::kRebuildGrowth * index.built_chunks()) {
        Rebuild(seq, l, h);
        continue;
      }
      for (size_t i = 0; i + 1 < offsets_.size(); ++i) {
        index.Insert(static_cast<int32_t>(first_chunk + i), keys_.data() + offsets_[i] * d,
                     static_cast<int>(offsets_[i + 1] - offsets_[i]));
      }
      if (index.NeedsRebuild()) Rebuild(seq, l, h);
    }
  }
}

void LycheeIndex::Rebuild(const KvSequence& seq, int layer, int h) {
  const KvPoolView pool = seq.pool().view();
  const int d = context_.layout.head_dim;
  const std::vector<PageRef>& pages = seq.pages(layer, h);
  keys_.clear();
  offsets_.assign(1, 0);
  for (const ChunkSpan& s : spans_) {
    GatherKeys(pool, pages, s.page_begin, s.pages, &keys_);
    offsets_.push_back(static_cast<int64_t>(keys_.size()) / d);
  }
  ClusterIndex& index = head(layer, h);
  index.Build({keys_.data(), offsets_}, SeedFor(layer, h, index.rebuilds()));
}

void LycheeIndex::Select(const KvSequence& seq, int layer, const float* q,
                         std::span<std::vector<PageRef>> out, SelectionStats* stats) {
  const int heads = context_.layout.n_kv_heads, d = context_.layout.head_dim;
  const int group = context_.n_heads / heads;
  const SelectionLimits& lim = context_.limits;
  const KvPoolView pool = seq.pool().view();
  KeyReader reader(pool);
  searched_.clear();
  for (int h = 0; h < heads; ++h) {
    out[h].clear();
    const std::vector<PageRef>& pages = seq.pages(layer, h);
    if (seq.length() <= lim.budget && static_cast<int>(pages.size()) <= lim.max_pages) {
      SelectAll(seq, layer, h, &out[h]);
    } else if (centroid()) {
      const float* qh = q + static_cast<size_t>(h) * group * d;
      ranker_.Select(seq, layer, h, RegionsOf(seq, layer, h, lim), lim, qh, group, reader, &out[h],
                     stats);
    } else {
      searched_.push_back(h);
    }
  }
  // The bound search, one KV head per worker thread where the engine lends some.
  SearchHeads(context_.workers, searched_, &scratch_, stats, [&](int h, HeadScratch* s) {
    SearchHead(seq, layer, h, q + static_cast<size_t>(h) * group * d, &out[h], s);
  });
}

void LycheeIndex::SearchHead(const KvSequence& seq, int layer, int h, const float* qh,
                             std::vector<PageRef>* out, HeadScratch* s) const {
  const int d = context_.layout.head_dim;
  const int group = context_.n_heads / context_.layout.n_kv_heads;
  const SelectionLimits& lim = context_.limits;
  const KvPoolView pool = seq.pool().view();
  const std::vector<PageRef>& pages = seq.pages(layer, h);
  const ListRegions r = RegionsOf(seq, layer, h, lim);
  // Loose pages: pending pages and tail pages older than the window, scored exactly.
  const bool indexed = started_ && Indexed(layer);
  const int32_t loose_begin = std::max(r.sink_end, indexed ? chunk_pages_end_ : 0);
  s->loose.clear();
  s->loose_page.clear();
  for (int32_t i = loose_begin; i < r.window_begin; ++i) {
    if (pages[i].len == 0) continue;
    s->loose.push_back({PageScore(pool, pages[i], qh, group, &s->floats), pages[i].len, 1});
    s->loose_page.push_back(i);
    s->stats.keys_scored += static_cast<int64_t>(pages[i].len) * group;
  }
  const int64_t tokens = static_cast<int64_t>(lim.budget) - r.sink_tokens - r.window_tokens;
  const int64_t page_room =
      static_cast<int64_t>(lim.max_pages) - r.sink_end - (r.end - r.window_begin);
  SpanScorer scorer(pool, pages, spans_, qh, group, &s->floats);
  static const ClusterIndex kEmpty;
  const ClusterIndex& index = indexed ? head_index(layer, h) : kEmpty;
  const KvConfig& kv = context_.config;
  if (kv.rank == "spread") {
    SpreadSelect(index, {qh, group, d, 1.0f, kv.ResolvedSearchRadius()}, s->loose, tokens,
                 page_room, scorer, &s->search, &s->picks, &s->stats);
  } else {
    SelectUnits(index, {qh, group, d, kv.exact ? 1.0f : kv.ResolvedSearchRadius()}, s->loose,
                tokens, page_room, scorer, &s->search, &s->picks, &s->stats);
  }
  std::vector<PageRef>& o = *out;
  for (int32_t i = 0; i < r.sink_end; ++i) o.push_back(pages[i]);
  for (const Pick& pick : s->picks) {
    if (pick.loose) {
      o.push_back(pages[s->loose_page[pick.id]]);
    } else {
      const ChunkSpan& span = spans_[pick.id];
      for (int32_t i = span.page_begin; i < span.page_begin + span.pages; ++i) {
        o.push_back(pages[i]);
      }
    }
  }
  for (int32_t i = r.window_begin; i < r.end; ++i) o.push_back(pages[i]);
}

void LycheeIndex::OnTruncate(const KvSequence& seq) {
  const int64_t len = seq.length();
  if (len >= length_) return;
  ICECACHE_CHECK(len >= absorbed_);
  ids_.resize(static_cast<size_t>(std::max<int64_t>(0, len - frontier_)));
  length_ = len;
}

int64_t LycheeIndex::MemoryBytes() const {
  int64_t b = static_cast<int64_t>(spans_.capacity()) * sizeof(ChunkSpan) +
              static_cast<int64_t>(ids_.capacity()) * 4;
  for (const ClusterIndex& h : heads_) b += h.MemoryBytes();
  return b + ranker_.MemoryBytes();
}

}  // namespace lychee

Result<std::unique_ptr<SequenceIndex>> MakeLycheeIndex(const IndexContext& context) {
  if (context.n_heads <= 0 || context.layout.n_kv_heads <= 0 ||
      context.n_heads % context.layout.n_kv_heads != 0) {
    return InvalidArgument("lychee: query heads must be a multiple of KV heads");
  }
  return std::unique_ptr<SequenceIndex>(new lychee::LycheeIndex(context));
}

}  // namespace icecache
