#include "index/icecache/tree_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "index/icecache/mips.h"

namespace icecache::ice {

namespace {

// Entry kinds, in the order they win ties: an inner node whose bound equals a unit's score is
// expanded first (it may hold an equal leaf with a smaller id); leaves come before loose pages,
// then smaller ids first, as in the exhaustive order.
enum Kind : int8_t { kNode = 0, kLeaf = 1, kLoose = 2 };

using Entry = SearchScratch::Entry;

// Heap order: true when `a` comes out after `b`.
bool Later(const Entry& a, const Entry& b) {
  if (a.key != b.key) return a.key < b.key;
  if (a.kind != b.kind) return a.kind > b.kind;
  return a.id > b.id;
}

void Push(std::vector<Entry>* heap, float key, int8_t kind, int32_t id) {
  heap->push_back({key, kind, id});
  std::push_heap(heap->begin(), heap->end(), Later);
}

// Appends the unit of `e` to `picks` if it fits the room (and shrinks the room); false if not.
bool Take(const LeafTree& tree, std::span<const LooseUnit> loose, const Entry& e, int64_t* tokens,
          int64_t* pages, std::vector<Pick>* picks) {
  const bool is_loose = e.kind == kLoose;
  const int64_t t = is_loose ? loose[e.id].tokens : tree.node(tree.leaf_node(e.id)).count;
  if (t > *tokens || *pages < 1) return false;
  picks->push_back({is_loose, e.id});
  *tokens -= t;
  --*pages;
  return true;
}

float NodeBound(const LeafTree& tree, const TreeQuery& query, const std::vector<float>& q_norm,
                int32_t node) {
  return Bound(query, q_norm, tree.centroid(node), tree.node(node).radius);
}

}  // namespace

void PrepareQuery(const TreeQuery& query, SearchScratch* scratch) {
  scratch->q_norm.resize(query.group);
  for (int g = 0; g < query.group; ++g) {
    scratch->q_norm[g] = Norm(query.q + static_cast<size_t>(g) * query.dim, query.dim);
  }
  scratch->q_sq.resize(static_cast<size_t>(query.group) * query.dim);
  for (size_t i = 0; i < scratch->q_sq.size(); ++i) scratch->q_sq[i] = query.q[i] * query.q[i];
}

float Bound(const TreeQuery& query, const std::vector<float>& q_norm, const float* c, float r) {
  float b = -std::numeric_limits<float>::infinity();
  for (int g = 0; g < query.group; ++g) {
    b = std::max(b,
                 DotF(query.q + static_cast<size_t>(g) * query.dim, c, query.dim) + q_norm[g] * r);
  }
  return b;
}

void BestFirstSelect(const LeafTree& tree, const TreeQuery& query, const SearchWidth& width,
                     std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                     LeafScorer& scorer, SearchScratch* scratch, std::vector<Pick>* picks,
                     SelectionStats* stats) {
  picks->clear();
  std::vector<Entry>& heap = scratch->heap;
  heap.clear();
  auto push = [&](float key, int8_t kind, int32_t id) { Push(&heap, key, kind, id); };
  for (size_t i = 0; i < loose.size(); ++i) push(loose[i].score, kLoose, static_cast<int32_t>(i));
  if (!tree.empty()) {
    ICECACHE_CHECK_MSG(tree.search_stats(), "best-first search over a tree without search stats");
    PrepareQuery(query, scratch);
    // Nodes come out best first by the key max_g max(q_g.c + w sqrt(2 ln n) s_g, q_g.f), s_g the
    // keys' spread along q_g and f the node's farthest key; an inner node that comes out is
    // expanded, a leaf becomes a candidate, until `width.leaves` candidates. Each node's q.c is
    // computed once: with it, the estimate orders the queue and the true bound keys a candidate
    // in the scoring below.
    std::vector<SearchScratch::Open>& open = scratch->open;  // a max-heap by key
    const auto less = [](const SearchScratch::Open& a, const SearchScratch::Open& b) {
      return a.key < b.key || (a.key == b.key && a.id > b.id);
    };
    auto add = [&](int32_t id) {
      const LeafTree::Node& n = tree.node(id);
      float key = -std::numeric_limits<float>::infinity(), bound = key;
      // w sqrt(2 ln n): the best of n draws of a normal score sits about sqrt(2 ln n) standard
      // deviations above their mean.
      const float reach = width.spread_weight *
                          std::sqrt(2.0f * std::log(static_cast<float>(std::max(2, n.count))));
      for (int g = 0; g < query.group; ++g) {
        const float qc =
            DotF(query.q + static_cast<size_t>(g) * query.dim, tree.centroid(id), query.dim) -
            ShiftOf(query, g);
        // The spread of the node's keys along q_g: sqrt(sum_j q_gj^2 var_j).
        const float spread =
            std::sqrt(std::max(0.0f, DotF(scratch->q_sq.data() + static_cast<size_t>(g) * query.dim,
                                          tree.variance(id), query.dim)));
        // The estimate, or the score of the node's farthest key where that is higher: a key far
        // out in the query's direction is a real score, which the estimate alone would miss in a
        // node whose other keys look elsewhere.
        const float qf =
            DotF(query.q + static_cast<size_t>(g) * query.dim, tree.far_key(id), query.dim) -
            ShiftOf(query, g);
        key = std::max(key, std::max(qc + reach * spread, qf));
        bound = std::max(bound, qc + scratch->q_norm[g] * n.radius);
      }
      open.push_back({key, bound, id});
      std::push_heap(open.begin(), open.end(), less);
      ++stats->nodes_visited;
    };
    open.clear();
    add(tree.root());
    for (int found = 0; !open.empty() && found < width.leaves;) {
      std::pop_heap(open.begin(), open.end(), less);
      const SearchScratch::Open top = open.back();
      open.pop_back();
      const LeafTree::Node& n = tree.node(top.id);
      if (n.level == 0) {
        push(top.bound, kNode, n.leaf);
        ++found;
        continue;
      }
      for (int32_t ch : n.children) add(ch);
    }
  }
  // Best first: a candidate on top by its bound is scored exactly and goes back by its score; a
  // scored unit on top beats everything left (no bound below it is higher), so units come out in
  // descending exact score, as if every candidate had been scored, and candidates whose bound is
  // below the unit that stops the fill are never scored.
  while (!heap.empty() && tokens > 0 && pages > 0) {
    std::pop_heap(heap.begin(), heap.end(), Later);
    const Entry e = heap.back();
    heap.pop_back();
    if (e.kind == kNode) {
      push(scorer.Score(e.id), kLeaf, e.id);
      stats->keys_scored +=
          static_cast<int64_t>(tree.node(tree.leaf_node(e.id)).count) * query.group;
      continue;
    }
    if (!Take(tree, loose, e, &tokens, &pages, picks)) break;
  }
}

void ExactSelect(const LeafTree& tree, const TreeQuery& query, std::span<const LooseUnit> loose,
                 int64_t tokens, int64_t pages, SearchScratch* scratch, std::vector<Pick>* picks,
                 SelectionStats* stats) {
  picks->clear();
  std::vector<Entry>& heap = scratch->heap;
  heap.clear();
  auto push = [&](float key, int8_t kind, int32_t id) { Push(&heap, key, kind, id); };
  if (!tree.empty()) {
    PrepareQuery(query, scratch);
    push(NodeBound(tree, query, scratch->q_norm, tree.root()), kNode, tree.root());
    ++stats->nodes_visited;
  }
  for (size_t i = 0; i < loose.size(); ++i) push(loose[i].score, kLoose, static_cast<int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), Later);
    const Entry e = heap.back();
    heap.pop_back();
    if (e.kind == kNode) {
      for (int32_t ch : tree.node(e.id).children) {
        const LeafTree::Node& child = tree.node(ch);
        const float b = NodeBound(tree, query, scratch->q_norm, ch);
        if (child.level == 0) {
          push(b, kLeaf, child.leaf);
        } else {
          push(b, kNode, ch);
        }
      }
      stats->nodes_visited += static_cast<int64_t>(tree.node(e.id).children.size());
      continue;
    }
    // The next unit of the exhaustive order: take it, or stop at the first that does not fit.
    if (!Take(tree, loose, e, &tokens, &pages, picks)) break;
  }
}

void ExhaustiveSelect(const LeafTree& tree, const TreeQuery& query,
                      std::span<const LooseUnit> loose, int64_t tokens, int64_t pages,
                      std::vector<Pick>* picks) {
  picks->clear();
  SearchScratch scratch;
  PrepareQuery(query, &scratch);
  std::vector<Entry> all;
  for (int32_t leaf = 0; leaf < tree.leaves(); ++leaf) {
    all.push_back({NodeBound(tree, query, scratch.q_norm, tree.leaf_node(leaf)), kLeaf, leaf});
  }
  for (size_t i = 0; i < loose.size(); ++i) {
    all.push_back({loose[i].score, kLoose, static_cast<int32_t>(i)});
  }
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return Later(b, a); });
  for (const Entry& e : all) {
    if (!Take(tree, loose, e, &tokens, &pages, picks)) break;
  }
}

}  // namespace icecache::ice
