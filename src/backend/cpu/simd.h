// Small AVX2/FMA/F16C helpers shared by the CPU kernels (x86-64-v3; no AVX-512).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace icecache::cpu {

// Sum of the 8 lanes.
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane i of the result is the sum of the lanes of v[i] (eight horizontal sums at once).
inline __m256 HorizontalSum8(const __m256 v[8]) {
  const __m256 s01 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 s23 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 s45 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 s67 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23);  // lanes: 0 1 2 3 | 0 1 2 3 (halves)
  const __m256 s4567 = _mm256_hadd_ps(s45, s67);
  const __m256 lo = _mm256_permute2f128_ps(s0123, s4567, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(s0123, s4567, 0x31);
  return _mm256_add_ps(lo, hi);
}

// Mask whose first `n` lanes (0 <= n <= 8) are set, for maskload/maskstore tails.
inline __m256i TailMask(int n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

inline __m256 LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline void StoreF16(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
inline __m256 LoadBf16(const uint16_t* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

// exp(x) in f32 with a relative error of about 2 ulp (Cody-Waite reduction by ln 2 and a
// degree-6 polynomial on [-ln2/2, ln2/2]). exp(-inf) = 0; inputs above ~88.7 give +inf.
inline __m256 ExpPs(__m256 x) {
  const __m256 kLog2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 kLn2Hi = _mm256_set1_ps(0.693359375f);
  const __m256 kLn2Lo = _mm256_set1_ps(-2.12194440e-4f);
  const __m256 kMax = _mm256_set1_ps(88.7228394f);
  const __m256 kMin = _mm256_set1_ps(-87.3365447f);
  const __m256 underflow = _mm256_cmp_ps(x, kMin, _CMP_LT_OQ);
  const __m256 overflow = _mm256_cmp_ps(x, kMax, _CMP_GT_OQ);
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, kMin), kMax);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(xc, kLog2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, kLn2Hi, xc);
  r = _mm256_fnmadd_ps(n, kLn2Lo, r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: n is in [-126, 128]; split it so that 2^n1 * 2^n2 never leaves the normal range.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_andnot_ps(underflow, y);
  return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), overflow);
}

}  // namespace icecache::cpu
