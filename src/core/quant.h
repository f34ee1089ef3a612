// Block-quantized formats of GGUF (ggml's layouts, bit for bit) and their scalar reference
// (de)quantizers. Kernels in backends have faster versions and are tested against these.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace icecache {

constexpr int kQK = 32;    // elements per Q8_0 / Q4_0 / Q4_1 block
constexpr int kQKK = 256;  // elements per K-quant super-block
constexpr int kKScaleBytes = 12;

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];  // element j in low nibble of qs[j], element j+16 in the high nibble
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];  // 8 x (6-bit scale, 6-bit min), packed
  uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// dst[0..n) = dequantized src. Works for every DType except kI32.
// REQUIRES: n % BlockElems(type) == 0.
void DequantizeRow(DType type, const void* src, float* dst, int64_t n);

// Reference quantizer (round to nearest, simple scale search): dst receives RowBytes(type, n)
// bytes. Used by the writers and tests; not tuned for quality.
// REQUIRES: n % BlockElems(type) == 0, type != kI32.
void QuantizeRow(DType type, const float* src, void* dst, int64_t n);

}  // namespace icecache
