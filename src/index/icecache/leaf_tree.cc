#include "index/icecache/leaf_tree.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "index/icecache/balanced_split.h"
#include "index/icecache/mips.h"

namespace icecache::ice {

void LeafTree::Clear() {
  max_sq_norm_ = 0;
  nodes_.clear();
  centroid_.clear();
  far_.clear();
  var_.clear();
  leaf_node_.clear();
  root_ = -1;
}

int32_t LeafTree::NewNode(int32_t level) {
  const int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.emplace_back();
  nodes_.back().level = level;
  centroid_.resize(centroid_.size() + dim_, 0.0f);
  if (search_stats_) {
    far_.resize(far_.size() + dim_, 0.0f);
    var_.resize(var_.size() + dim_, 0.0f);
  }
  return id;
}

float BallOf(const float* keys, int n, int dim, float* centroid, int* farthest) {
  ICECACHE_CHECK(n >= 1);
  std::vector<double> acc(dim, 0.0);
  for (int t = 0; t < n; ++t) {
    const float* k = keys + static_cast<size_t>(t) * dim;
    for (int j = 0; j < dim; ++j) acc[j] += k[j];
  }
  for (int j = 0; j < dim; ++j) centroid[j] = static_cast<float>(acc[j] / n);
  float r = -1;
  for (int t = 0; t < n; ++t) {
    const float d2 = SqDist(keys + static_cast<size_t>(t) * dim, centroid, dim);
    if (d2 > r) {
      r = d2;
      if (farthest != nullptr) *farthest = t;
    }
  }
  r = std::sqrt(std::max(0.0f, r));
  return r + Slack(r + Norm(centroid, dim));
}

void KeyVariance(const float* keys, int n, int dim, const float* centroid, float* variance) {
  ICECACHE_CHECK(n >= 1);
  std::fill_n(variance, dim, 0.0f);
  for (int t = 0; t < n; ++t) {
    const float* k = keys + static_cast<size_t>(t) * dim;
    for (int j = 0; j < dim; ++j) {
      const float x = k[j] - centroid[j];
      variance[j] += x * x;
    }
  }
  const float inv = 1.0f / static_cast<float>(n);
  for (int j = 0; j < dim; ++j) variance[j] *= inv;
}

void LeafTree::SetLeafStats(int32_t id, const float* keys, int n) {
  double ext = 0;
  for (int t = 0; t < n; ++t) {
    const float* k = keys + static_cast<size_t>(t) * dim_;
    ext += ExtraCoord(max_sq_norm_, DotF(k, k, dim_));
  }
  int far = 0;
  const float r = BallOf(keys, n, dim_, mutable_centroid(id), &far);
  if (search_stats_) {
    std::copy_n(keys + static_cast<size_t>(far) * dim_, dim_,
                far_.data() + static_cast<size_t>(id) * dim_);
    KeyVariance(keys, n, dim_, centroid(id), var_.data() + static_cast<size_t>(id) * dim_);
  }
  Node& node = nodes_[id];
  node.count = n;
  node.ext = static_cast<float>(ext / n);
  node.radius = r;
}

void LeafTree::RefreshNode(int32_t id) {
  Node& node = nodes_[id];
  ICECACHE_CHECK(!node.children.empty());
  std::vector<double>& acc = acc_;
  std::vector<double>& acc2 = acc2_;  // second moments: the children's variance + centroid^2
  acc.assign(dim_, 0.0);
  if (search_stats_) acc2.assign(dim_, 0.0);
  double ext = 0;
  int64_t count = 0;
  for (int32_t ch : node.children) {
    const Node& child = nodes_[ch];
    const float* cc = centroid(ch);
    const double w = child.count;
    for (int j = 0; j < dim_; ++j) acc[j] += w * cc[j];
    if (search_stats_) {
      const float* cv = variance(ch);
      for (int j = 0; j < dim_; ++j) {
        acc2[j] += w * (static_cast<double>(cv[j]) + static_cast<double>(cc[j]) * cc[j]);
      }
    }
    ext += static_cast<double>(child.count) * child.ext;
    count += child.count;
  }
  float* c = mutable_centroid(id);
  for (int j = 0; j < dim_; ++j) c[j] = static_cast<float>(acc[j] / count);
  if (search_stats_) {
    float* v = var_.data() + static_cast<size_t>(id) * dim_;
    for (int j = 0; j < dim_; ++j) {
      const double mean = acc[j] / count;
      v[j] = static_cast<float>(std::max(0.0, acc2[j] / count - mean * mean));
    }
  }
  const float c_norm = Norm(c, dim_);
  float r = 0, far_d2 = -1;
  int32_t far_child = node.children[0];
  for (int32_t ch : node.children) {
    const Node& child = nodes_[ch];
    const float* cc = centroid(ch);
    const float reach = std::sqrt(SqDist(c, cc, dim_)) + child.radius;
    r = std::max(r, reach + Slack(c_norm + Norm(cc, dim_) + child.radius));
    if (!search_stats_) continue;
    const float d2 = SqDist(c, far_key(ch), dim_);
    if (d2 > far_d2) {
      far_d2 = d2;
      far_child = ch;
    }
  }
  if (search_stats_) {
    std::copy_n(far_key(far_child), dim_, far_.data() + static_cast<size_t>(id) * dim_);
  }
  node.count = static_cast<int32_t>(count);
  node.ext = static_cast<float>(ext / count);
  node.radius = r;
}

void LeafTree::RefreshUp(int32_t id) {
  if (deferred_) {
    if (id >= 0) dirty_.push_back(id);
    return;
  }
  for (int32_t p = id; p >= 0; p = nodes_[p].parent) {
    if (nodes_[p].level > 0) RefreshNode(p);
  }
}

void LeafTree::EndDeferredRefresh() {
  deferred_ = false;
  // The dirty nodes and every ancestor of theirs, each once, lower levels first.
  std::vector<std::pair<int32_t, int32_t>> todo;  // (level, node)
  for (int32_t id : dirty_) {
    for (int32_t p = id; p >= 0; p = nodes_[p].parent) {
      if (nodes_[p].level > 0) todo.emplace_back(nodes_[p].level, p);
    }
  }
  dirty_.clear();
  std::sort(todo.begin(), todo.end());
  todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
  for (const auto& [level, id] : todo) RefreshNode(id);
}

int32_t LeafTree::AddLeafBall(const float* centroid, float radius, const float* far_key,
                              const float* variance, const float* sq_norms, int n) {
  ICECACHE_CHECK(root_ < 0 && n >= 1);
  const int32_t id = NewNode(0);
  const int32_t leaf = leaves();
  nodes_[id].leaf = leaf;
  leaf_node_.push_back(id);
  double ext = 0;
  for (int t = 0; t < n; ++t) ext += ExtraCoord(max_sq_norm_, sq_norms[t]);
  std::copy_n(centroid, dim_, mutable_centroid(id));
  if (search_stats_) {
    std::copy_n(far_key, dim_, far_.data() + static_cast<size_t>(id) * dim_);
    std::copy_n(variance, dim_, var_.data() + static_cast<size_t>(id) * dim_);
  }
  Node& node = nodes_[id];
  node.count = n;
  node.ext = static_cast<float>(ext / n);
  node.radius = radius;
  return leaf;
}

int32_t LeafTree::AddLeaf(const float* keys, int n) {
  ICECACHE_CHECK(root_ < 0);
  const int32_t id = NewNode(0);
  const int32_t leaf = leaves();
  nodes_[id].leaf = leaf;
  leaf_node_.push_back(id);
  SetLeafStats(id, keys, n);
  return leaf;
}

void LeafTree::BuildUpper() {
  ICECACHE_CHECK(root_ < 0 && !leaf_node_.empty());
  std::vector<int32_t> level_nodes = leaf_node_;
  int32_t level = 0;
  std::vector<float> x, ext;
  do {
    const int32_t n = static_cast<int32_t>(level_nodes.size());
    x.resize(static_cast<size_t>(n) * dim_);
    ext.resize(n);
    for (int32_t i = 0; i < n; ++i) {
      std::copy_n(centroid(level_nodes[i]), dim_, x.data() + static_cast<size_t>(i) * dim_);
      ext[i] = nodes_[level_nodes[i]].ext;
    }
    const std::vector<std::vector<int32_t>> groups =
        Partition({x.data(), ext.data(), dim_}, n, kFanout);
    std::vector<int32_t> parents;
    for (const std::vector<int32_t>& g : groups) {
      const int32_t p = NewNode(level + 1);
      for (int32_t i : g) {
        nodes_[p].children.push_back(level_nodes[i]);
        nodes_[level_nodes[i]].parent = p;
      }
      RefreshNode(p);
      parents.push_back(p);
    }
    level_nodes = std::move(parents);
    ++level;
  } while (level_nodes.size() > 1);
  root_ = level_nodes[0];
}

int32_t LeafTree::NearestLeaf(const float* key, float ext) const {
  ICECACHE_CHECK(root_ >= 0);
  // Kept per thread: the function runs once per inserted key.
  thread_local std::vector<int32_t> frontier;
  thread_local std::vector<std::pair<float, int32_t>> cand;
  frontier.assign(1, root_);
  while (true) {
    cand.clear();
    for (int32_t f : frontier) {
      for (int32_t ch : nodes_[f].children) cand.emplace_back(0.0f, ch);
    }
    // Four children at a time (LiftedSqDist's results, bit for bit).
    size_t i = 0;
    for (; i + 4 <= cand.size(); i += 4) {
      const float* c[4];
      float e[4], d[4];
      for (int r = 0; r < 4; ++r) {
        c[r] = centroid(cand[i + r].second);
        e[r] = nodes_[cand[i + r].second].ext;
      }
      LiftedSqDist4(key, ext, c, e, dim_, d);
      for (int r = 0; r < 4; ++r) cand[i + r].first = d[r];
    }
    for (; i < cand.size(); ++i) {
      const int32_t ch = cand[i].second;
      cand[i].first = LiftedSqDist(key, ext, centroid(ch), nodes_[ch].ext, dim_);
    }
    if (nodes_[cand[0].second].level == 0) {
      return nodes_[std::min_element(cand.begin(), cand.end())->second].leaf;
    }
    const size_t keep = std::min<size_t>(kRouteBeam, cand.size());
    std::partial_sort(cand.begin(), cand.begin() + keep, cand.end());
    frontier.clear();
    for (size_t i = 0; i < keep; ++i) frontier.push_back(cand[i].second);
  }
}

void LeafTree::UpdateLeaf(int32_t leaf, const float* keys, int n) {
  const int32_t id = leaf_node_[leaf];
  SetLeafStats(id, keys, n);
  RefreshUp(nodes_[id].parent);
}

void LeafTree::RefreshLeaf(int32_t leaf, const float* keys, int n) {
  SetLeafStats(leaf_node_[leaf], keys, n);
}

void LeafTree::RefreshInner() {
  const int32_t h = height();
  for (int32_t level = 1; level <= h; ++level) {
    for (int32_t id = 0; id < num_nodes(); ++id) {
      if (nodes_[id].level == level) RefreshNode(id);
    }
  }
}

int32_t LeafTree::SplitLeaf(int32_t leaf, const float* keys_a, int na, const float* keys_b,
                            int nb) {
  const int32_t a = leaf_node_[leaf];
  SetLeafStats(a, keys_a, na);
  const int32_t b = NewNode(0);
  const int32_t id = leaves();
  nodes_[b].leaf = id;
  leaf_node_.push_back(b);
  SetLeafStats(b, keys_b, nb);
  const int32_t parent = nodes_[a].parent;
  nodes_[b].parent = parent;
  nodes_[parent].children.push_back(b);
  SplitOverflow(parent);
  return id;
}

void LeafTree::SplitOverflow(int32_t id) {
  std::vector<float> x, ext;
  std::vector<int32_t> idx, first, second;
  for (int32_t node = id; node >= 0;) {
    const std::vector<int32_t> children = nodes_[node].children;
    const int m = static_cast<int>(children.size());
    if (m <= kFanout) {
      RefreshUp(node);
      return;
    }
    x.resize(static_cast<size_t>(m) * dim_);
    ext.resize(m);
    idx.resize(m);
    for (int i = 0; i < m; ++i) {
      std::copy_n(centroid(children[i]), dim_, x.data() + static_cast<size_t>(i) * dim_);
      ext[i] = nodes_[children[i]].ext;
      idx[i] = i;
    }
    const int lo = std::max(1, kFanout / 2);
    BalancedTwoMeans({x.data(), ext.data(), dim_}, idx, lo, m - lo, &first, &second);
    const int32_t sibling = NewNode(nodes_[node].level);
    nodes_[node].children.clear();
    for (int i : first) nodes_[node].children.push_back(children[i]);
    for (int i : second) {
      nodes_[sibling].children.push_back(children[i]);
      nodes_[children[i]].parent = sibling;
    }
    RefreshNode(node);
    RefreshNode(sibling);
    const int32_t parent = nodes_[node].parent;
    if (parent < 0) {
      const int32_t r = NewNode(nodes_[node].level + 1);
      nodes_[r].children = {node, sibling};
      nodes_[node].parent = nodes_[sibling].parent = r;
      RefreshNode(r);
      root_ = r;
      return;
    }
    nodes_[sibling].parent = parent;
    nodes_[parent].children.push_back(sibling);
    node = parent;
  }
}

int64_t LeafTree::MemoryBytes() const {
  int64_t b = static_cast<int64_t>(nodes_.capacity()) * sizeof(Node) +
              static_cast<int64_t>(centroid_.capacity() + far_.capacity() + var_.capacity()) *
                  sizeof(float) +
              static_cast<int64_t>(leaf_node_.capacity()) * sizeof(int32_t);
  for (const Node& n : nodes_) b += static_cast<int64_t>(n.children.capacity()) * sizeof(int32_t);
  return b;
}

}  // namespace icecache::ice
