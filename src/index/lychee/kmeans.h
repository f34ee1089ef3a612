// Lloyd's k-means with k-means++ seeding, deterministic for a seed (its own SplitMix64 stream,
// no <random> distributions, so results do not depend on the standard library).
#pragma once

#include <cstdint>
#include <vector>

namespace icecache::lychee {

struct KMeansResult {
  int k = 0;                     // clusters kept (empty ones are dropped)
  std::vector<float> centroids;  // [k][dim]: the mean of each cluster's points
  std::vector<int32_t> assign;   // [n]: cluster of each point
};

// Clusters the `n` rows of `points` ([n][dim]) into at most `k` clusters (k >= 1, n >= 1) with
// at most `iters` rounds of Lloyd's algorithm (it stops early when no point moves).
KMeansResult KMeans(const float* points, int n, int dim, int k, int iters, uint64_t seed);

}  // namespace icecache::lychee
