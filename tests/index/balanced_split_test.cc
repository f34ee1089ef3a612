// The icecache bulk partition (balanced_split.h): balanced 2-means keeps the first side's size
// in range, keeps each side in input order and separates well-separated clusters; Partition
// puts every point in exactly one group of max(1, cap / 2) to cap points, ceil(n / cap) groups,
// the same groups on every run, on sets below and above the sampling size. The four-row squared
// distance that routes keys down the tree gives SqDist's results bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "index/icecache/balanced_split.h"
#include "index/lychee/vec_math.h"
#include "lychee_harness.h"

namespace icecache::ice {
namespace {

using lychee::TestRng;

// n points in `dim` dimensions around `centres` random centres, with extra coordinates.
struct Points {
  std::vector<float> x, ext;
  int dim = 0;
  LiftedPoints View() const { return {x.data(), ext.data(), dim}; }
};

Points Clustered(int n, int dim, int centres, float spread, uint64_t seed) {
  TestRng rng(seed);
  std::vector<float> c(static_cast<size_t>(centres) * dim);
  for (float& v : c) v = 4.0f * (rng.Uniform() - 0.5f);
  Points p;
  p.dim = dim;
  for (int i = 0; i < n; ++i) {
    const int which = rng.Below(centres);
    for (int j = 0; j < dim; ++j) p.x.push_back(c[which * dim + j] + spread * rng.Normal());
    p.ext.push_back(rng.Uniform());
  }
  return p;
}

TEST(BalancedSplitTest, TwoMeansKeepsTheRangeAndTheOrder) {
  for (int m : {2, 3, 17, 300, 2048, 2049, 5000}) {
    const Points p = Clustered(m, 8, 5, 0.3f, 11 + m);
    std::vector<int32_t> idx(m);
    std::iota(idx.begin(), idx.end(), 0);
    std::reverse(idx.begin(), idx.end());  // not sorted: sides keep this order
    for (auto [lo, hi] : {std::pair{1, m - 1}, {m / 2, m / 2}, {1, 1}, {m - 1, m - 1}}) {
      if (lo < 1 || hi > m - 1 || lo > hi) continue;
      SCOPED_TRACE("m=" + std::to_string(m) + " lo=" + std::to_string(lo) +
                   " hi=" + std::to_string(hi));
      std::vector<int32_t> a, b;
      BalancedTwoMeans(p.View(), idx, lo, hi, &a, &b);
      EXPECT_GE(static_cast<int>(a.size()), lo);
      EXPECT_LE(static_cast<int>(a.size()), hi);
      ASSERT_EQ(a.size() + b.size(), static_cast<size_t>(m));
      for (const std::vector<int32_t>* side : {&a, &b}) {
        // In the order of idx (descending here), so strictly decreasing.
        for (size_t i = 1; i < side->size(); ++i) EXPECT_GT((*side)[i - 1], (*side)[i]);
      }
      std::vector<int32_t> all = a;
      all.insert(all.end(), b.begin(), b.end());
      std::sort(all.begin(), all.end());
      for (int i = 0; i < m; ++i) ASSERT_EQ(all[i], i);
    }
  }
}

TEST(BalancedSplitTest, TwoMeansSeparatesTwoDistantClusters) {
  // Points 0..99 around +5, 100..199 around -5 in every coordinate (extra coordinates equal).
  Points p;
  p.dim = 4;
  TestRng rng(3);
  for (int i = 0; i < 200; ++i) {
    for (int j = 0; j < 4; ++j) p.x.push_back((i < 100 ? 5.0f : -5.0f) + 0.1f * rng.Normal());
    p.ext.push_back(0.5f);
  }
  std::vector<int32_t> idx(200);
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<int32_t> a, b;
  BalancedTwoMeans(p.View(), idx, 1, 199, &a, &b);
  ASSERT_EQ(a.size(), 100u);
  const bool a_low = a.front() < 100;
  for (int32_t i : a) EXPECT_EQ(i < 100, a_low);
  for (int32_t i : b) EXPECT_NE(i < 100, a_low);
}

TEST(BalancedSplitTest, PartitionCoversEveryPointOnceInBalancedGroups) {
  for (int n : {0, 1, 15, 16, 17, 100, 4096, 5003, 40000}) {
    for (int cap : {1, 2, 16}) {
      if (n > 5003 && cap < 16) continue;
      SCOPED_TRACE("n=" + std::to_string(n) + " cap=" + std::to_string(cap));
      const Points p = Clustered(n, 16, 64, 0.5f, 5 + n);
      const auto groups = Partition(p.View(), n, cap);
      const size_t want = n == 0 ? 0 : static_cast<size_t>((n + cap - 1) / cap);
      ASSERT_EQ(groups.size(), want);
      std::vector<int> seen(n, 0);
      for (const auto& g : groups) {
        if (n >= cap) {
          EXPECT_GE(static_cast<int>(g.size()), std::max(1, cap / 2));
        }
        EXPECT_LE(static_cast<int>(g.size()), cap);
        EXPECT_GE(g.size(), 1u);
        for (int32_t i : g) ++seen[i];
      }
      for (int i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "point " << i;
      EXPECT_EQ(Partition(p.View(), n, cap), groups) << "not deterministic";
    }
  }
}

TEST(BalancedSplitTest, FourRowDistancesEqualOneRowDistancesBitForBit) {
  TestRng rng(11);
  for (int dim : {3, 8, 64, 100, 128}) {
    std::vector<float> a(dim), rows(4 * static_cast<size_t>(dim));
    for (int round = 0; round < 200; ++round) {
      for (float& x : a) x = rng.Normal();
      for (float& x : rows) x = rng.Normal() * (1 + round % 7);
      const float* b[4] = {&rows[0], &rows[dim], &rows[2 * dim], &rows[3 * dim]};
      float got[4];
      lychee::SqDist4(a.data(), b, dim, got);
      for (int r = 0; r < 4; ++r) {
        ASSERT_EQ(got[r], lychee::SqDist(a.data(), b[r], dim)) << "dim " << dim << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace icecache::ice
