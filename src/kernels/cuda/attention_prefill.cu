// Launcher of the tensor-core prefill attention (attention_prefill.cuh), head dims 64 and 128.
#include "kernels/cuda/attention_prefill.cuh"

namespace icecache::kernels {

namespace {

// Two m16 row tiles per warp (128 queries per block) and 32 key slots per tile: on the H200 this
// ran 213 TFLOP/s on 4096 queries against 32K keys, against 126 for one row tile and 64 slots
// and 167-175 for two row tiles and 64 slots, whose score registers spill (docs/PERF.md).
constexpr int kRowTiles = 2;
constexpr int kKeySlots = 32;

template <int D>
int Run(Stream s, const AttentionParams& p) {
  using L = PrefillLayout<D, kRowTiles, kKeySlots>;
  const auto kernel = PrefillAttentionKernel<D, kRowTiles, kKeySlots>;
  // Raise the dynamic shared-memory limit once per kernel (above the 48 KB default).
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
  if (attr != cudaSuccess) return static_cast<int>(attr);
  const dim3 grid(static_cast<unsigned>((p.n_tokens + L::kBM - 1) / L::kBM),
                  static_cast<unsigned>(p.n_heads));
  kernel<<<grid, kPrefillThreads, L::kBytes, s>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchPrefillAttention(Stream s, const AttentionParams& p) {
  if (p.n_tokens == 0) return 0;
  if (p.head_dim == 64) return Run<64>(s, p);
  return Run<128>(s, p);
}

}  // namespace icecache::kernels
