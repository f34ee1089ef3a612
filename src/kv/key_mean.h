// The mean key of a page as selection stores it: per dimension an f32 sum over the keys in row
// order, divided by the count, rounded to the KV dtype, then stored in Q8_0 (blocks of 32 int8
// values with an f16 scale, core/quant.h): 34 bytes per 32 dimensions, about half of bf16, so
// that device memory holds the summaries of a 128K context in about 1.6% of its KV. The icecache
// index's centroid ranking and the backends' PageBounds (kernels included) do exactly this
// arithmetic, so that a selection in device memory scores the same numbers as the host.
//
// With the mean goes the page's spread: the mean squared distance of its keys from that mean, per
// dimension (KeySpread). A centroid score adds half of |q|^2 x spread / sqrt(head_dim): the
// second-order estimate of the log-mean-exp of the page's attention logits (divided by their
// scale), which ranks a page of scattered keys above a tight one with the same mean. On SmolLM2 at
// 8K and budget 256 it lowers icecache's KL against full KV by about a quarter (docs/ACCURACY.md).
#pragma once

#include <cmath>
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

// The spread of `n` keys around `mean` (KeyMean's output): per dimension in order a sum over the
// keys in row order of fma(k - m, k - m, sum), then those sums added in dimension order and divided
// by n * dim. The kernels repeat this arithmetic operation for operation. REQUIRES: n >= 1.
inline float KeySpread(const float* keys, int n, int dim, const float* mean) {
  float total = 0;
  for (int j = 0; j < dim; ++j) {
    float s = 0;
    for (int t = 0; t < n; ++t) {
      const float x = keys[static_cast<long>(t) * dim + j] - mean[j];
      s = std::fma(x, x, s);
    }
    total += s;
  }
  return total / static_cast<float>(n * dim);
}

// The element type of stored mean keys; their head dim must be a multiple of kQK (32).
constexpr DType kMeanKeyDType = DType::kQ8_0;
inline bool MeanKeyFits(int dim) { return dim > 0 && dim % kQK == 0; }

// KeyMean, stored as Q8_0 into `q8` (RowBytes(kMeanKeyDType, dim) bytes) and read back into
// `out`: the values every centroid score uses. Returns the keys' KeySpread around KeyMean's
// (unquantized) mean. REQUIRES: n >= 1, MeanKeyFits(dim).
inline float StoredKeyMean(const float* keys, int n, int dim, DType dtype, void* q8, float* out) {
  KeyMean(keys, n, dim, dtype, out);
  const float spread = KeySpread(keys, n, dim, out);
  QuantizeRow(kMeanKeyDType, out, q8, dim);
  DequantizeRow(kMeanKeyDType, q8, out, dim);
  return spread;
}

// The factor of the spread term: 1 / (2 sqrt(dim)).
inline float SpreadFactor(int dim) { return 0.5f / std::sqrt(static_cast<float>(dim)); }

// qq[g] = |q_g|^2 for the `group` query heads of `q` ([group][dim]): fma(q_j, q_j, sum) over
// dimensions in order, computed once per query for every CentroidScore against it.
inline void QuerySquares(const float* q, int group, int dim, float* qq) {
  for (int g = 0; g < group; ++g) {
    const float* qg = q + static_cast<long>(g) * dim;
    float s = 0;
    for (int j = 0; j < dim; ++j) s = std::fma(qg[j], qg[j], s);
    qq[g] = s;
  }
}

// The centroid score of a KV head's group: max over its `group` query heads ([group][dim]) of
// q.c + (|q|^2 x spread) x SpreadFactor(dim); `qq` is QuerySquares of `q`. Every operation is
// pinned (no contraction left to the compiler), so that the device's kernels compute the same
// bits: q.c is fma(q_j, c_j, sum) over dimensions in order, and the spread term is added by
// fma(|q|^2 x spread, factor, q.c).
inline float CentroidScore(const float* q, const float* qq, int group, int dim, const float* c,
                           float spread) {
  const float factor = SpreadFactor(dim);
  float best = 0;
  for (int g = 0; g < group; ++g) {
    const float* qg = q + static_cast<long>(g) * dim;
    float s = 0;
    for (int j = 0; j < dim; ++j) s = std::fma(qg[j], c[j], s);
    const float weight = qq[g] * spread;
    s = std::fma(weight, factor, s);
    best = g == 0 || s > best ? s : best;
  }
  return best;
}

// CentroidScore of `n` mean keys against one query: out[i] scores the key at c[i] (`dim` floats)
// with spread[i]. Each key gets exactly CentroidScore's operations (one fma chain per query head
// over the dimensions in order, so the same bits), but kCentroidLanes keys run side by side: their
// dimensions are copied into a tile of lanes so that each fma step covers the lanes at once
// (vector fmas), and the query heads' chains are interleaved. Groups above kCentroidMaxGroup take
// CentroidScore one key at a time.
inline constexpr int kCentroidLanes = 8;
inline constexpr int kCentroidMaxGroup = 32;

inline void CentroidScores(const float* q, const float* qq, int group, int dim,
                           const float* const* c, const float* spread, int n, float* out) {
  if (group > kCentroidMaxGroup) {
    for (int i = 0; i < n; ++i) out[i] = CentroidScore(q, qq, group, dim, c[i], spread[i]);
    return;
  }
  constexpr int kL = kCentroidLanes, kTile = 32;
  const float factor = SpreadFactor(dim);
  for (int i0 = 0; i0 < n; i0 += kL) {
    const int lanes = n - i0 < kL ? n - i0 : kL;
    alignas(32) float acc[kCentroidMaxGroup][kL] = {};
    alignas(32) float tile[kTile][kL];
    for (int j0 = 0; j0 < dim; j0 += kTile) {
      const int width = dim - j0 < kTile ? dim - j0 : kTile;
      for (int l = 0; l < kL; ++l) {
        for (int j = 0; j < width; ++j) tile[j][l] = l < lanes ? c[i0 + l][j0 + j] : 0.0f;
      }
      for (int j = 0; j < width; ++j) {
        for (int g = 0; g < group; ++g) {
          const float x = q[static_cast<long>(g) * dim + j0 + j];
          for (int l = 0; l < kL; ++l) acc[g][l] = std::fma(x, tile[j][l], acc[g][l]);
        }
      }
    }
    for (int l = 0; l < lanes; ++l) {
      float best = 0;
      for (int g = 0; g < group; ++g) {
        const float weight = qq[g] * spread[i0 + l];
        const float s = std::fma(weight, factor, acc[g][l]);
        best = g == 0 || s > best ? s : best;
      }
      out[i0 + l] = best;
    }
  }
}

// Feeds CentroidScores from a scan over candidates: each Add keeps a key (by pointer, which must
// stay valid until the next Flush) and the index its score goes to in `scores`; every
// kCentroidLanes keys, and at Flush, the batch is scored.
class CentroidBatch {
 public:
  CentroidBatch(const float* q, const float* qq, int group, int dim, float* scores)
      : q_(q), qq_(qq), group_(group), dim_(dim), scores_(scores) {}
  // Keys waiting (the lane the next Add takes).
  int pending() const { return n_; }
  void Add(const float* key, float spread, int64_t index) {
    keys_[n_] = key;
    spread_[n_] = spread;
    index_[n_++] = index;
    if (n_ == kCentroidLanes) Flush();
  }
  void Flush() {
    float out[kCentroidLanes];
    CentroidScores(q_, qq_, group_, dim_, keys_, spread_, n_, out);
    for (int l = 0; l < n_; ++l) scores_[index_[l]] = out[l];
    n_ = 0;
  }

 private:
  const float* q_;
  const float* qq_;
  int group_, dim_;
  float* scores_;
  const float* keys_[kCentroidLanes] = {};
  float spread_[kCentroidLanes] = {};
  int64_t index_[kCentroidLanes] = {};
  int n_ = 0;
};

}  // namespace icecache
