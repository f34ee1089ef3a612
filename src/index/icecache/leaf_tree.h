// The icecache tree of one (layer, KV head): leaves are physical KV pages (up to P keys each,
// partly filled), inner nodes group leaves, and every level is balanced (all leaves at depth
// `height`).
//
// Every node keeps the mean c of the keys below it, the mean extra coordinate `ext` of their
// lifted keys (mips.h), the key count and a radius r with |k - c| <= r for every key k below it
// (radii are in the original key space, so for any query q: q.k <= q.c + |q| r). Inner radii
// contain their children's balls: r_parent >= |c_parent - c_child| + r_child (plus a rounding
// slack), so a parent's bound is at least each child's bound, which the exact search relies on.
// Every node also keeps one real key below it, its farthest key f: for a leaf the key farthest
// from its mean (the one that sets the radius), for an inner node the children's farthest key
// farthest from its own mean. q.f is an actual score the best-first search can rank a node by.
// And every node keeps the per-dimension variance of the keys below it about its mean (an inner
// node's from its children's variances and means), so the search can estimate how far the
// node's keys spread along a query: sum_j q_j^2 var_j.
//
// Grouping is ball-tree style: the bulk build partitions the keys into leaves by recursive
// balanced bisection in k' space (balanced_split.h), then partitions each level's centroids into
// parents of kFanout / 2 to kFanout children, until one root is left. Later keys are routed to
// their nearest leaf (top-down search in k' space); a full leaf splits in two by balanced
// 2-means, and a node with more than kFanout children splits the same way (B-tree style, a new
// root when the root splits). The tree holds no K/V: the caller moves rows between pages and
// tells the tree the keys each leaf now has.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace icecache::ice {

// The ball of `n` >= 1 keys ([n][dim]): writes their mean to `centroid` ([dim]) and returns a
// radius r with |k - centroid| <= r for each of them (padded for rounding, mips.h Slack). With
// `farthest`, also the index of the key farthest from the mean (the first of equals).
float BallOf(const float* keys, int n, int dim, float* centroid, int* farthest = nullptr);
// The per-dimension variance of `n` >= 1 keys ([n][dim]) about their mean `centroid` into
// `variance` ([dim]).
void KeyVariance(const float* keys, int n, int dim, const float* centroid, float* variance);

class LeafTree {
 public:
  static constexpr int kFanout = 16;    // children per inner node (at most)
  static constexpr int kRouteBeam = 4;  // nodes kept per level when routing a key

  struct Node {
    int32_t parent = -1;
    int32_t level = 0;  // 0: a leaf
    int32_t leaf = -1;  // leaf id of a leaf node
    int32_t count = 0;  // keys below
    float ext = 0;      // mean extra coordinate of the lifted keys below
    float radius = 0;
    std::vector<int32_t> children;  // nodes one level down
  };

  // `search_stats`: keep each node's farthest key and key variances, which only the best-first
  // search reads (BestFirstSelect); a tree for the exact search or the centroid ranking leaves
  // them out, a third of the memory.
  explicit LeafTree(int dim = 0, bool search_stats = true)
      : dim_(dim), search_stats_(search_stats) {}

  // Drops everything (keeps dim).
  void Clear();

  // Bulk build: appends leaf `leaves()` with its keys ([n][dim], n >= 1). After the last one,
  // call BuildUpper. `max_sq_norm` must bound |k|^2 of every key (set_max_sq_norm first).
  int32_t AddLeaf(const float* keys, int n);
  // The same leaf as AddLeaf over its keys, from their ball (BallOf: `centroid` [dim], `radius`
  // and the farthest key, `far_key` [dim]), their variances (`variance` [dim]) and their squared
  // norms ([n], DotF(k, k)), computed beforehand. Without search_stats(), `far_key` and
  // `variance` are not read (may be null).
  int32_t AddLeafBall(const float* centroid, float radius, const float* far_key,
                      const float* variance, const float* sq_norms, int n);
  // Groups the leaves into inner levels up to one root. REQUIRES: leaves() >= 1 and no inner
  // nodes yet.
  void BuildUpper();

  // The leaf whose centroid is nearest to k' = [key ; ext] (beam search down the tree).
  // REQUIRES: !empty().
  int32_t NearestLeaf(const float* key, float ext) const;
  // Leaf `leaf` now holds `keys` ([n][dim], n >= 1): refreshes it and its ancestors.
  void UpdateLeaf(int32_t leaf, const float* keys, int n);
  // Between these two calls UpdateLeaf and SplitLeaf refresh leaves (and nodes they split) but
  // leave the inner nodes above them as they were; EndDeferredRefresh then refreshes each of
  // those once, bottom up. Routing (NearestLeaf) meanwhile sees the inner nodes as they were at
  // the start: one insertion of several keys refreshes each ancestor once instead of per key.
  void BeginDeferredRefresh() { deferred_ = true; }
  void EndDeferredRefresh();
  // Leaf `leaf` was split: it keeps `keys_a` and a new leaf (id leaves() before the call, the
  // return value) takes `keys_b`; the new leaf joins the same parent, and parents that overflow
  // split in turn.
  int32_t SplitLeaf(int32_t leaf, const float* keys_a, int na, const float* keys_b, int nb);

  // Sets M. When it grows, the caller must refresh every leaf (RefreshLeaf) and then call
  // RefreshInner, so that every `ext` is the mean for the new M.
  void set_max_sq_norm(float m) { max_sq_norm_ = m; }
  float max_sq_norm() const { return max_sq_norm_; }
  // Recomputes a leaf's statistics from its keys without touching its ancestors.
  void RefreshLeaf(int32_t leaf, const float* keys, int n);
  // Recomputes every inner node from its children, bottom up.
  void RefreshInner();

  bool empty() const { return leaf_node_.empty(); }
  int dim() const { return dim_; }
  int32_t leaves() const { return static_cast<int32_t>(leaf_node_.size()); }
  int32_t root() const { return root_; }
  int32_t height() const { return root_ < 0 ? 0 : nodes_[root_].level; }
  int64_t keys() const { return root_ < 0 ? 0 : nodes_[root_].count; }
  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  const Node& node(int32_t id) const { return nodes_[id]; }
  const float* centroid(int32_t id) const {
    return centroid_.data() + static_cast<size_t>(id) * dim_;
  }
  bool search_stats() const { return search_stats_; }
  // The key below the node farthest from its centroid (the one that sets its radius).
  // REQUIRES: search_stats().
  const float* far_key(int32_t id) const { return far_.data() + static_cast<size_t>(id) * dim_; }
  // The per-dimension variance of the keys below the node about its centroid.
  // REQUIRES: search_stats().
  const float* variance(int32_t id) const { return var_.data() + static_cast<size_t>(id) * dim_; }
  int32_t leaf_node(int32_t leaf) const { return leaf_node_[leaf]; }
  int64_t MemoryBytes() const;

 private:
  int32_t NewNode(int32_t level);
  float* mutable_centroid(int32_t id) { return centroid_.data() + static_cast<size_t>(id) * dim_; }
  void SetLeafStats(int32_t id, const float* keys, int n);
  void RefreshNode(int32_t id);
  void RefreshUp(int32_t id);
  // Splits nodes that have more than kFanout children, from `id` up.
  void SplitOverflow(int32_t id);

  int dim_;
  bool search_stats_;
  float max_sq_norm_ = 0;
  std::vector<Node> nodes_;
  std::vector<float> centroid_;     // [nodes][dim]
  std::vector<float> far_;          // [nodes][dim], with search_stats_
  std::vector<float> var_;          // [nodes][dim], with search_stats_
  std::vector<int32_t> leaf_node_;  // leaf id -> node
  int32_t root_ = -1;
  // RefreshNode's sums of means and second moments (kept: it runs for every ancestor per
  // insertion).
  std::vector<double> acc_, acc2_;
  bool deferred_ = false;
  std::vector<int32_t> dirty_;  // inner nodes whose refresh (with their ancestors') is deferred
};

}  // namespace icecache::ice
