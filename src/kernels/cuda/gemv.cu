// Launchers of the small-batch GEMV (gemv.cuh): pick the k split from the shape.
#include <cstdlib>

#include "core/env_switch.h"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/pdl.cuh"

namespace icecache::kernels {

namespace {

template <int kN, int kSplit, bool kGlu, typename Tout>
int Run(Stream s, const void* x, const void* w, const float* bias, const GemvOut& out, int64_t m,
        int64_t k) {
  constexpr int kOutPerWarp = kGlu ? kGemvRowsPerWarp / 2 : kGemvRowsPerWarp;
  constexpr int kOutPerBlock = kGemvWarps / kSplit * kOutPerWarp;
  const int64_t blocks = (m + kOutPerBlock - 1) / kOutPerBlock;
  return static_cast<int>(LaunchPdl(GemvKernel<kN, kSplit, kGlu, Tout>,
                                    dim3(static_cast<unsigned>(blocks)), dim3(kGemvThreads), 0, s,
                                    static_cast<const __nv_bfloat16*>(x),
                                    static_cast<const __nv_bfloat16*>(w), bias, out, m, k));
}

// The k split, from a sweep of the decode shapes on an H200 (cuda_ops_bench with
// ICECACHE_GEMV_SPLIT): 2 for tall matrices (ffn up/gate, the LM head), 4 for 2K-8K rows (q, o,
// down, stacked q/k/v), 8 for short ones (k, v), with at least 256 elements of k per warp.
// ICECACHE_GEMV_SPLIT (1, 2, 4, 8) overrides it.
inline int PickSplit(int64_t rows, int64_t k) {
  static const int forced = EnvInt("ICECACHE_GEMV_SPLIT", 0);
  if (forced == 1 || forced == 2 || forced == 4 || forced == 8) return forced;
  int split = rows >= 8192 ? 2 : (rows >= 2048 ? 4 : 8);
  while (split > 1 && k < split * 256) split /= 2;
  return split;
}

template <int kN, bool kGlu, typename Tout>
int RunN(Stream s, const void* x, const void* w, const float* bias, const GemvOut& out, int64_t m,
         int64_t k) {
  switch (PickSplit(kGlu ? 2 * m : m, k)) {
    case 8:
      return Run<kN, 8, kGlu, Tout>(s, x, w, bias, out, m, k);
    case 4:
      return Run<kN, 4, kGlu, Tout>(s, x, w, bias, out, m, k);
    case 2:
      return Run<kN, 2, kGlu, Tout>(s, x, w, bias, out, m, k);
    default:
      return Run<kN, 1, kGlu, Tout>(s, x, w, bias, out, m, k);
  }
}

template <bool kGlu, typename Tout>
int RunType(Stream s, const void* x, const void* w, const float* bias, const GemvOut& out,
            int64_t n, int64_t m, int64_t k) {
  switch (n) {
    case 1:
      return RunN<1, kGlu, Tout>(s, x, w, bias, out, m, k);
    case 2:
      return RunN<2, kGlu, Tout>(s, x, w, bias, out, m, k);
    case 3:
      return RunN<3, kGlu, Tout>(s, x, w, bias, out, m, k);
    default:
      return RunN<4, kGlu, Tout>(s, x, w, bias, out, m, k);
  }
}

template <bool kGlu>
int Dispatch(Stream s, const void* x, const void* w, const float* bias, const GemvOut& out,
             ElemType y_type, int64_t n, int64_t m, int64_t k) {
  if (n <= 0 || m <= 0) return 0;
  if (y_type == ElemType::kF32) return RunType<kGlu, float>(s, x, w, bias, out, n, m, k);
  return RunType<kGlu, __nv_bfloat16>(s, x, w, bias, out, n, m, k);
}

}  // namespace

int LaunchGemv(Stream s, const void* x, const void* w, const float* bias, void* y, ElemType y_type,
               int64_t n, int64_t m, int64_t k) {
  GemvOut out;
  out.y[0] = y;
  out.width[0] = m;
  return Dispatch<false>(s, x, w, bias, out, y_type, n, m, k);
}

int LaunchGemvSplit(Stream s, const void* x, const void* w, void* const* ys, const int64_t* widths,
                    int parts, ElemType y_type, int64_t n, int64_t k) {
  if (parts < 1 || parts > 3) return static_cast<int>(cudaErrorInvalidValue);
  GemvOut out;
  int64_t m = 0;
  for (int i = 0; i < parts; ++i) {
    out.y[i] = ys[i];
    out.width[i] = widths[i];
    m += widths[i];
  }
  return Dispatch<false>(s, x, w, nullptr, out, y_type, n, m, k);
}

int LaunchGemvGlu(Stream s, const void* x, const void* w, void* y, ElemType y_type, int64_t n,
                  int64_t m_out, int64_t k) {
  GemvOut out;
  out.y[0] = y;
  out.width[0] = m_out;
  return Dispatch<true>(s, x, w, nullptr, out, y_type, n, m_out, k);
}

}  // namespace icecache::kernels
