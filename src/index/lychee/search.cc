#include "index/lychee/search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "index/lychee/vec_math.h"

namespace icecache::lychee {

namespace {

// Entry kinds, in the order they win ties: a node whose bound equals a scored unit's score is
// expanded first (it may hold an equal unit with a smaller id); scored chunks come before loose
// pages, then smaller ids first, as in the exhaustive order.
enum Kind : int8_t { kCoarse = 0, kFine = 1, kChunk = 2, kScoredChunk = 3, kScoredLoose = 4 };

using Entry = SearchScratch::Entry;

// Heap order: true when `a` comes out after `b`.
bool Later(const Entry& a, const Entry& b) {
  if (a.key != b.key) return a.key < b.key;
  if (a.kind != b.kind) return a.kind > b.kind;
  return a.id > b.id;
}

// Appends the scored unit of `e` to `picks` if it fits the room (and shrinks the room); false if
// not.
bool Take(const ClusterIndex& index, std::span<const LooseUnit> loose, const Entry& e,
          int64_t* tokens, int64_t* pages, std::vector<Pick>* picks) {
  const bool is_loose = e.kind == kScoredLoose;
  const int64_t t = is_loose ? loose[e.id].tokens : index.chunk_tokens(e.id);
  const int64_t p = is_loose ? loose[e.id].pages : index.chunk_pages(e.id);
  if (t > *tokens || p > *pages) return false;
  picks->push_back({is_loose, e.id});
  *tokens -= t;
  *pages -= p;
  return true;
}

void Push(std::vector<Entry>* heap, float key, int8_t kind, int32_t id) {
  heap->push_back({key, kind, id});
  std::push_heap(heap->begin(), heap->end(), Later);
}

// Clears `picks` and the heap, and puts the loose units on it (scored). The heap's order is total
// (Later), so what goes on it first does not matter.
std::vector<Entry>& StartFill(std::span<const LooseUnit> loose, SearchScratch* scratch,
                              std::vector<Pick>* picks) {
  picks->clear();
  std::vector<Entry>& heap = scratch->heap;
  heap.clear();
  for (size_t i = 0; i < loose.size(); ++i) {
    Push(&heap, loose[i].score, kScoredLoose, static_cast<int32_t>(i));
  }
  return heap;
}

// scratch->q_norm: `scale` |q_g| per query head.
void QueryNorms(const SearchQuery& query, float scale, SearchScratch* scratch) {
  scratch->q_norm.resize(query.group);
  for (int g = 0; g < query.group; ++g) {
    scratch->q_norm[g] = scale * Norm(query.q + static_cast<size_t>(g) * query.dim, query.dim);
  }
}

// max_g (q_g.c + |q_g| r). REQUIRES: QueryNorms filled q_norm.
float Bound(const SearchQuery& query, const SearchScratch& scratch, const float* c, float r) {
  float b = -std::numeric_limits<float>::infinity();
  for (int g = 0; g < query.group; ++g) {
    b = std::max(b, DotF(query.q + static_cast<size_t>(g) * query.dim, c, query.dim) +
                        scratch.q_norm[g] * r);
  }
  return b;
}

// Pops `heap` until the room is full: a node on top is expanded (`expand` pushes its children),
// a candidate chunk on top is scored exactly and goes back by its score, and a scored unit on
// top is taken, or ends the fill if it does not fit.
template <typename Expand>
void Fill(const ClusterIndex& index, int group, std::span<const LooseUnit> loose, int64_t tokens,
          int64_t pages, ChunkScorer& scorer, std::vector<Entry>* heap, std::vector<Pick>* picks,
          SelectionStats* stats, Expand expand) {
  while (!heap->empty()) {
    std::pop_heap(heap->begin(), heap->end(), Later);
    const Entry e = heap->back();
    heap->pop_back();
    if (e.kind == kCoarse || e.kind == kFine) {
      expand(e);
    } else if (e.kind == kChunk) {
      Push(heap, scorer.Score(e.id), kScoredChunk, e.id);
      stats->keys_scored += static_cast<int64_t>(index.chunk_tokens(e.id)) * group;
    } else if (!Take(index, loose, e, &tokens, &pages, picks)) {
      break;  // the best remaining unit does not fit: the fill ends
    }
  }
}

}  // namespace

void SpreadSelect(const ClusterIndex& index, const SearchQuery& query,
                  std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                  ChunkScorer& scorer, SearchScratch* scratch, std::vector<Pick>* picks,
                  SelectionStats* stats) {
  std::vector<Entry>& heap = StartFill(loose, scratch, picks);
  auto push = [&](float key, int8_t kind, int32_t id) { Push(&heap, key, kind, id); };
  if (index.built()) {
    ICECACHE_CHECK(index.complete());
    ICECACHE_CHECK_MSG(index.spread_stats(), "spread search over an index without spread stats");
    QueryNorms(query, 1.0f, scratch);
    scratch->q_sq.resize(static_cast<size_t>(query.group) * query.dim);
    for (size_t i = 0; i < scratch->q_sq.size(); ++i) scratch->q_sq[i] = query.q[i] * query.q[i];
    const int d = query.dim;
    std::vector<SearchScratch::Open>& open = scratch->open;  // a max-heap by key
    const auto less = [](const SearchScratch::Open& a, const SearchScratch::Open& b) {
      if (a.key != b.key) return a.key < b.key;
      if (a.kind != b.kind) return a.kind > b.kind;
      return a.id > b.id;
    };
    // The estimate max_g max(q_g.c + w sqrt(2 ln n) s_g, q_g.f) of a node with n keys (search.h)
    // and its true bound; each q_g.c is computed once for both.
    auto add = [&](int8_t kind, int32_t id, const float* c, const float* var, const float* far,
                   float radius, int32_t n) {
      const float reach =
          query.spread_weight * std::sqrt(2.0f * std::log(static_cast<float>(std::max(2, n))));
      float key = -std::numeric_limits<float>::infinity(), bound = key;
      for (int g = 0; g < query.group; ++g) {
        const float* qg = query.q + static_cast<size_t>(g) * d;
        const float qc = DotF(qg, c, d);
        const float spread = std::sqrt(
            std::max(0.0f, DotF(scratch->q_sq.data() + static_cast<size_t>(g) * d, var, d)));
        key = std::max(key, std::max(qc + reach * spread, DotF(qg, far, d)));
        bound = std::max(bound, qc + scratch->q_norm[g] * radius);
      }
      open.push_back({key, bound, kind, id});
      std::push_heap(open.begin(), open.end(), less);
      ++stats->nodes_visited;
    };
    const ClusterIndex::Level& coarse = index.coarse();
    const ClusterIndex::Level& fine = index.fine();
    open.clear();
    for (int32_t u = 0; u < coarse.size(); ++u) {
      add(kCoarse, u, coarse.c(u, d), coarse.v(u, d), coarse.f(u, d), coarse.radius[u],
          coarse.keys[u]);
    }
    // Candidates until they hold the page room, then as many more chunks as the room has pages
    // (at least kExtraChunks).
    int64_t room = pages;
    int extra = 0;
    while (!open.empty() && (room > 0 || extra < std::max<int64_t>(kExtraChunks, pages))) {
      std::pop_heap(open.begin(), open.end(), less);
      const SearchScratch::Open top = open.back();
      open.pop_back();
      if (top.kind == kCoarse) {
        for (int32_t f : coarse.children[top.id]) {
          add(kFine, f, fine.c(f, d), fine.v(f, d), fine.f(f, d), fine.radius[f], fine.keys[f]);
        }
      } else if (top.kind == kFine) {
        for (int32_t ch : fine.children[top.id]) {
          add(kChunk, ch, index.chunk_centroid(ch), index.chunk_variance(ch), index.chunk_far(ch),
              index.chunk_radius(ch), index.chunk_tokens(ch));
        }
      } else {
        push(top.bound, kChunk, top.id);
        if (room > 0) {
          room -= index.chunk_pages(top.id);
        } else {
          ++extra;
        }
      }
    }
  }
  Fill(index, query.group, loose, tokens, pages, scorer, &heap, picks, stats,
       [](const Entry&) { ICECACHE_CHECK_MSG(false, "SpreadSelect queues no inner node"); });
}

void SelectUnits(const ClusterIndex& index, const SearchQuery& query,
                 std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                 ChunkScorer& scorer, SearchScratch* scratch, std::vector<Pick>* picks,
                 SelectionStats* stats) {
  std::vector<Entry>& heap = StartFill(loose, scratch, picks);
  const int d = query.dim;
  QueryNorms(query, query.radius_scale, scratch);
  auto bound = [&](const float* c, float r) { return Bound(query, *scratch, c, r); };
  auto push = [&](float key, int8_t kind, int32_t id) { Push(&heap, key, kind, id); };

  const ClusterIndex::Level& coarse = index.coarse();
  const ClusterIndex::Level& fine = index.fine();
  if (index.built()) {
    ICECACHE_CHECK(index.complete());
    for (int32_t u = 0; u < coarse.size(); ++u)
      push(bound(coarse.c(u, d), coarse.radius[u]), kCoarse, u);
    stats->nodes_visited += coarse.size();
  }
  Fill(index, query.group, loose, tokens, pages, scorer, &heap, picks, stats, [&](const Entry& e) {
    if (e.kind == kCoarse) {
      for (int32_t f : coarse.children[e.id]) push(bound(fine.c(f, d), fine.radius[f]), kFine, f);
      stats->nodes_visited += static_cast<int64_t>(coarse.children[e.id].size());
    } else {
      for (int32_t ch : fine.children[e.id]) {
        push(bound(index.chunk_centroid(ch), index.chunk_radius(ch)), kChunk, ch);
      }
      stats->nodes_visited += static_cast<int64_t>(fine.children[e.id].size());
    }
  });
}

void SelectUnitsExhaustive(const ClusterIndex& index, std::span<const float> chunk_scores,
                           std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                           std::vector<Pick>* picks) {
  picks->clear();
  std::vector<Entry> all;
  for (int32_t c = 0; c < index.chunks(); ++c) all.push_back({chunk_scores[c], kScoredChunk, c});
  for (size_t i = 0; i < loose.size(); ++i) {
    all.push_back({loose[i].score, kScoredLoose, static_cast<int32_t>(i)});
  }
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return Later(b, a); });
  for (const Entry& e : all) {
    if (!Take(index, loose, e, &tokens, &pages, picks)) break;
  }
}

}  // namespace icecache::lychee
