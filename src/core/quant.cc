// Scalar reference (de)quantizers for ggml's block formats.
//
// Blocks are copied into a local struct before use: tensor data may sit at any byte offset (a
// GGUF file with general.alignment = 1, a safetensors data section), and reading a uint16_t
// through a misaligned pointer is undefined behaviour.
//
// Dequantization follows ggml's arithmetic exactly (float32, same operation order), so results
// are bit-identical to ggml and gguf-py. Floating-point contraction (a*b+c into one FMA) is off
// in this file: the quantizers round x*id+0.5 the way ggml's reference code and gguf-py do, and
// must produce the same bytes whatever compiler builds them.
#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/half.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace icecache {

namespace {

template <typename Block>
Block LoadBlock(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof(Block));
  return b;
}

template <typename Block>
void StoreBlock(const Block& b, uint8_t* p) {
  std::memcpy(p, &b, sizeof(Block));
}

// Rounds half away from zero (C roundf) and clamps to [lo, hi]; NaN maps to lo.
int RoundClamp(float v, int lo, int hi) {
  const float r = std::round(v);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// Truncates toward zero and clamps to [lo, hi]; NaN maps to lo.
int TruncClamp(float v, int lo, int hi) {
  const float r = std::trunc(v);
  if (!(r >= static_cast<float>(lo))) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// ---- K-quant scale packing: 8 x (6-bit scale, 6-bit min) in 12 bytes -------------------------
// Bytes 0-3: low 6 bits of scales 0-3, bytes 4-7: low 6 bits of mins 0-3; bytes 8-11: low
// nibble = low 4 bits of scales 4-7, high nibble = low 4 bits of mins 4-7; the top two bits of
// scales 4-7 sit in bits 6-7 of bytes 0-3, those of mins 4-7 in bits 6-7 of bytes 4-7.

void UnpackScaleMin(const uint8_t* q, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void PackScaleMin(const uint8_t sc[8], const uint8_t m[8], uint8_t* q) {
  std::memset(q, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] |= sc[j] & 63;
      q[j + 4] |= m[j] & 63;
    } else {
      q[j + 4] = static_cast<uint8_t>((sc[j] & 0x0F) | ((m[j] & 0x0F) << 4));
      q[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

// ---- Dequantization ---------------------------------------------------------------------------

void DequantQ8_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, src += sizeof(BlockQ8_0), y += kQK) {
    const auto b = LoadBlock<BlockQ8_0>(src);
    const float d = F16ToF32(b.d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

void DequantQ4_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, src += sizeof(BlockQ4_0), y += kQK) {
    const auto b = LoadBlock<BlockQ4_0>(src);
    const float d = F16ToF32(b.d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantQ4_1(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, src += sizeof(BlockQ4_1), y += kQK) {
    const auto b = LoadBlock<BlockQ4_1>(src);
    const float d = F16ToF32(b.d);
    const float m = F16ToF32(b.m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(b.qs[j] & 0x0F) + m;
      y[j + kQK / 2] = d * static_cast<float>(b.qs[j] >> 4) + m;
    }
  }
}

// Q4_K: four chunks of 64; chunk c uses sub-blocks 2c (low nibbles of qs[32c..32c+32)) and 2c+1
// (high nibbles of the same bytes).
void DequantQ4_K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, src += sizeof(BlockQ4_K), y += kQKK) {
    const auto b = LoadBlock<BlockQ4_K>(src);
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      UnpackScaleMin(b.scales, 2 * c, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      UnpackScaleMin(b.scales, 2 * c + 1, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t* q = b.qs + 32 * c;
      float* out = y + 64 * c;
      for (int l = 0; l < 32; ++l) out[l] = d1 * static_cast<float>(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) out[32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// Q5_K: like Q4_K plus a fifth bit: bit j of qh[l] is the high bit of element 32j + l.
void DequantQ5_K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, src += sizeof(BlockQ5_K), y += kQKK) {
    const auto b = LoadBlock<BlockQ5_K>(src);
    const float d = F16ToF32(b.d);
    const float dmin = F16ToF32(b.dmin);
    for (int c = 0; c < 4; ++c) {
      uint8_t sc, m;
      UnpackScaleMin(b.scales, 2 * c, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      UnpackScaleMin(b.scales, 2 * c + 1, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t* q = b.qs + 32 * c;
      const int lo_bit = 2 * c, hi_bit = 2 * c + 1;
      float* out = y + 64 * c;
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] & 0x0F) | (((b.qh[l] >> lo_bit) & 1) << 4);
        out[l] = d1 * static_cast<float>(v) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] >> 4) | (((b.qh[l] >> hi_bit) & 1) << 4);
        out[32 + l] = d2 * static_cast<float>(v) - m2;
      }
    }
  }
}

// Q6_K: two halves of 128. In half h, for l < 32: ql[64h + l] holds the low nibbles of elements
// l (low) and 64 + l (high), ql[64h + 32 + l] those of 32 + l and 96 + l; qh[32h + l] holds the
// two high bits of elements l, 32 + l, 64 + l, 96 + l at bits 0, 2, 4, 6. One int8 scale per 16.
void DequantQ6_K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, src += sizeof(BlockQ6_K), y += kQKK) {
    const auto b = LoadBlock<BlockQ6_K>(src);
    const float d = F16ToF32(b.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      const int8_t* sc = b.scales + 8 * h;
      float* out = y + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        out[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        out[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        out[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// ---- Quantization -----------------------------------------------------------------------------

void QuantQ8_0(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK, dst += sizeof(BlockQ8_0)) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b;
    b.d = F32ToF16(d);
    for (int j = 0; j < kQK; ++j) b.qs[j] = static_cast<int8_t>(RoundClamp(x[j] * id, -127, 127));
    StoreBlock(b, dst);
  }
}

void QuantQ4_0(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK, dst += sizeof(BlockQ4_0)) {
    // The value of largest magnitude maps to -8, which uses the full range [-8, 7].
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        vmax = x[j];
      }
    }
    const float d = vmax / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b;
    b.d = F32ToF16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp(x[j] * id + 8.5f, 0, 15);
      const int q1 = TruncClamp(x[j + kQK / 2] * id + 8.5f, 0, 15);
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    StoreBlock(b, dst);
  }
}

void QuantQ4_1(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK, dst += sizeof(BlockQ4_1)) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < kQK; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 b;
    b.d = F32ToF16(d);
    b.m = F32ToF16(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp((x[j] - mn) * id + 0.5f, 0, 15);
      const int q1 = TruncClamp((x[j + kQK / 2] - mn) * id + 0.5f, 0, 15);
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    StoreBlock(b, dst);
  }
}

// Shared by Q4_K and Q5_K: per sub-block of 32, an affine map x ~ d*sc*q - dmin*m with q in
// [0, qmax]. Fills the f16 super-scales, the 6-bit scales and mins, and q for all 256 elements.
void QuantAffineK(const float* x, int qmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t sc[8],
                  uint8_t m[8], uint8_t q[kQKK]) {
  float scale[8], minv[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* v = x + 32 * j;
    float lo = v[0], hi = v[0];
    for (int l = 1; l < 32; ++l) {
      lo = std::min(lo, v[l]);
      hi = std::max(hi, v[l]);
    }
    lo = std::min(lo, 0.0f);  // the min is stored as a non-negative offset
    hi = std::max(hi, lo);
    scale[j] = (hi - lo) / static_cast<float>(qmax);
    minv[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, minv[j]);
  }
  *d_out = F32ToF16(max_scale / 63.0f);
  *dmin_out = F32ToF16(max_min / 63.0f);
  const float d = F16ToF32(*d_out);
  const float dmin = F16ToF32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0.0f ? RoundClamp(scale[j] / d, 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0.0f ? RoundClamp(minv[j] / dmin, 0, 63) : 0);
    const float dj = d * sc[j];
    const float mj = dmin * m[j];
    for (int l = 0; l < 32; ++l) {
      const float v = x[32 * j + l];
      q[32 * j + l] = static_cast<uint8_t>(dj > 0.0f ? RoundClamp((v + mj) / dj, 0, qmax) : 0);
    }
  }
}

void QuantQ4_K(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK, dst += sizeof(BlockQ4_K)) {
    BlockQ4_K b;
    uint8_t sc[8], m[8], q[kQKK];
    QuantAffineK(x, 15, &b.d, &b.dmin, sc, m, q);
    PackScaleMin(sc, m, b.scales);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        b.qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
      }
    }
    StoreBlock(b, dst);
  }
}

void QuantQ5_K(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK, dst += sizeof(BlockQ5_K)) {
    BlockQ5_K b;
    uint8_t sc[8], m[8], q[kQKK];
    QuantAffineK(x, 31, &b.d, &b.dmin, sc, m, q);
    PackScaleMin(sc, m, b.scales);
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
        b.qs[32 * c + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
        b.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
    StoreBlock(b, dst);
  }
}

void QuantQ6_K(const float* x, uint8_t* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK, dst += sizeof(BlockQ6_K)) {
    // Per 16 values: the value of largest magnitude maps to -32 (full range [-32, 31]).
    float scale[16];
    float max_abs_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float amax = 0.0f, vmax = 0.0f;
      for (int l = 0; l < 16; ++l) {
        const float v = x[16 * j + l];
        if (std::fabs(v) > amax) {
          amax = std::fabs(v);
          vmax = v;
        }
      }
      scale[j] = vmax / -32.0f;
      max_abs_scale = std::max(max_abs_scale, std::fabs(scale[j]));
    }
    BlockQ6_K b;
    b.d = F32ToF16(max_abs_scale / 127.0f);
    const float d = F16ToF32(b.d);
    uint8_t q[kQKK];
    for (int j = 0; j < 16; ++j) {
      const int s = d > 0.0f ? RoundClamp(scale[j] / d, -128, 127) : 0;
      b.scales[j] = static_cast<int8_t>(s);
      const float dj = d * static_cast<float>(s);
      for (int l = 0; l < 16; ++l) {
        const float v = x[16 * j + l];
        q[16 * j + l] = static_cast<uint8_t>((dj != 0.0f ? RoundClamp(v / dj, -32, 31) : 0) + 32);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q1 = qq[l], q2 = qq[l + 32], q3 = qq[l + 64], q4 = qq[l + 96];
        b.ql[64 * h + l] = static_cast<uint8_t>((q1 & 0x0F) | ((q3 & 0x0F) << 4));
        b.ql[64 * h + 32 + l] = static_cast<uint8_t>((q2 & 0x0F) | ((q4 & 0x0F) << 4));
        b.qh[32 * h + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                                ((q4 >> 4) << 6));
      }
    }
    StoreBlock(b, dst);
  }
}

}  // namespace

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  ICECACHE_CHECK(n >= 0 && n % BlockElems(type) == 0);
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t nb = n / BlockElems(type);
  switch (type) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, s, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = type == DType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
      }
      return;
    case DType::kQ8_0:
      return DequantQ8_0(s, dst, nb);
    case DType::kQ4_0:
      return DequantQ4_0(s, dst, nb);
    case DType::kQ4_1:
      return DequantQ4_1(s, dst, nb);
    case DType::kQ4_K:
      return DequantQ4_K(s, dst, nb);
    case DType::kQ5_K:
      return DequantQ5_K(s, dst, nb);
    case DType::kQ6_K:
      return DequantQ6_K(s, dst, nb);
    case DType::kI32:
      break;
  }
  ICECACHE_CHECK_MSG(false, "DequantizeRow: unsupported dtype");
}

void QuantizeRow(DType type, const float* src, void* dst, int64_t n) {
  ICECACHE_CHECK(n >= 0 && n % BlockElems(type) == 0);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t nb = n / BlockElems(type);
  switch (type) {
    case DType::kF32:
      if (n > 0) std::memcpy(d, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = type == DType::kF16 ? F32ToF16(src[i]) : F32ToBf16(src[i]);
        std::memcpy(d + 2 * i, &h, 2);
      }
      return;
    case DType::kQ8_0:
      return QuantQ8_0(src, d, nb);
    case DType::kQ4_0:
      return QuantQ4_0(src, d, nb);
    case DType::kQ4_1:
      return QuantQ4_1(src, d, nb);
    case DType::kQ4_K:
      return QuantQ4_K(src, d, nb);
    case DType::kQ5_K:
      return QuantQ5_K(src, d, nb);
    case DType::kQ6_K:
      return QuantQ6_K(src, d, nb);
    case DType::kI32:
      break;
  }
  ICECACHE_CHECK_MSG(false, "QuantizeRow: unsupported dtype");
}

}  // namespace icecache
