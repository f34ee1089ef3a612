// Small dense-vector helpers for the lychee index (keys and centroids are f32 rows of head_dim).
// The loops keep eight independent partial sums so the compiler vectorizes them without
// -ffast-math; results are deterministic for a given build.
#pragma once

#include <cmath>
#include <cstdint>

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

inline float Dist(const float* a, const float* b, int n) { return std::sqrt(SqDist(a, b, n)); }

inline float Norm(const float* a, int n) { return std::sqrt(DotF(a, a, n)); }

// Radii are computed in f32 and the search compares f32 dot products; a slack relative to |c| + r
// covers the rounding of q.c, q.k and |q| r (errors of about 1e-6 of |q| (|c| + r) at head_dim
// 128), so a stored radius bounds its members as the search computes them.
inline float PadRadius(float r, float centroid_norm) { return r + 1e-5f * (r + centroid_norm); }

}  // namespace icecache::lychee
