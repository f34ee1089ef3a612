#include "backend/cpu/quant_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/simd.h"
#include "core/check.h"
#include "core/half.h"

namespace icecache::cpu {

namespace {

// Loads of the plain (unblocked) weight types, 8 elements at a time, plus a scalar load.
// Element i of a row is at byte kSize * i; rows may sit at any byte offset, so every load is an
// unaligned one (vector loadu or memcpy).
struct PlainF32 {
  static constexpr int64_t kSize = 4;
  static __m256 Load8(const uint8_t* p) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  }
  static float Load1(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, sizeof(f));
    return f;
  }
};
struct PlainF16 {
  static constexpr int64_t kSize = 2;
  static __m256 Load8(const uint8_t* p) { return LoadF16(reinterpret_cast<const uint16_t*>(p)); }
  static float Load1(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof(h));
    return F16ToF32(h);
  }
};
struct PlainBf16 {
  static constexpr int64_t kSize = 2;
  static __m256 Load8(const uint8_t* p) { return LoadBf16(reinterpret_cast<const uint16_t*>(p)); }
  static float Load1(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, sizeof(h));
    return Bf16ToF32(h);
  }
};

// Weight streams from memory run at memory speed only if their lines are requested early
// enough; the hardware prefetcher alone lags. Each row asks for the row about this many bytes
// ahead (up to the caller's prefetch_end).
constexpr int64_t kPrefetchBytes = 4096;

inline void PrefetchRow(const uint8_t* p, int64_t bytes) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

template <int NR>
struct Accumulators {
  __m256 v[NR][4];
  Accumulators() {
    for (int r = 0; r < NR; ++r) {
      for (int i = 0; i < 4; ++i) v[r][i] = _mm256_setzero_ps();
    }
  }
  // Adds w0..w3 (elements [e, e + 32) of the weight row) times the matching activations.
  void Fma32(const float* x, int64_t ldx, int64_t e, __m256 w0, __m256 w1, __m256 w2, __m256 w3) {
    for (int r = 0; r < NR; ++r) {
      const float* xr = x + r * ldx + e;
      v[r][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr), v[r][0]);
      v[r][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), v[r][1]);
      v[r][2] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xr + 16), v[r][2]);
      v[r][3] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xr + 24), v[r][3]);
    }
  }
  float Sum(int r) const {
    return HorizontalSum(
        _mm256_add_ps(_mm256_add_ps(v[r][0], v[r][1]), _mm256_add_ps(v[r][2], v[r][3])));
  }
};

// Block formats: y = sum over segments of s * sum(q x) (+ m * sum(x)), sum(x) per 32-element
// segment precomputed in xsum ([nr][k / 32]) for formats with an offset. Codes are converted to
// f32 once per block and reused for all rows.
template <typename D, int NR>
void GemvBlocked(const uint8_t* w, int64_t row_bytes, int64_t k, const float* x, int64_t ldx,
                 const float* xsum, const float* bias, float* y, int64_t ldy, int64_t j0,
                 int64_t j1, int64_t prefetch_end) {
  constexpr int64_t kBytes = sizeof(typename D::Block);
  const int64_t nb = k / D::kElems;
  const int64_t segs = k / 32;
  const int64_t ahead = std::max<int64_t>(1, kPrefetchBytes / row_bytes);
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w + j * row_bytes;
    if (j + ahead < prefetch_end) PrefetchRow(row + ahead * row_bytes, row_bytes);
    // One row: two accumulator sets (slots) for alternating segments, each with a vector for
    // the low and the high half of a segment, so FMA latency is hidden. More rows: the rows'
    // chains are independent already, and one set keeps 2 * NR + 4 code vectors + scales in
    // the 16 ymm registers.
    constexpr int kSets = NR == 1 ? 2 : 1;
    __m256 acc[NR][2 * kSets];
    float offset_sum[NR][kSets];
    for (int r = 0; r < NR; ++r) {
      for (auto& a : acc[r]) a = _mm256_setzero_ps();
      for (auto& o : offset_sum[r]) o = 0.0f;
    }
    int64_t base = 0;
    auto segment = [&](auto slot, int off, float s_lo, float s_hi, float m, __m256 q0, __m256 q1,
                       __m256 q2, __m256 q3) {
      constexpr int kSet = kSets == 2 ? decltype(slot)::value : 0;
      const __m256 vs_lo = _mm256_set1_ps(s_lo);
      const __m256 vs_hi = _mm256_set1_ps(s_hi);
      if constexpr (NR <= 2) {
        // Few rows: dot the codes, then scale the two partial sums (3 FP ops per 8 codes).
        for (int r = 0; r < NR; ++r) {
          const float* xr = x + r * ldx + base + off;
          const __m256 lo =
              _mm256_fmadd_ps(q1, _mm256_loadu_ps(xr + 8), _mm256_mul_ps(q0, _mm256_loadu_ps(xr)));
          const __m256 hi = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xr + 24),
                                            _mm256_mul_ps(q2, _mm256_loadu_ps(xr + 16)));
          acc[r][2 * kSet] = _mm256_fmadd_ps(lo, vs_lo, acc[r][2 * kSet]);
          acc[r][2 * kSet + 1] = _mm256_fmadd_ps(hi, vs_hi, acc[r][2 * kSet + 1]);
        }
      } else {
        // More rows: scale the codes once (fl(s * q), the reference's value before the
        // offset), then one FMA per 8 codes and row.
        const __m256 w0 = _mm256_mul_ps(q0, vs_lo), w1 = _mm256_mul_ps(q1, vs_lo);
        const __m256 w2 = _mm256_mul_ps(q2, vs_hi), w3 = _mm256_mul_ps(q3, vs_hi);
        for (int r = 0; r < NR; ++r) {
          const float* xr = x + r * ldx + base + off;
          acc[r][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr), acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xr + 16), acc[r][1]);
          acc[r][0] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xr + 24), acc[r][1]);
        }
      }
      if constexpr (D::kHasOffset) {
        for (int r = 0; r < NR; ++r) {
          offset_sum[r][kSet] += m * xsum[r * segs + (base + off) / 32];
        }
      }
    };
    int64_t b = 0;
    if constexpr (D::kElems == 32) {  // one segment per block: alternate slots by block
      for (; b + 2 <= nb; b += 2) {
        base = b * D::kElems;
        D::template Decode<0>(row + b * kBytes, segment);
        base += D::kElems;
        D::template Decode<1>(row + (b + 1) * kBytes, segment);
      }
    }
    for (; b < nb; ++b) {
      base = b * D::kElems;
      D::Decode(row + b * kBytes, segment);
    }
    const float bj = bias != nullptr ? bias[j] : 0.0f;
    for (int r = 0; r < NR; ++r) {
      __m256 sum = _mm256_add_ps(acc[r][0], acc[r][1]);
      float offsets = offset_sum[r][0];
      if constexpr (kSets == 2) {
        sum = _mm256_add_ps(sum, _mm256_add_ps(acc[r][2], acc[r][3]));
        offsets += offset_sum[r][1];
      }
      y[r * ldy + j] = HorizontalSum(sum) + offsets + bj;
    }
  }
}

template <typename P, int NR>
void GemvPlain(const uint8_t* w, int64_t row_bytes, int64_t k, const float* x, int64_t ldx,
               const float* /*xsum*/, const float* bias, float* y, int64_t ldy, int64_t j0,
               int64_t j1, int64_t prefetch_end) {
  constexpr int64_t kS = P::kSize;
  const int64_t k32 = k / 32 * 32;
  const int64_t k8 = k / 8 * 8;
  const int64_t ahead = std::max<int64_t>(1, kPrefetchBytes / row_bytes);
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w + j * row_bytes;
    if (j + ahead < prefetch_end) PrefetchRow(row + ahead * row_bytes, row_bytes);
    Accumulators<NR> acc;
    int64_t e = 0;
    for (; e < k32; e += 32) {
      acc.Fma32(x, ldx, e, P::Load8(row + e * kS), P::Load8(row + (e + 8) * kS),
                P::Load8(row + (e + 16) * kS), P::Load8(row + (e + 24) * kS));
    }
    for (; e < k8; e += 8) {
      const __m256 wv = P::Load8(row + e * kS);
      for (int r = 0; r < NR; ++r) {
        acc.v[r][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * ldx + e), acc.v[r][0]);
      }
    }
    const float b = bias != nullptr ? bias[j] : 0.0f;
    for (int r = 0; r < NR; ++r) {
      float s = acc.Sum(r);
      for (int64_t t = k8; t < k; ++t) s += P::Load1(row + t * kS) * x[r * ldx + t];
      y[r * ldy + j] = s + b;
    }
  }
}

using GemvFn = void (*)(const uint8_t*, int64_t, int64_t, const float*, int64_t, const float*,
                        const float*, float*, int64_t, int64_t, int64_t, int64_t);

template <typename D>
struct Blocked {
  template <int NR>
  static constexpr GemvFn kRun = &GemvBlocked<D, NR>;
};

template <typename P>
struct Plain {
  template <int NR>
  static constexpr GemvFn kRun = &GemvPlain<P, NR>;
};

template <typename K>
GemvFn PickRows(int nr) {
  switch (nr) {
    case 1:
      return K::template kRun<1>;
    case 2:
      return K::template kRun<2>;
    case 3:
      return K::template kRun<3>;
    default:
      return K::template kRun<4>;
  }
}

template <typename D>
void DequantBlocked(const uint8_t* w, int64_t row_bytes, int64_t k, int64_t j0, int64_t j1,
                    float* dst) {
  constexpr int64_t kBytes = sizeof(typename D::Block);
  const int64_t nb = k / D::kElems;
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w + j * row_bytes;
    float* out = dst + (j - j0) * k;
    for (int64_t b = 0; b < nb; ++b) {
      float* ob = out + b * D::kElems;
      D::Decode(row + b * kBytes, [&](auto, int off, float s_lo, float s_hi, float m, __m256 q0,
                                      __m256 q1, __m256 q2, __m256 q3) {
        // fl(fl(s * q) + m), exactly the reference's arithmetic.
        const __m256 vs_lo = _mm256_set1_ps(s_lo);
        const __m256 vs_hi = _mm256_set1_ps(s_hi);
        __m256 w0 = _mm256_mul_ps(q0, vs_lo), w1 = _mm256_mul_ps(q1, vs_lo);
        __m256 w2 = _mm256_mul_ps(q2, vs_hi), w3 = _mm256_mul_ps(q3, vs_hi);
        if constexpr (D::kHasOffset) {
          const __m256 vm = _mm256_set1_ps(m);
          w0 = _mm256_add_ps(w0, vm);
          w1 = _mm256_add_ps(w1, vm);
          w2 = _mm256_add_ps(w2, vm);
          w3 = _mm256_add_ps(w3, vm);
        }
        _mm256_storeu_ps(ob + off, w0);
        _mm256_storeu_ps(ob + off + 8, w1);
        _mm256_storeu_ps(ob + off + 16, w2);
        _mm256_storeu_ps(ob + off + 24, w3);
      });
    }
  }
}

template <typename P>
void DequantPlain(const uint8_t* w, int64_t row_bytes, int64_t k, int64_t j0, int64_t j1,
                  float* dst) {
  constexpr int64_t kS = P::kSize;
  const int64_t k8 = k / 8 * 8;
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = w + j * row_bytes;
    float* out = dst + (j - j0) * k;
    int64_t e = 0;
    for (; e < k8; e += 8) _mm256_storeu_ps(out + e, P::Load8(row + e * kS));
    for (; e < k; ++e) out[e] = P::Load1(row + e * kS);
  }
}

}  // namespace

bool CpuWeightTypeSupported(DType type) {
  switch (type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    case DType::kI32:
      return false;
  }
  return false;
}

static_assert(DecodeQ4_0::kHasOffset && DecodeQ4_1::kHasOffset && DecodeQ4_K::kHasOffset &&
              DecodeQ5_K::kHasOffset && !DecodeQ8_0::kHasOffset && !DecodeQ6_K::kHasOffset);

bool GemvNeedsSegmentSums(DType type) {
  return type == DType::kQ4_0 || type == DType::kQ4_1 || type == DType::kQ4_K ||
         type == DType::kQ5_K;
}

void SegmentSums(const float* x, int64_t ldx, int nr, int64_t k, float* out) {
  const int64_t segs = k / 32;
  for (int r = 0; r < nr; ++r) {
    for (int64_t s = 0; s < segs; ++s) {
      const float* p = x + r * ldx + 32 * s;
      const __m256 a = _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8));
      const __m256 b = _mm256_add_ps(_mm256_loadu_ps(p + 16), _mm256_loadu_ps(p + 24));
      out[r * segs + s] = HorizontalSum(_mm256_add_ps(a, b));
    }
  }
}

void GemvRows(DType type, const void* w, int64_t k, const float* x, int64_t ldx, int nr,
              const float* xsum, const float* bias, float* y, int64_t ldy, int64_t j0, int64_t j1,
              int64_t prefetch_end) {
  ICECACHE_CHECK(nr >= 1 && nr <= kGemvMaxRows);
  ICECACHE_CHECK(xsum != nullptr || !GemvNeedsSegmentSums(type));
  GemvFn fn = nullptr;
  switch (type) {
    case DType::kF32:
      fn = PickRows<Plain<PlainF32>>(nr);
      break;
    case DType::kF16:
      fn = PickRows<Plain<PlainF16>>(nr);
      break;
    case DType::kBF16:
      fn = PickRows<Plain<PlainBf16>>(nr);
      break;
    case DType::kQ8_0:
      fn = PickRows<Blocked<DecodeQ8_0>>(nr);
      break;
    case DType::kQ4_0:
      fn = PickRows<Blocked<DecodeQ4_0>>(nr);
      break;
    case DType::kQ4_1:
      fn = PickRows<Blocked<DecodeQ4_1>>(nr);
      break;
    case DType::kQ4_K:
      fn = PickRows<Blocked<DecodeQ4_K>>(nr);
      break;
    case DType::kQ5_K:
      fn = PickRows<Blocked<DecodeQ5_K>>(nr);
      break;
    case DType::kQ6_K:
      fn = PickRows<Blocked<DecodeQ6_K>>(nr);
      break;
    case DType::kI32:
      break;
  }
  ICECACHE_CHECK_MSG(fn != nullptr, "unsupported weight dtype");
  fn(static_cast<const uint8_t*>(w), RowBytes(type, k), k, x, ldx, xsum, bias, y, ldy, j0, j1,
     std::max(j1, prefetch_end));
}

void DequantizeRows(DType type, const void* w, int64_t k, int64_t j0, int64_t j1, float* dst) {
  const auto* p = static_cast<const uint8_t*>(w);
  const int64_t rb = RowBytes(type, k);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, p + j0 * rb, static_cast<size_t>((j1 - j0) * rb));
      return;
    case DType::kF16:
      return DequantPlain<PlainF16>(p, rb, k, j0, j1, dst);
    case DType::kBF16:
      return DequantPlain<PlainBf16>(p, rb, k, j0, j1, dst);
    case DType::kQ8_0:
      return DequantBlocked<DecodeQ8_0>(p, rb, k, j0, j1, dst);
    case DType::kQ4_0:
      return DequantBlocked<DecodeQ4_0>(p, rb, k, j0, j1, dst);
    case DType::kQ4_1:
      return DequantBlocked<DecodeQ4_1>(p, rb, k, j0, j1, dst);
    case DType::kQ4_K:
      return DequantBlocked<DecodeQ4_K>(p, rb, k, j0, j1, dst);
    case DType::kQ5_K:
      return DequantBlocked<DecodeQ5_K>(p, rb, k, j0, j1, dst);
    case DType::kQ6_K:
      return DequantBlocked<DecodeQ6_K>(p, rb, k, j0, j1, dst);
    case DType::kI32:
      break;
  }
  ICECACHE_CHECK_MSG(false, "unsupported weight dtype");
}

}  // namespace icecache::cpu
