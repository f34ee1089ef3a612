// Shared pieces of the icecache index tests: a KV sequence driven directly (the lychee harness),
// the icecache index over it, and checks of the tree against the pages.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "index/icecache/icecache_index.h"
#include "index/icecache/mips.h"
#include "index/key_reader.h"
#include "lychee_harness.h"

namespace icecache::ice {

using lychee::KvHarness;
using lychee::TestRng;
using lychee::TopicKeys;

inline KvConfig IceConfig(int budget, int page) {
  KvConfig kv;
  kv.policy = "icecache";
  kv.budget = budget;
  kv.page_size = page;
  return kv;
}

struct IceSetup {
  KvLayout layout;
  int n_heads = 4;
  IndexContext Context(const KvConfig& kv) const {
    return IndexContext{kv, layout, n_heads, LimitsFor(kv), nullptr};
  }
  std::unique_ptr<IceCacheIndex> MakeIndex(const KvConfig& kv) const {
    return std::make_unique<IceCacheIndex>(Context(kv));
  }
  std::unique_ptr<KvHarness> MakeHarness(const KvConfig& kv, int64_t tokens) const {
    return std::make_unique<KvHarness>(layout, PoolPagesFor(kv, layout, tokens));
  }
};

// Independent keys: N(0, 1) per coordinate, scaled per (layer, head, pos) so norms vary.
struct RandomKeys {
  int dim;
  void operator()(int layer, int head, int64_t pos, float* k) const {
    TestRng rng(static_cast<uint64_t>(pos) * 7919u + layer * 104729u + head * 31u + 5u);
    const float scale = 0.5f + rng.Uniform();
    for (int j = 0; j < dim; ++j) k[j] = scale * rng.Normal();
  }
};

// Appends n tokens and tells the index.
template <typename KeyFn>
void AppendTokens(KvHarness& kv, SequenceIndex& index, int64_t n, KeyFn& keys, TestRng& rng) {
  const int64_t first = kv.seq().length();
  kv.Append(n, keys, rng);
  std::vector<int32_t> ids(static_cast<size_t>(n), 7);
  ASSERT_TRUE(index.OnAppend(kv.seq(), first, ids).ok());
}

inline std::vector<float> PageKeys(const KvSequence& seq, const PageRef& p) {
  KeyReader r(seq.pool().view());
  const float* k = r.Keys(p.id, p.len);
  return std::vector<float>(k, k + static_cast<size_t>(p.len) * seq.layout().head_dim);
}

inline double DotD(const float* a, const float* b, int d) {
  double s = 0;
  for (int j = 0; j < d; ++j) s += static_cast<double>(a[j]) * b[j];
  return s;
}
inline double DistD(const float* a, const float* b, int d) {
  double s = 0;
  for (int j = 0; j < d; ++j) s += (static_cast<double>(a[j]) - b[j]) * (a[j] - b[j]);
  return std::sqrt(s);
}

// The tree of every started list matches its pages and keeps its invariants: leaf i is list page
// sink_pages + i with the same token count; leaves hold at least max(1, P / 2) tokens unless a
// list has a single leaf; the sink pages keep positions 0 ..; every node is reached once from
// the root, levels are balanced, fan-out is at most kFanout; counts add up; every radius bounds
// every key below its node (in double precision), parents' balls contain their children's; ext
// is the mean lifted coordinate for the current M, and M bounds every |k|^2; every node's bound
// is at least the true max q.k below it for random queries; every node's farthest key is a key
// below it, for a leaf the one farthest from its mean.
inline void ExpectTreeInvariants(const IceCacheIndex& index, const KvSequence& seq, int dense,
                                 int group, TestRng& rng) {
  const KvLayout& layout = seq.layout();
  const int d = layout.head_dim, p = layout.page_size;
  const KvPoolView pool = seq.pool().view();
  for (int layer = 0; layer < layout.n_layers; ++layer) {
    for (int h = 0; h < layout.n_kv_heads; ++h) {
      const std::vector<PageRef>& pages = seq.pages(layer, h);
      if (layer < dense || !index.list_started(layer, h)) {
        ASSERT_EQ(seq.tail_index(layer, h), 0) << "an unstarted list was re-arranged";
        continue;
      }
      const LeafTree& tree = index.tree(layer, h);
      const int32_t sink = index.sink_pages();
      ASSERT_EQ(seq.tail_index(layer, h), sink + tree.leaves());
      for (int32_t i = 0; i < sink; ++i) {
        for (int t = 0; t < pages[i].len; ++t) {
          ASSERT_EQ(pool.positions[pages[i].id * p + t], i * p + t) << "sink moved";
        }
      }
      if (tree.empty()) continue;
      // Leaf keys, and the leaves agree with the pages.
      std::vector<std::vector<float>> keys(tree.leaves());
      float max_sq = 0;
      for (int32_t leaf = 0; leaf < tree.leaves(); ++leaf) {
        const PageRef& page = pages[sink + leaf];
        ASSERT_EQ(tree.node(tree.leaf_node(leaf)).count, page.len) << "leaf " << leaf;
        ASSERT_GE(page.len, 1);
        ASSERT_LE(page.len, p);
        if (tree.leaves() > 1) {
          ASSERT_GE(page.len, std::max(1, p / 2)) << "underfull leaf";
        }
        keys[leaf] = PageKeys(seq, page);
        for (int t = 0; t < page.len; ++t) {
          max_sq = std::max(max_sq, DotF(&keys[leaf][t * d], &keys[leaf][t * d], d));
        }
      }
      ASSERT_GE(tree.max_sq_norm(), max_sq);
      // Walk from the root: every key below each node, checked against its ball.
      std::vector<int> seen(tree.num_nodes(), 0);
      std::vector<std::vector<int32_t>> below(tree.num_nodes());  // leaves below each node
      std::vector<float> q(static_cast<size_t>(group) * d);
      for (float& x : q) x = rng.Normal();
      std::vector<int32_t> stack{tree.root()};
      ASSERT_EQ(tree.node(tree.root()).parent, -1);
      std::vector<int32_t> order;
      while (!stack.empty()) {
        const int32_t n = stack.back();
        stack.pop_back();
        ASSERT_EQ(++seen[n], 1) << "node reached twice";
        order.push_back(n);
        const LeafTree::Node& node = tree.node(n);
        if (node.level == 0) continue;
        ASSERT_FALSE(node.children.empty());
        ASSERT_LE(static_cast<int>(node.children.size()), LeafTree::kFanout);
        int64_t count = 0;
        for (int32_t ch : node.children) {
          ASSERT_EQ(tree.node(ch).parent, n);
          ASSERT_EQ(tree.node(ch).level, node.level - 1) << "unbalanced";
          count += tree.node(ch).count;
          ASSERT_GE(node.radius,
                    DistD(tree.centroid(n), tree.centroid(ch), d) + tree.node(ch).radius)
              << "parent ball does not contain a child's";
          stack.push_back(ch);
        }
        ASSERT_EQ(count, node.count);
      }
      // Bottom up (reverse of the walk): leaves below, radii, ext, bounds.
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        const int32_t n = *it;
        const LeafTree::Node& node = tree.node(n);
        if (node.level == 0) {
          below[n] = {node.leaf};
        } else {
          for (int32_t ch : node.children) {
            below[n].insert(below[n].end(), below[ch].begin(), below[ch].end());
          }
        }
        double ext = 0, best = -1e300, farthest = 0;
        int64_t count = 0;
        bool far_found = false;
        std::vector<double> var(d, 0.0);  // the keys' per-dimension variance about the centroid
        for (int32_t leaf : below[n]) {
          for (size_t t = 0; t * d < keys[leaf].size(); ++t) {
            const float* k = &keys[leaf][t * d];
            for (int j = 0; j < d; ++j) {
              const double x = static_cast<double>(k[j]) - tree.centroid(n)[j];
              var[j] += x * x;
            }
            ext += ExtraCoord(tree.max_sq_norm(), DotF(k, k, d));
            ++count;
            for (int g = 0; g < group; ++g) best = std::max(best, DotD(&q[g * d], k, d));
            ASSERT_GE(node.radius, DistD(k, tree.centroid(n), d)) << "radius misses a key";
            if (!tree.search_stats()) continue;
            farthest = std::max(farthest, DistD(k, tree.centroid(n), d));
            far_found = far_found || std::equal(k, k + d, tree.far_key(n));
          }
        }
        ASSERT_EQ(count, node.count);
        ASSERT_NEAR(node.ext, ext / count, 1e-3 * (1 + std::abs(ext / count)));
        double bound = -1e300;
        for (int g = 0; g < group; ++g) {
          const double qn = std::sqrt(DotD(&q[g * d], &q[g * d], d));
          bound = std::max(bound, DotD(&q[g * d], tree.centroid(n), d) + qn * node.radius);
        }
        ASSERT_GE(bound, best) << "node bound below a key's q.k";
        if (!tree.search_stats()) continue;
        for (int j = 0; j < d; ++j) {
          const double want = var[j] / count;
          ASSERT_NEAR(tree.variance(n)[j], want, 1e-4 * (1 + want)) << "node " << n << " dim " << j;
        }
        ASSERT_TRUE(far_found) << "the farthest key is not a key below the node";
        if (node.level == 0) {
          ASSERT_NEAR(DistD(tree.far_key(n), tree.centroid(n), d), farthest, 1e-4 * (1 + farthest))
              << "a leaf's farthest key is not its farthest";
        }
      }
      for (int32_t leaf = 0; leaf < tree.leaves(); ++leaf) {
        ASSERT_EQ(seen[tree.leaf_node(leaf)], 1) << "leaf not reachable";
      }
    }
  }
}

}  // namespace icecache::ice
