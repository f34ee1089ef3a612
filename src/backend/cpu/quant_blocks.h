// AVX2 decoders of the GGUF block formats (layouts in core/quant.h).
//
// Every format is an affine code per segment of 32 elements: w = s * q + m, with q small
// integers. A decoder walks one block and calls, per segment,
//   f(slot, offset, s_lo, s_hi, m, q0, q1, q2, q3)
// where q0..q3 hold the integer codes of elements offset + [0, 8), [8, 16), [16, 24), [24, 32)
// as floats (exact), s_lo scales q0, q1 and s_hi scales q2, q3 (they differ only for Q6_K, which
// has a scale per 16), and m is the offset (0 unless kHasOffset). The scales and offsets are the
// exact f32 values of the scalar reference (core/quant.cc): fl(fl(s * q) + m) equals DequantizeRow
// exactly (bit for bit, except that Q4_0 gives +0 where the reference may give -0), and a dot
// product can use s * sum(q x) + m * sum(x) instead.
//
// slot is std::integral_constant<int, 0 or 1>, alternating between consecutive segments (for the
// one-segment formats it is the decoder's template argument), so that a dot product can keep
// two independent accumulator sets and not wait on FMA latency.
//
// Blocks are read through byte pointers with unaligned loads: tensor data may sit at any byte
// offset (GGUF files with general.alignment = 1).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/quant.h"

namespace icecache::cpu {

// The f16 field at p (any alignment) as f32 (F16C: exact).
inline float LoadHalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

// Two adjacent f16 fields at p (any alignment) as f32.
inline void LoadHalf2At(const uint8_t* p, float* a, float* b) {
  uint32_t u;
  std::memcpy(&u, p, sizeof(u));
  const __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(u)));
  *a = _mm_cvtss_f32(v);
  *b = _mm_cvtss_f32(_mm_movehdup_ps(v));
}

inline __m128i Load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
// 8 bytes at p widened to 8 int32 lanes (one vpmovzxbd / vpmovsxbd with a memory operand).
inline __m256i U8x8At(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i I8x8At(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

template <int kSlot>
using Slot = std::integral_constant<int, kSlot>;

// Calls f for one segment whose 32 codes are in int32 lanes.
template <int kSlot, typename F>
inline void EmitSegment(F&& f, int offset, float s_lo, float s_hi, float m, __m256i a, __m256i b,
                        __m256i c, __m256i d) {
  f(Slot<kSlot>{}, offset, s_lo, s_hi, m, _mm256_cvtepi32_ps(a), _mm256_cvtepi32_ps(b),
    _mm256_cvtepi32_ps(c), _mm256_cvtepi32_ps(d));
}

struct DecodeQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kElems = kQK;
  static constexpr bool kHasOffset = false;
  template <int kSlot = 0, typename F>
  static void Decode(const uint8_t* b, F&& f) {
    const float d = LoadHalfAt(b + offsetof(Block, d));
    const uint8_t* qs = b + offsetof(Block, qs);
    EmitSegment<kSlot>(f, 0, d, d, 0.0f, I8x8At(qs), I8x8At(qs + 8), I8x8At(qs + 16),
                       I8x8At(qs + 24));
  }
};

// The 32 nibble codes of a Q4_0 / Q4_1 block: element j < 16 is the low nibble of qs[j],
// element j + 16 the high nibble.
template <int kSlot, typename F>
inline void EmitNibbles(F&& f, const uint8_t* qs, float s, float m) {
  const __m256i mask = _mm256_set1_epi32(0x0f);
  const __m256i v0 = U8x8At(qs);
  const __m256i v1 = U8x8At(qs + 8);
  EmitSegment<kSlot>(f, 0, s, s, m, _mm256_and_si256(v0, mask), _mm256_and_si256(v1, mask),
                     _mm256_srli_epi32(v0, 4), _mm256_srli_epi32(v1, 4));
}

// w = (q - 8) * d, coded as s = d, m = -8 d: d * q and d * (q - 8) are exact in f32 (an f16
// scale times a 4-bit integer), so fl(d q - 8 d) is the reference's fl((q - 8) * d) bit for bit.
struct DecodeQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kElems = kQK;
  static constexpr bool kHasOffset = true;
  template <int kSlot = 0, typename F>
  static void Decode(const uint8_t* b, F&& f) {
    const float d = LoadHalfAt(b + offsetof(Block, d));
    EmitNibbles<kSlot>(f, b + offsetof(Block, qs), d, -8.0f * d);
  }
};

struct DecodeQ4_1 {  // w = d * q + m
  using Block = BlockQ4_1;
  static constexpr int kElems = kQK;
  static constexpr bool kHasOffset = true;
  template <int kSlot = 0, typename F>
  static void Decode(const uint8_t* b, F&& f) {
    static_assert(offsetof(Block, m) == offsetof(Block, d) + 2);
    float d, m;
    LoadHalf2At(b + offsetof(Block, d), &d, &m);
    EmitNibbles<kSlot>(f, b + offsetof(Block, qs), d, m);
  }
};

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block.
inline void KScaleMin(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K: w = (d * sc) * q - dmin * mn per sub-block of 32; q are the low nibbles of
// qs[32c, 32c + 32) for sub-block 2c and their high nibbles for sub-block 2c + 1.
struct DecodeQ4_K {
  using Block = BlockQ4_K;
  static constexpr int kElems = kQKK;
  static constexpr bool kHasOffset = true;
  template <int kUnusedSlot = 0, typename F>
  static void Decode(const uint8_t* b, F&& f) {
    static_assert(offsetof(Block, dmin) == offsetof(Block, d) + 2);
    float d, dmin;
    LoadHalf2At(b + offsetof(Block, d), &d, &dmin);
    const uint8_t* scales = b + offsetof(Block, scales);
    const uint8_t* qs = b + offsetof(Block, qs);
    const __m256i mask = _mm256_set1_epi32(0x0f);
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      KScaleMin(scales, 2 * c, &sc0, &m0);
      KScaleMin(scales, 2 * c + 1, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), n0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), n1 = dmin * static_cast<float>(m1);
      __m256i v[4];
      for (int i = 0; i < 4; ++i) v[i] = U8x8At(qs + 32 * c + 8 * i);
      EmitSegment<0>(f, 64 * c, d0, d0, -n0, _mm256_and_si256(v[0], mask),
                     _mm256_and_si256(v[1], mask), _mm256_and_si256(v[2], mask),
                     _mm256_and_si256(v[3], mask));
      EmitSegment<1>(f, 64 * c + 32, d1, d1, -n1, _mm256_srli_epi32(v[0], 4),
                     _mm256_srli_epi32(v[1], 4), _mm256_srli_epi32(v[2], 4),
                     _mm256_srli_epi32(v[3], 4));
    }
  }
};

// Q5_K: as Q4_K with a fifth bit: bit 2c of qh[l] for element l of sub-block 2c, bit 2c + 1 for
// sub-block 2c + 1.
struct DecodeQ5_K {
  using Block = BlockQ5_K;
  static constexpr int kElems = kQKK;
  static constexpr bool kHasOffset = true;
  template <int kUnusedSlot = 0, typename F>
  static void Decode(const uint8_t* b, F&& f) {
    static_assert(offsetof(Block, dmin) == offsetof(Block, d) + 2);
    float d, dmin;
    LoadHalf2At(b + offsetof(Block, d), &d, &dmin);
    const uint8_t* scales = b + offsetof(Block, scales);
    const uint8_t* qs = b + offsetof(Block, qs);
    const uint8_t* qh = b + offsetof(Block, qh);
    const __m256i mask = _mm256_set1_epi32(0x0f);
    const __m256i bit4 = _mm256_set1_epi32(0x10);
    __m256i h16[4];  // qh[8i, 8i + 8) << 4: bit 2c (2c + 1) lands on bit 4 after >> 2c (2c + 1)
    for (int i = 0; i < 4; ++i) h16[i] = _mm256_slli_epi32(U8x8At(qh + 8 * i), 4);
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      KScaleMin(scales, 2 * c, &sc0, &m0);
      KScaleMin(scales, 2 * c + 1, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0), n0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), n1 = dmin * static_cast<float>(m1);
      const __m128i shift_lo = _mm_cvtsi32_si128(2 * c);
      const __m128i shift_hi = _mm_cvtsi32_si128(2 * c + 1);
      __m256i lo[4], hi[4];
      for (int i = 0; i < 4; ++i) {
        const __m256i v = U8x8At(qs + 32 * c + 8 * i);
        lo[i] = _mm256_or_si256(_mm256_and_si256(v, mask),
                                _mm256_and_si256(_mm256_srl_epi32(h16[i], shift_lo), bit4));
        hi[i] = _mm256_or_si256(_mm256_srli_epi32(v, 4),
                                _mm256_and_si256(_mm256_srl_epi32(h16[i], shift_hi), bit4));
      }
      EmitSegment<0>(f, 64 * c, d0, d0, -n0, lo[0], lo[1], lo[2], lo[3]);
      EmitSegment<1>(f, 64 * c + 32, d1, d1, -n1, hi[0], hi[1], hi[2], hi[3]);
    }
  }
};

// Q6_K: two halves of 128. Element l + 32g (g = 0..3, l < 32) of half h: low 4 bits from
// ql[64h + l] (g = 0, 2) or ql[64h + 32 + l] (g = 1, 3), low nibble for g < 2, high otherwise;
// top 2 bits at bit 2g of qh[32h + l]; code q - 32; scale d * scales[8h + 2g + l / 16].
struct DecodeQ6_K {
  using Block = BlockQ6_K;
  static constexpr int kElems = kQKK;
  static constexpr bool kHasOffset = false;
  template <int kUnusedSlot = 0, typename F>
  static void Decode(const uint8_t* b, F&& f) {
    const float d = LoadHalfAt(b + offsetof(Block, d));
    const __m128i mask4 = _mm_set1_epi8(0x0f);
    const __m128i mask2 = _mm_set1_epi8(0x03);
    const __m128i m32 = _mm_set1_epi8(32);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b + offsetof(Block, ql) + 64 * half;
      const uint8_t* qh = b + offsetof(Block, qh) + 32 * half;
      const auto* sc = reinterpret_cast<const int8_t*>(b + offsetof(Block, scales)) + 8 * half;
      auto group = [&](int g, auto slot) {
        __m128i q[2];
        for (int h = 0; h < 2; ++h) {  // l in [16h, 16h + 16)
          const __m128i lbits = Load16(ql + 32 * (g & 1) + 16 * h);
          const __m128i low =
              g < 2 ? _mm_and_si128(lbits, mask4) : _mm_and_si128(_mm_srli_epi16(lbits, 4), mask4);
          const __m128i hbits = Load16(qh + 16 * h);
          const __m128i high = _mm_and_si128(_mm_srl_epi16(hbits, _mm_cvtsi32_si128(2 * g)), mask2);
          q[h] = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), m32);
        }
        EmitSegment<decltype(slot)::value>(
            f, 128 * half + 32 * g, d * static_cast<float>(sc[2 * g]),
            d * static_cast<float>(sc[2 * g + 1]), 0.0f, _mm256_cvtepi8_epi32(q[0]),
            _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(q[0], q[0])), _mm256_cvtepi8_epi32(q[1]),
            _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(q[1], q[1])));
      };
      for (int g = 0; g < 4; g += 2) {
        group(g, Slot<0>{});
        group(g + 1, Slot<1>{});
      }
    }
  }
};

}  // namespace icecache::cpu
