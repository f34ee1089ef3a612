#include "index/icecache/balanced_split.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "index/icecache/mips.h"

namespace icecache::ice {

namespace {

constexpr int kIters = 8;

// A centre in k' space: [dim] coordinates plus the extra one.
struct Centre {
  std::vector<float> c;
  float e = 0;
};

float SqDistTo(const LiftedPoints& p, int32_t i, const Centre& c) {
  return LiftedSqDist(p.row(i), p.ext[i], c.c.data(), c.e, p.dim);
}

void MeanOf(const LiftedPoints& p, std::span<const int32_t> idx, const std::vector<uint8_t>& side,
            uint8_t which, Centre* out) {
  std::vector<double> acc(p.dim, 0.0);
  double e = 0;
  int64_t n = 0;
  for (size_t j = 0; j < idx.size(); ++j) {
    if (side[j] != which) continue;
    const float* r = p.row(idx[j]);
    for (int t = 0; t < p.dim; ++t) acc[t] += r[t];
    e += p.ext[idx[j]];
    ++n;
  }
  if (n == 0) return;  // keep the previous centre
  for (int t = 0; t < p.dim; ++t) out->c[t] = static_cast<float>(acc[t] / n);
  out->e = static_cast<float>(e / n);
}

}  // namespace

void BalancedTwoMeans(const LiftedPoints& points, std::span<const int32_t> idx, int lo, int hi,
                      std::vector<int32_t>* first, std::vector<int32_t>* second) {
  const int m = static_cast<int>(idx.size());
  ICECACHE_CHECK(m >= 2 && lo >= 1 && lo <= hi && hi <= m - 1);
  const int dim = points.dim;
  Centre mean{std::vector<float>(dim), 0}, c0{std::vector<float>(dim), 0},
      c1{std::vector<float>(dim), 0};
  std::vector<uint8_t> side(m, 0);
  MeanOf(points, idx, side, 0, &mean);
  // Seeds: the point farthest from the mean, then the point farthest from that one.
  auto farthest = [&](const Centre& from) {
    int best = 0;
    float best_d = -1;
    for (int j = 0; j < m; ++j) {
      const float d = SqDistTo(points, idx[j], from);
      if (d > best_d) {
        best_d = d;
        best = j;
      }
    }
    return best;
  };
  const int a = farthest(mean);
  c0.c.assign(points.row(idx[a]), points.row(idx[a]) + dim);
  c0.e = points.ext[idx[a]];
  const int b = farthest(c0);
  c1.c.assign(points.row(idx[b]), points.row(idx[b]) + dim);
  c1.e = points.ext[idx[b]];

  std::vector<std::pair<float, int>> rank(m);
  std::vector<uint8_t> next(m);
  for (int iter = 0; iter < kIters; ++iter) {
    int closer = 0;
    for (int j = 0; j < m; ++j) {
      const float diff = SqDistTo(points, idx[j], c0) - SqDistTo(points, idx[j], c1);
      rank[j] = {diff, j};
      closer += diff < 0;
    }
    std::sort(rank.begin(), rank.end());
    const int n0 = std::clamp(closer, lo, hi);
    for (int r = 0; r < m; ++r) next[rank[r].second] = r < n0 ? 0 : 1;
    if (iter > 0 && next == side) break;
    side = next;
    MeanOf(points, idx, side, 0, &c0);
    MeanOf(points, idx, side, 1, &c1);
  }
  first->clear();
  second->clear();
  for (int j = 0; j < m; ++j) (side[j] == 0 ? first : second)->push_back(idx[j]);
}

namespace {

// Cuts `idx` into `k` groups of [min_size, cap] points each.
// REQUIRES: k * min_size <= |idx| <= k * cap.
void Bisect(const LiftedPoints& points, std::vector<int32_t> idx, int64_t k, int cap, int min_size,
            std::vector<std::vector<int32_t>>* groups) {
  if (k == 1) {
    groups->push_back(std::move(idx));
    return;
  }
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t k1 = k / 2, k2 = k - k1;
  const int64_t lo = std::max(k1 * min_size, n - k2 * cap);
  const int64_t hi = std::min(k1 * cap, n - k2 * min_size);
  std::vector<int32_t> a, b;
  BalancedTwoMeans(points, idx, static_cast<int>(lo), static_cast<int>(hi), &a, &b);
  idx.clear();
  idx.shrink_to_fit();
  Bisect(points, std::move(a), k1, cap, min_size, groups);
  Bisect(points, std::move(b), k2, cap, min_size, groups);
}

}  // namespace

std::vector<std::vector<int32_t>> Partition(const LiftedPoints& points, int32_t n, int cap) {
  ICECACHE_CHECK(cap >= 1 && n >= 0);
  std::vector<std::vector<int32_t>> groups;
  if (n == 0) return groups;
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = (static_cast<int64_t>(n) + cap - 1) / cap;
  Bisect(points, std::move(idx), k, cap, std::max(1, cap / 2), &groups);
  return groups;
}

}  // namespace icecache::ice
