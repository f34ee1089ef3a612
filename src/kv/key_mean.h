// The mean key of a page as selection stores it: per dimension an f32 sum over the keys in row
// order, divided by the count, rounded to the KV dtype. The icecache index's centroid ranking and
// the backends' PageBounds (kernels included) do exactly this arithmetic, so that a selection in
// device memory scores the same numbers as the host.
#pragma once

#include "core/dtype.h"
#include "core/half.h"

namespace icecache {

// `value` as stored in `dtype` (f32, bf16 or f16), back in f32.
inline float RoundToDtype(float value, DType dtype) {
  if (dtype == DType::kBF16) return Bf16ToF32(F32ToBf16(value));
  if (dtype == DType::kF16) return F16ToF32(F32ToF16(value));
  return value;
}

// out[j] = RoundToDtype(sum_t keys[t][j] / n). REQUIRES: n >= 1.
inline void KeyMean(const float* keys, int n, int dim, DType dtype, float* out) {
  for (int j = 0; j < dim; ++j) {
    float s = 0;
    for (int t = 0; t < n; ++t) s += keys[static_cast<long>(t) * dim + j];
    out[j] = RoundToDtype(s / static_cast<float>(n), dtype);
  }
}

// The centroid score of a KV head's group: max over its `group` query heads ([group][dim]) of
// q.c, each a sum over dimensions in order.
inline float CentroidScore(const float* q, int group, int dim, const float* c) {
  float best = 0;
  for (int g = 0; g < group; ++g) {
    float s = 0;
    for (int j = 0; j < dim; ++j) s += q[static_cast<long>(g) * dim + j] * c[j];
    best = g == 0 || s > best ? s : best;
  }
  return best;
}

}  // namespace icecache
