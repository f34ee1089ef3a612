#include "index/lychee/kmeans.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/split_mix.h"
#include "index/lychee/vec_math.h"

namespace icecache::lychee {

namespace {

// k-means++: each next seed is drawn with probability proportional to the squared distance to
// the nearest seed so far.
std::vector<float> Seed(const float* points, int n, int dim, int k, SplitMixRng* rng) {
  std::vector<float> seeds;
  seeds.reserve(static_cast<size_t>(k) * dim);
  const int first = static_cast<int>(rng->Next() % static_cast<uint64_t>(n));
  seeds.insert(seeds.end(), points + static_cast<int64_t>(first) * dim,
               points + static_cast<int64_t>(first + 1) * dim);
  std::vector<double> d2(n);
  for (int i = 0; i < n; ++i)
    d2[i] = SqDist(points + static_cast<int64_t>(i) * dim, seeds.data(), dim);
  for (int c = 1; c < k; ++c) {
    double total = 0;
    for (int i = 0; i < n; ++i) total += d2[i];
    if (total <= 0) break;  // every point coincides with a seed
    double pick = rng->UniformDouble() * total;
    int chosen = n - 1;
    for (int i = 0; i < n; ++i) {
      pick -= d2[i];
      if (pick < 0 && d2[i] > 0) {
        chosen = i;
        break;
      }
    }
    const float* p = points + static_cast<int64_t>(chosen) * dim;
    seeds.insert(seeds.end(), p, p + dim);
    const float* s = seeds.data() + static_cast<int64_t>(c) * dim;
    for (int i = 0; i < n; ++i) {
      d2[i] = std::min<double>(d2[i], SqDist(points + static_cast<int64_t>(i) * dim, s, dim));
    }
  }
  return seeds;
}

}  // namespace

KMeansResult KMeans(const float* points, int n, int dim, int k, int iters, uint64_t seed) {
  ICECACHE_CHECK(n >= 1 && k >= 1 && dim >= 1);
  k = std::min(k, n);
  SplitMixRng rng(seed);
  std::vector<float> cent = Seed(points, n, dim, k, &rng);
  k = static_cast<int>(cent.size() / dim);
  std::vector<int32_t> assign(n, -1);
  std::vector<float> cnorm(k);
  std::vector<double> sums;
  std::vector<int32_t> counts;
  for (int it = 0; it < std::max(1, iters); ++it) {
    // Assignment: argmin |x - c|^2 = argmin |c|^2 - 2 x.c.
    for (int c = 0; c < k; ++c)
      cnorm[c] =
          DotF(&cent[static_cast<size_t>(c) * dim], &cent[static_cast<size_t>(c) * dim], dim);
    bool moved = false;
    for (int i = 0; i < n; ++i) {
      const float* x = points + static_cast<int64_t>(i) * dim;
      float best = std::numeric_limits<float>::infinity();
      int32_t arg = 0;
      for (int c = 0; c < k; ++c) {
        const float v = cnorm[c] - 2.0f * DotF(x, &cent[static_cast<size_t>(c) * dim], dim);
        if (v < best) {
          best = v;
          arg = c;
        }
      }
      if (assign[i] != arg) {
        assign[i] = arg;
        moved = true;
      }
    }
    // Update: each centroid becomes the mean of its points; empty clusters are dropped.
    sums.assign(static_cast<size_t>(k) * dim, 0.0);
    counts.assign(k, 0);
    for (int i = 0; i < n; ++i) {
      const float* x = points + static_cast<int64_t>(i) * dim;
      double* s = &sums[static_cast<size_t>(assign[i]) * dim];
      for (int j = 0; j < dim; ++j) s[j] += x[j];
      ++counts[assign[i]];
    }
    std::vector<int32_t> remap(k, -1);
    int kept = 0;
    for (int c = 0; c < k; ++c) {
      if (counts[c] == 0) continue;
      remap[c] = kept;
      for (int j = 0; j < dim; ++j) {
        cent[static_cast<size_t>(kept) * dim + j] =
            static_cast<float>(sums[static_cast<size_t>(c) * dim + j] / counts[c]);
      }
      ++kept;
    }
    if (kept != k) {
      for (int i = 0; i < n; ++i) assign[i] = remap[assign[i]];
      k = kept;
      cent.resize(static_cast<size_t>(k) * dim);
      cnorm.resize(k);
      moved = true;
    }
    if (!moved) break;
  }
  KMeansResult r;
  r.k = k;
  r.centroids = std::move(cent);
  r.assign = std::move(assign);
  return r;
}

}  // namespace icecache::lychee
