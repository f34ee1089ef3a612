// Best-bound-first selection over a ClusterIndex, exact with respect to exhaustive scoring when
// radius_scale is 1. Below 1 every bound is narrowed to max_g (q_g.c + s |q_g| r): the search
// stays the same, but nodes whose narrowed bound falls below the unit that ends the fill are
// never opened, an approximation that opens far fewer nodes on real keys.
//
// Units are the index's chunks plus loose pages the caller scored exactly (pages not in any
// chunk yet). A unit's score is its best q.k over its keys and over the query heads of the GQA
// group. The selection is what an exhaustive scan would choose: units in descending score while
// they fit the token and page budget, up to the first one that does not (k = what still fits).
// The search reaches the same result while computing fewer bounds: a max-heap holds coarse
// units, fine clusters and chunks keyed by their bound max_g (q_g.c + |q_g| r), and scored units
// keyed by their score. When a scored unit is on top, nothing below any other entry can beat it,
// so it is the next unit of the exhaustive order; the search stops at the first that does not
// fit, leaving every node whose bound is below that score unexpanded.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "index/lychee/cluster_index.h"
#include "index/policy.h"

namespace icecache::lychee {

struct LooseUnit {
  float score = 0;
  int32_t tokens = 0;
  int32_t pages = 1;
};

struct Pick {
  bool loose = false;
  int32_t id = 0;  // chunk id, or index into the loose units
};

// Exact best q.k of a chunk (over its keys and the group's query heads).
class ChunkScorer {
 public:
  virtual ~ChunkScorer() = default;
  virtual float Score(int32_t chunk) = 0;
};

struct SearchQuery {
  const float* q = nullptr;  // [group][dim], the query heads of one KV head
  int group = 1;
  int dim = 0;
  float radius_scale = 1;  // 1: exact bounds; < 1: narrowed bounds (see above)
};

// Reused between calls so that the search allocates nothing once warm.
struct SearchScratch {
  struct Entry {
    float key;
    int8_t kind;
    int32_t id;
  };
  std::vector<Entry> heap;
  std::vector<float> q_norm;
};

// Appends the picks, in selection order, to `picks` (cleared first). `index` may be unbuilt
// (then only loose units compete). Adds bounds computed to stats->nodes_visited and exact q.k
// products (keys x group) to stats->keys_scored.
void SelectUnits(const ClusterIndex& index, const SearchQuery& query,
                 std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                 ChunkScorer& scorer, SearchScratch* scratch, std::vector<Pick>* picks,
                 SelectionStats* stats);

// The exhaustive reference: every unit scored exactly (chunk_scores[i] for chunk i), then the
// same greedy fill. For tests.
void SelectUnitsExhaustive(const ClusterIndex& index, std::span<const float> chunk_scores,
                           std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                           std::vector<Pick>* picks);

}  // namespace icecache::lychee
