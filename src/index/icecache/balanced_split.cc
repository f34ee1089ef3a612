#include "index/icecache/balanced_split.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "index/icecache/mips.h"

namespace icecache::ice {

namespace {

constexpr int kIters = 8;
// Sets larger than this fit their two centres on an evenly strided sample of this many points;
// every point is then placed once against the fitted centres.
constexpr int kSample = 2048;

// A centre in k' space: [dim] coordinates plus the extra one.
struct Centre {
  std::vector<float> c;
  float e = 0;
};

float SqDistTo(const LiftedPoints& p, int32_t i, const Centre& c) {
  return LiftedSqDist(p.row(i), p.ext[i], c.c.data(), c.e, p.dim);
}

// The means of both sides (a side without points keeps its previous centre), in one pass. The
// sums are f32 (they only steer the split; vectorized, they are most of a bulk build's time).
void MeansOf(const LiftedPoints& p, std::span<const int32_t> idx, const std::vector<uint8_t>& side,
             Centre* c0, Centre* c1) {
  std::vector<float> acc(2 * static_cast<size_t>(p.dim), 0.0f);
  double e[2] = {0, 0};
  int64_t n[2] = {0, 0};
  for (size_t j = 0; j < idx.size(); ++j) {
    const int s = side[j];
    const float* r = p.row(idx[j]);
    float* a = acc.data() + static_cast<size_t>(s) * p.dim;
    for (int t = 0; t < p.dim; ++t) a[t] += r[t];
    e[s] += p.ext[idx[j]];
    ++n[s];
  }
  Centre* out[2] = {c0, c1};
  for (int s = 0; s < 2; ++s) {
    if (n[s] == 0) continue;
    for (int t = 0; t < p.dim; ++t) {
      out[s]->c[t] = acc[static_cast<size_t>(s) * p.dim + t] / static_cast<float>(n[s]);
    }
    out[s]->e = static_cast<float>(e[s] / n[s]);
  }
}

// |x - c0|^2 - |x - c1|^2 = |c0|^2 - |c1|^2 - 2 x.(c0 - c1) for every point of `idx`, as
// (difference, position) pairs: one dot product per point.
void Differences(const LiftedPoints& p, std::span<const int32_t> idx, const Centre& c0,
                 const Centre& c1, std::vector<float>* w,
                 std::vector<std::pair<float, int>>* rank) {
  const int dim = p.dim;
  w->resize(dim);
  for (int t = 0; t < dim; ++t) (*w)[t] = c0.c[t] - c1.c[t];
  const float we = c0.e - c1.e;
  const float b = DotF(c0.c.data(), c0.c.data(), dim) + c0.e * c0.e -
                  DotF(c1.c.data(), c1.c.data(), dim) - c1.e * c1.e;
  rank->resize(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) {
    const float x = DotF(p.row(idx[j]), w->data(), dim) + p.ext[idx[j]] * we;
    (*rank)[j] = {b - 2 * x, static_cast<int>(j)};
  }
}

// Sides for `rank` (from Differences): the points closer to c0 go first, their count clamped to
// [lo, hi]; the `n0` smallest differences (ties by position) form side 0. The selection runs on
// 64-bit keys that order like the (difference, position) pairs (-0 taken as +0), which is
// several times faster than on the pairs.
void Cut(std::vector<std::pair<float, int>>* rank, int lo, int hi, std::vector<uint8_t>* side,
         std::vector<uint64_t>* keys) {
  int closer = 0;
  for (const auto& r : *rank) closer += r.first < 0;
  const int n0 = std::clamp(closer, lo, hi);
  side->assign(rank->size(), 1);
  if (n0 == closer) {  // exactly the negative differences
    for (size_t j = 0; j < rank->size(); ++j) (*side)[j] = (*rank)[j].first < 0 ? 0 : 1;
    return;
  }
  keys->resize(rank->size());
  for (size_t j = 0; j < rank->size(); ++j) {
    const float d = (*rank)[j].first == 0.0f ? 0.0f : (*rank)[j].first;
    uint32_t u;
    std::memcpy(&u, &d, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending floats as unsigned
    (*keys)[j] = (static_cast<uint64_t>(u) << 32) | static_cast<uint32_t>((*rank)[j].second);
  }
  std::nth_element(keys->begin(), keys->begin() + n0, keys->end());
  for (int r = 0; r < n0; ++r) (*side)[static_cast<uint32_t>((*keys)[r])] = 0;
}

}  // namespace

void BalancedTwoMeans(const LiftedPoints& points, std::span<const int32_t> idx, int lo, int hi,
                      std::vector<int32_t>* first, std::vector<int32_t>* second) {
  const int m = static_cast<int>(idx.size());
  ICECACHE_CHECK(m >= 2 && lo >= 1 && lo <= hi && hi <= m - 1);
  const int dim = points.dim;
  // The fit runs on `fit` (all points, or an evenly strided sample with the range scaled).
  std::vector<int32_t> sample;
  std::span<const int32_t> fit = idx;
  int fit_lo = lo, fit_hi = hi;
  if (m > kSample) {
    sample.reserve(kSample);
    for (int i = 0; i < kSample; ++i) sample.push_back(idx[static_cast<int64_t>(i) * m / kSample]);
    fit = sample;
    fit_lo = std::clamp(static_cast<int>(static_cast<int64_t>(lo) * kSample / m), 1, kSample - 1);
    fit_hi =
        std::clamp(static_cast<int>(static_cast<int64_t>(hi) * kSample / m), fit_lo, kSample - 1);
  }
  const int n = static_cast<int>(fit.size());
  // The fit set's rows side by side (the passes below read them up to 2 * kIters + 3 times):
  // the same values in the same order, so the same arithmetic as on the scattered rows.
  thread_local std::vector<float> fit_x, fit_e;
  thread_local std::vector<int32_t> fit_at;
  fit_x.resize(static_cast<size_t>(n) * dim);
  fit_e.resize(n);
  fit_at.resize(n);
  for (int j = 0; j < n; ++j) {
    std::memcpy(fit_x.data() + static_cast<size_t>(j) * dim, points.row(fit[j]),
                sizeof(float) * dim);
    fit_e[j] = points.ext[fit[j]];
    fit_at[j] = j;
  }
  const LiftedPoints compact{fit_x.data(), fit_e.data(), dim};
  const std::span<const int32_t> all(fit_at);
  Centre mean{std::vector<float>(dim), 0}, c0{std::vector<float>(dim), 0},
      c1{std::vector<float>(dim), 0};
  std::vector<uint8_t> side(n, 0);
  Centre unused{std::vector<float>(dim), 0};
  MeansOf(compact, all, side, &mean, &unused);
  // Seeds: the point farthest from the mean, then the point farthest from that one.
  auto farthest = [&](const Centre& from) {
    int best = 0;
    float best_d = -1;
    for (int j = 0; j < n; ++j) {
      const float d = SqDistTo(compact, j, from);
      if (d > best_d) {
        best_d = d;
        best = j;
      }
    }
    return best;
  };
  const int a = farthest(mean);
  c0.c.assign(compact.row(a), compact.row(a) + dim);
  c0.e = compact.ext[a];
  const int b = farthest(c0);
  c1.c.assign(compact.row(b), compact.row(b) + dim);
  c1.e = compact.ext[b];

  std::vector<std::pair<float, int>> rank;
  std::vector<float> w;
  std::vector<uint8_t> next;
  std::vector<uint64_t> keys;
  for (int iter = 0; iter < kIters; ++iter) {
    Differences(compact, all, c0, c1, &w, &rank);
    Cut(&rank, fit_lo, fit_hi, &next, &keys);
    if (iter > 0 && next == side) break;
    side = next;
    MeansOf(compact, all, side, &c0, &c1);
  }
  if (m > kSample) {
    // Every point against the fitted centres, with the exact range.
    Differences(points, idx, c0, c1, &w, &rank);
    Cut(&rank, lo, hi, &side, &keys);
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
