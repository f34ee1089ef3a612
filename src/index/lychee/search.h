// Selection over a ClusterIndex: which chunks (and loose pages) fill a step's budget.
//
// Units are the index's chunks plus loose pages the caller scored exactly (pages not in any
// chunk yet). A unit's score is its best q.k over its keys and over the query heads of the GQA
// group. Both searches fill the room with units in descending score while they fit the token
// and page budget, up to the first one that does not.
//
// SpreadSelect (--kv-rank spread): nodes come out of a queue by an estimate of the best score below
// them, max_g max(q_g.c + w sqrt(2 ln n) s_g, q_g.f), as icecache's BestFirstSelect orders its
// tree (index/icecache/tree_search.h, which says why): s_g = sqrt(sum_j q_gj^2 var_j) is the
// spread of the node's n keys along q_g and f the node's farthest key. A coarse unit or fine
// cluster that comes out is expanded (its children's estimates are computed, and counted as
// nodes); a chunk becomes a candidate, until the candidates hold the page room and then as many
// more chunks as the room has pages, at least kExtraChunks. The candidates and loose units are then
// ranked by exact score, computed best-bound-first (a candidate whose true bound max_g (q_g.c +
// |q_g| r) is below the unit that ends the fill is never scored). The search only narrows what is
// scored: it follows the query's direction through the index rather than the nodes' sizes.
//
// SelectUnits (the default): exact with respect to exhaustive scoring when radius_scale is 1
// (--kv-exact). A max-heap holds coarse units, fine clusters and chunks keyed by their bound
// max_g (q_g.c + |q_g| r), and scored units keyed by their score. When a scored unit is on top,
// nothing below any other entry can beat it, so it is the next unit of the exhaustive order; the
// search stops at the first that does not fit, leaving every node whose bound is below that
// score unexpanded. Below 1 every bound is narrowed to max_g (q_g.c + s |q_g| r): the search
// stays the same, but nodes whose narrowed bound falls below the unit that ends the fill are
// never opened, an approximation that opens far fewer nodes on real keys.
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
  float radius_scale = 1;      // SelectUnits: 1, exact bounds; < 1, narrowed (see above)
  float spread_weight = 0.2f;  // SpreadSelect's w in [0, 1]
};

// Candidate chunks SpreadSelect gathers beyond those that hold the page room, at the least
// (otherwise as many as the room has pages). On SmolLM2's keys of an 8K report, 8 extra chunks
// lost 0.02 to 0.03 of the decode's attention-mass recall at budgets 256 and 1024 against the
// exact search; 40, or the room's pages where more, lose under 0.01 (docs/PERF.md).
inline constexpr int kExtraChunks = 40;

// Reused between calls so that the search allocates nothing once warm.
struct SearchScratch {
  struct Entry {
    float key;
    int8_t kind;
    int32_t id;
  };
  std::vector<Entry> heap;
  std::vector<float> q_norm;
  std::vector<float> q_sq;  // [group][dim]: the query's squared coordinates
  struct Open {
    float key;    // the spread estimate, or the farthest key's score if higher
    float bound;  // true bound
    int8_t kind;  // coarse, fine or chunk
    int32_t id;
  };
  std::vector<Open> open;  // SpreadSelect's queue of nodes
};

// Appends the picks, in selection order, to `picks` (cleared first). `index` may be unbuilt
// (then only loose units compete). Adds bounds computed to stats->nodes_visited and exact q.k
// products (keys x group) to stats->keys_scored.
void SpreadSelect(const ClusterIndex& index, const SearchQuery& query,
                  std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                  ChunkScorer& scorer, SearchScratch* scratch, std::vector<Pick>* picks,
                  SelectionStats* stats);
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
