// Mass scoring's per-head log-sum-exps (index/icecache/head_norm.h) against double precision.
#include "index/icecache/head_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace icecache::ice {
namespace {

constexpr int kDim = 64, kGroup = 3;

double LogSumExpD(const std::vector<float>& q, const std::vector<float>& keys, int g, int n) {
  const double s = 1.0 / std::sqrt(double{kDim});
  std::vector<double> logits;
  double mx = -1e300;
  for (int t = 0; t < n; ++t) {
    double d = 0;
    for (int j = 0; j < kDim; ++j) d += double{q[g * kDim + j]} * keys[t * kDim + j];
    logits.push_back(s * d);
    mx = std::max(mx, s * d);
  }
  double sum = 0;
  for (double l : logits) sum += std::exp(l - mx);
  return (mx + std::log(sum)) / s;  // in q.k units
}

TEST(HeadLseTest, MatchesDoublePrecisionOverChunksAddedInAnyOrder) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const int n = 300;
  std::vector<float> q(kGroup * kDim), keys(n * kDim);
  for (float& v : q) v = 2.0f * normal(rng);
  for (int g = 0; g < kGroup; ++g) {  // heads on different scales, as real heads are
    for (int j = 0; j < kDim; ++j) q[g * kDim + j] *= static_cast<float>(g + 1);
  }
  for (float& v : keys) v = normal(rng);
  const TreeQuery query{q.data(), kGroup, kDim};
  HeadLse lse;
  lse.Reset(kGroup);
  for (int g = 0; g < kGroup; ++g) EXPECT_TRUE(lse.empty(g));
  // Added in uneven chunks, the largest logits neither first nor last.
  for (int first = 0; first < n;) {
    const int len = std::min(n - first, 1 + first % 37);
    lse.Add(query, keys.data() + first * kDim, len);
    first += len;
  }
  for (int g = 0; g < kGroup; ++g) {
    ASSERT_FALSE(lse.empty(g));
    const double want = LogSumExpD(q, keys, g, n);
    EXPECT_NEAR(lse.LogZ(g, kDim), want, 1e-4 * std::abs(want) + 1e-3) << "head " << g;
  }
  // Two halves merged by LogAddExp give the whole.
  HeadLse a, b;
  a.Reset(kGroup);
  b.Reset(kGroup);
  a.Add(query, keys.data(), n / 2);
  b.Add(query, keys.data() + n / 2 * kDim, n - n / 2);
  for (int g = 0; g < kGroup; ++g) {
    const double want = LogSumExpD(q, keys, g, n);
    EXPECT_NEAR(LogAddExp(a.LogZ(g, kDim), b.LogZ(g, kDim), kDim), want,
                1e-4 * std::abs(want) + 1e-3);
  }
}

TEST(HeadLseTest, LogAddExpOfFarApartValuesIsTheLarger) {
  EXPECT_FLOAT_EQ(LogAddExp(1000.0f, -1000.0f, kDim), 1000.0f);
  EXPECT_FLOAT_EQ(LogAddExp(-1000.0f, 1000.0f, kDim), 1000.0f);
  // Equal values: log 2 more, in q.k units (times sqrt(dim)).
  EXPECT_NEAR(LogAddExp(3.0f, 3.0f, kDim), 3.0 + std::log(2.0) * 8.0, 1e-5);
}

}  // namespace
}  // namespace icecache::ice
