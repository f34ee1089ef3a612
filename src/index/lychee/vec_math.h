// Small dense-vector helpers for the lychee index (keys and centroids are f32 rows of head_dim).
// The loops keep eight independent partial sums so the compiler vectorizes them without
// -ffast-math; results are deterministic for a given build.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace icecache::lychee {

inline float DotF(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline float SqDist(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float t = a[i + j] - b[i + j];
      acc[j] += t * t;
    }
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return s;
}

// SqDist(a, b[r], n) for four rows b[0..3] at once, each summed in SqDist's order (eight lanes,
// a fused multiply-add per element, the same final reduction), so the results equal SqDist's bit
// for bit; the four independent chains keep the vector units busy where one chain waits on its
// own additions. Written with AVX2 intrinsics: left to the vectorizer, the four-row loop is
// rearranged at -O3 and rounds differently.
inline void SqDist4(const float* a, const float* const b[4], int n, float out[4]) {
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 va = _mm256_loadu_ps(a + i);
    for (int r = 0; r < 4; ++r) {
      const __m256 t = _mm256_sub_ps(va, _mm256_loadu_ps(b[r] + i));
      acc[r] = _mm256_fmadd_ps(t, t, acc[r]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    alignas(32) float c[8];
    _mm256_store_ps(c, acc[r]);
    float s = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
    for (int k = i; k < n; ++k) s += (a[k] - b[r][k]) * (a[k] - b[r][k]);
    out[r] = s;
  }
#else
  for (int r = 0; r < 4; ++r) out[r] = SqDist(a, b[r], n);
#endif
}

inline float Dist(const float* a, const float* b, int n) { return std::sqrt(SqDist(a, b, n)); }

inline float Norm(const float* a, int n) { return std::sqrt(DotF(a, a, n)); }

// Radii are computed in f32 and the search compares f32 dot products; a slack relative to |c| + r
// covers the rounding of q.c, q.k and |q| r (errors of about 1e-6 of |q| (|c| + r) at head_dim
// 128), so a stored radius bounds its members as the search computes them.
// Per-dimension variance about `c` of n keys whose per-dimension sums are `sum` and `sum_sq`:
// mean of (k_j - c_j)^2 = sum_sq_j / n - 2 c_j sum_j / n + c_j^2 (never below 0).
inline void VarianceAbout(const double* sum, const double* sum_sq, int64_t n, const float* c,
                          int dim, float* var) {
  const double inv = 1.0 / static_cast<double>(n);
  for (int j = 0; j < dim; ++j) {
    const double cj = c[j];
    const double v = sum_sq[j] * inv - 2.0 * cj * sum[j] * inv + cj * cj;
    var[j] = static_cast<float>(v > 0 ? v : 0.0);
  }
}

inline float PadRadius(float r, float centroid_norm) { return r + 1e-5f * (r + centroid_norm); }

}  // namespace icecache::lychee
