// Selection over a LeafTree: which leaves (and loose pages) fill a step's budget.
//
// Units are the tree's leaves plus loose pages (pages before the window that are in no leaf
// yet, scored by the caller). Both searches fill the room greedily in descending score.
//
// BestFirstSelect (default): a best-first descent that only narrows the search. Nodes come
// out of a priority queue by an estimate of the best score below them, max_g (q_g.c + w
// sqrt(2 ln n) s_g): s_g = sqrt(sum_j q_gj^2 var_j) is the spread of the node's n keys along q_g
// (var_j the per-dimension variance kept in the tree), and sqrt(2 ln n) spreads is about where
// the best of n normal draws sits above their mean. The weight w in [0, 1] sets how far past the
// mean the search looks: 0 is the centroid alone, which shrinks toward the mean for large nodes.
// Unlike the radius bound q.c + |q| r, which on real keys ranks nodes by size more than by
// direction, the estimate follows the keys' spread in the query's direction. Where the node's
// farthest key (leaf_tree.h) scores higher, max_g q_g.f, that real score is the key instead: a
// node whose keys mostly look elsewhere but hold one key far out in the query's direction (a
// needle's digit among unrelated keys) is not left behind; a per-dimension variance spreads
// such a key over every dimension and would miss it.
// An inner node that comes out is expanded (its children's bounds are computed, and counted); a
// leaf that comes out becomes a candidate, until `leaves` candidates.
// The work therefore follows the query, not the context: where the best keys sit in a few
// subtrees only those are opened. The candidates (and the loose units) are then ranked by exact
// score (from their keys and the group's query heads, through LeafScorer; at most the best q.k),
// computed best-bound-first so that a candidate whose true bound cannot beat the unit that ends
// the fill is never scored. Units fill the room in descending score until one does not fit.
//
// ExactSelect (config.exact): a unit's score is its bound (a leaf's from its stored centroid
// and radius), and the result is exactly what ExhaustiveSelect gives: every unit in the order
// (score descending, leaves before loose pages, then smaller id), taken while it fits, stopping
// at the first that does not. A max-heap holds inner nodes keyed by their bound and units keyed
// by their score; a parent's bound is at least its children's (leaf_tree.h), and at equal keys
// nodes come out first, so when a unit is on top nothing unexpanded can come before it in the
// exhaustive order: it is the next unit of that order. Nodes whose bound is below the unit
// that stops the fill are never expanded.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "index/icecache/leaf_tree.h"
#include "index/lychee/search.h"
#include "index/policy.h"

namespace icecache::ice {

struct TreeQuery {
  const float* q = nullptr;  // [group][dim]: the query heads of one KV head
  int group = 1;
  int dim = 0;
  // [group], or null: subtracted from each query head's q.k wherever BestFirstSelect and the
  // scorers compare heads (each head's log softmax normalizer in q.k units, head_norm.h), so
  // that scores rank by attention mass. ExactSelect does not read it.
  const float* shift = nullptr;
};

inline float ShiftOf(const TreeQuery& query, int g) {
  return query.shift != nullptr ? query.shift[g] : 0.0f;
}

// Loose units (score, tokens; pages is 1) and picks (a leaf id, or an index into the loose units)
// are lychee's.
using lychee::LooseUnit;
using lychee::Pick;

// Exact score of a leaf from its keys and the group's query heads; it must not exceed the best
// q.k among them (so the leaf's bound caps it).
class LeafScorer {
 public:
  virtual ~LeafScorer() = default;
  virtual float Score(int32_t leaf) = 0;
};

// Reused between calls so that a warm search allocates nothing.
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
    int32_t id;   // node
  };
  std::vector<Open> open;  // BestFirstSelect's queue of nodes
};

// Per-head norms (scratch->q_norm, for Bound) and squared coordinates (scratch->q_sq) of the
// query.
void PrepareQuery(const TreeQuery& query, SearchScratch* scratch);
// max_g (q_g.c + |q_g| r). REQUIRES: PrepareQuery(query, ...) filled q_norm.
float Bound(const TreeQuery& query, const std::vector<float>& q_norm, const float* c, float r);

// Room: `tokens` tokens and `pages` pages. Picks (cleared first) come in selection order.
// Bounds computed are added to stats->nodes_visited, exact q.k products (keys x group) to
// stats->keys_scored.
// How far BestFirstSelect searches: the weight w of the keys' spread in its estimate, and how
// many leaves it gathers as candidates. IceCacheIndex::Width sets them from the KvConfig
// (--kv-search-radius, whose icecache default is KvConfig::ResolvedSearchRadius's).
struct SearchWidth {
  float spread_weight = 0;
  int leaves = 1;
};

void BestFirstSelect(const LeafTree& tree, const TreeQuery& query, const SearchWidth& width,
                     std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                     LeafScorer& scorer, SearchScratch* scratch, std::vector<Pick>* picks,
                     SelectionStats* stats);
void ExactSelect(const LeafTree& tree, const TreeQuery& query, std::span<const LooseUnit> loose,
                 int64_t tokens, int64_t pages, SearchScratch* scratch, std::vector<Pick>* picks,
                 SelectionStats* stats);
// The reference for ExactSelect: every leaf scored by its bound. For tests.
void ExhaustiveSelect(const LeafTree& tree, const TreeQuery& query,
                      std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                      std::vector<Pick>* picks);

}  // namespace icecache::ice
