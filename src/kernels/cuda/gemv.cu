// Launcher of the small-batch GEMV (gemv.cuh): picks the k split from the row count.
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/launch.h"

namespace icecache::kernels {

namespace {

template <int kN, int kSplit, typename Tout>
int Run(Stream s, const void* x, const void* w, const float* bias, void* y, int64_t m, int64_t k) {
  constexpr int kRowsPerBlock = kGemvWarps / kSplit * kGemvRowsPerWarp;
  const int64_t blocks = (m + kRowsPerBlock - 1) / kRowsPerBlock;
  GemvKernel<kN, kSplit, Tout><<<static_cast<unsigned>(blocks), kGemvThreads, 0, s>>>(
      static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), bias,
      static_cast<Tout*>(y), m, k);
  return static_cast<int>(cudaGetLastError());
}

template <int kN, typename Tout>
int RunN(Stream s, const void* x, const void* w, const float* bias, void* y, int64_t m, int64_t k,
         int num_sms) {
  // Enough warps to keep every SM's memory pipe busy: about 32 warps per SM.
  const int64_t want_warps = int64_t{32} * num_sms;
  const int64_t row_warps = (m + kGemvRowsPerWarp - 1) / kGemvRowsPerWarp;
  if (row_warps * 4 < want_warps && k >= 8 * 256) return Run<kN, 8, Tout>(s, x, w, bias, y, m, k);
  if (row_warps * 2 < want_warps && k >= 4 * 256) return Run<kN, 4, Tout>(s, x, w, bias, y, m, k);
  if (row_warps < want_warps && k >= 2 * 256) return Run<kN, 2, Tout>(s, x, w, bias, y, m, k);
  return Run<kN, 1, Tout>(s, x, w, bias, y, m, k);
}

template <typename Tout>
int RunType(Stream s, const void* x, const void* w, const float* bias, void* y, int64_t n,
            int64_t m, int64_t k, int num_sms) {
  switch (n) {
    case 1:
      return RunN<1, Tout>(s, x, w, bias, y, m, k, num_sms);
    case 2:
      return RunN<2, Tout>(s, x, w, bias, y, m, k, num_sms);
    case 3:
      return RunN<3, Tout>(s, x, w, bias, y, m, k, num_sms);
    default:
      return RunN<4, Tout>(s, x, w, bias, y, m, k, num_sms);
  }
}

}  // namespace

int LaunchGemv(Stream s, const void* x, const void* w, const float* bias, void* y, ElemType y_type,
               int64_t n, int64_t m, int64_t k, int num_sms) {
  if (n <= 0 || m <= 0) return 0;
  if (y_type == ElemType::kF32) return RunType<float>(s, x, w, bias, y, n, m, k, num_sms);
  return RunType<__nv_bfloat16>(s, x, w, bias, y, n, m, k, num_sms);
}

}  // namespace icecache::kernels
