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

}  // namespace

void SelectUnits(const ClusterIndex& index, const SearchQuery& query,
                 std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                 ChunkScorer& scorer, SearchScratch* scratch, std::vector<Pick>* picks,
                 SelectionStats* stats) {
  picks->clear();
  std::vector<Entry>& heap = scratch->heap;
  heap.clear();
  const int d = query.dim, group = query.group;
  scratch->q_norm.resize(group);
  for (int g = 0; g < group; ++g) {
    scratch->q_norm[g] = query.radius_scale * Norm(query.q + static_cast<size_t>(g) * d, d);
  }
  const float* qn = scratch->q_norm.data();
  auto bound = [&](const float* c, float r, int32_t) {
    float b = -std::numeric_limits<float>::infinity();
    for (int g = 0; g < group; ++g) {
      b = std::max(b, DotF(query.q + static_cast<size_t>(g) * d, c, d) + qn[g] * r);
    }
    return b;
  };
  auto push = [&](float key, int8_t kind, int32_t id) {
    heap.push_back({key, kind, id});
    std::push_heap(heap.begin(), heap.end(), Later);
  };

  const ClusterIndex::Level& coarse = index.coarse();
  const ClusterIndex::Level& fine = index.fine();
  if (index.built()) {
    ICECACHE_CHECK(index.complete());
    for (int32_t u = 0; u < coarse.size(); ++u) {
      push(bound(coarse.c(u, d), coarse.radius[u], coarse.keys[u]), kCoarse, u);
    }
    stats->nodes_visited += coarse.size();
  }
  for (size_t i = 0; i < loose.size(); ++i)
    push(loose[i].score, kScoredLoose, static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), Later);
    const Entry e = heap.back();
    heap.pop_back();
    if (e.kind == kCoarse) {
      for (int32_t f : coarse.children[e.id])
        push(bound(fine.c(f, d), fine.radius[f], fine.keys[f]), kFine, f);
      stats->nodes_visited += static_cast<int64_t>(coarse.children[e.id].size());
    } else if (e.kind == kFine) {
      for (int32_t ch : fine.children[e.id]) {
        push(bound(index.chunk_centroid(ch), index.chunk_radius(ch), index.chunk_tokens(ch)),
             kChunk, ch);
      }
      stats->nodes_visited += static_cast<int64_t>(fine.children[e.id].size());
    } else if (e.kind == kChunk) {
      push(scorer.Score(e.id), kScoredChunk, e.id);
      stats->keys_scored += static_cast<int64_t>(index.chunk_tokens(e.id)) * group;
    } else {
      // The best remaining unit: take it, or stop at the first one that does not fit.
      const bool is_loose = e.kind == kScoredLoose;
      const int64_t t = is_loose ? loose[e.id].tokens : index.chunk_tokens(e.id);
      const int64_t p = is_loose ? loose[e.id].pages : index.chunk_pages(e.id);
      if (t > tokens || p > pages) break;
      picks->push_back({is_loose, e.id});
      tokens -= t;
      pages -= p;
    }
  }
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
    const bool is_loose = e.kind == kScoredLoose;
    const int64_t t = is_loose ? loose[e.id].tokens : index.chunk_tokens(e.id);
    const int64_t p = is_loose ? loose[e.id].pages : index.chunk_pages(e.id);
    if (t > tokens || p > pages) break;
    picks->push_back({is_loose, e.id});
    tokens -= t;
    pages -= p;
  }
}

}  // namespace icecache::lychee
