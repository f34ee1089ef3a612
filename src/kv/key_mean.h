// The mean key of a page as selection stores it: per dimension an f32 sum over the keys in row
// order, divided by the count, rounded to the KV dtype, then stored in Q8_0 (blocks of 32 int8
// values with an f16 scale, core/quant.h): 34 bytes per 32 dimensions, about half of bf16, so
// that device memory holds the summaries of a 128K context in about 1.6% of its KV. The icecache
// index's centroid ranking and the backends' PageBounds (kernels included) do exactly this
// arithmetic, so that a selection in device memory scores the same numbers as the host.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/half.h"
#include "core/quant.h"

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

// The element type of stored mean keys; their head dim must be a multiple of kQK (32).
constexpr DType kMeanKeyDType = DType::kQ8_0;
inline bool MeanKeyFits(int dim) { return dim > 0 && dim % kQK == 0; }

// KeyMean, stored as Q8_0 into `q8` (RowBytes(kMeanKeyDType, dim) bytes) and read back into
// `out`: the values every centroid score uses. REQUIRES: n >= 1, MeanKeyFits(dim).
inline void StoredKeyMean(const float* keys, int n, int dim, DType dtype, void* q8, float* out) {
  KeyMean(keys, n, dim, dtype, out);
  QuantizeRow(kMeanKeyDType, out, q8, dim);
  DequantizeRow(kMeanKeyDType, q8, out, dim);
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
