// CentroidScores (several mean keys side by side, vector fmas) against CentroidScore one key at a
// time: the same bits for every key, head dims that are and are not multiples of its tile, groups
// of query heads up to and past what it interleaves, and counts that leave a partial batch.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kv/key_mean.h"

namespace icecache {
namespace {

TEST(CentroidScoresTest, EqualCentroidScoreBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.3f);
  std::uniform_real_distribution<float> spread_of(0.0f, 2.0f);
  int compared = 0;
  for (const int dim : {40, 64, 96, 128}) {
    for (const int group : {1, 3, 4, kCentroidMaxGroup + 1}) {
      for (const int n : {1, kCentroidLanes - 1, kCentroidLanes, kCentroidLanes + 1, 23}) {
        std::vector<float> q(static_cast<size_t>(group) * dim), qq(group);
        for (float& x : q) x = normal(rng);
        QuerySquares(q.data(), group, dim, qq.data());
        std::vector<std::vector<float>> keys(n, std::vector<float>(dim));
        std::vector<const float*> ptrs(n);
        std::vector<float> spread(n), out(n);
        for (int i = 0; i < n; ++i) {
          for (float& x : keys[i]) x = normal(rng);
          ptrs[i] = keys[i].data();
          spread[i] = spread_of(rng);
        }
        CentroidScores(q.data(), qq.data(), group, dim, ptrs.data(), spread.data(), n, out.data());
        for (int i = 0; i < n; ++i, ++compared) {
          const float want =
              CentroidScore(q.data(), qq.data(), group, dim, keys[i].data(), spread[i]);
          ASSERT_EQ(0, std::memcmp(&out[i], &want, sizeof(float)))
              << "dim " << dim << ", group " << group << ", n " << n << ", key " << i << ": "
              << out[i] << " against " << want;
        }
      }
    }
  }
  EXPECT_EQ(compared, 4 * 4 * (1 + 7 + 8 + 9 + 23));
}

}  // namespace
}  // namespace icecache
