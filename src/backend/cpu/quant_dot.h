// Weight-row kernels of the CPU MatMul: fused dequantize-and-dot (GEMV) and panel
// dequantization, for every weight dtype the CPU backend reads (F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q4_K, Q5_K, Q6_K).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace icecache::cpu {

constexpr int kGemvMaxRows = 4;

// True when the kernels below accept weights of `type`.
bool CpuWeightTypeSupported(DType type);

// Formats whose GEMV needs the activations' sums per 32-element segment (affine codes with an
// offset: Q4_0, Q4_1, Q4_K, Q5_K).
bool GemvNeedsSegmentSums(DType type);
// out[r * (k / 32) + s] = sum of x[r * ldx + 32 s, +32) for r < nr. REQUIRES: k % 32 == 0.
void SegmentSums(const float* x, int64_t ldx, int nr, int64_t k, float* out);

// For j in [j0, j1) and r in [0, nr): y[r * ldy + j] = dot(x[r * ldx, +k), w row j) (+ bias[j]).
// w is [*, k] of `type` with rows of RowBytes(type, k) bytes. Each weight block is read once
// and used for all nr activation rows; block codes are dotted with the activations in f32 and
// scaled per segment (s * sum(q x) + m * sum(x), sum(x) from `xsum` = SegmentSums when
// GemvNeedsSegmentSums, else unused). No activation is quantized: the result is the f32 dot
// product of the dequantized row up to f32 rounding.
// Rows up to prefetch_end (>= j1) may be prefetched: weight rows stream from memory, and the
// rows after j1 are usually the caller's next ones.
// REQUIRES: 1 <= nr <= kGemvMaxRows, k % BlockElems(type) == 0.
void GemvRows(DType type, const void* w, int64_t k, const float* x, int64_t ldx, int nr,
              const float* xsum, const float* bias, float* y, int64_t ldy, int64_t j0, int64_t j1,
              int64_t prefetch_end);

// dst[(j - j0) * k + i] = w[j][i] for j in [j0, j1): the values of DequantizeRow, exactly (bit
// for bit except the sign of zeros from Q4_0).
void DequantizeRows(DType type, const void* w, int64_t k, int64_t j0, int64_t j1, float* dst);

}  // namespace icecache::cpu
