// Launcher of the tensor-core prefill attention (attention_prefill.cuh), head dims 64 and 128.
#include "kernels/cuda/attention_prefill.cuh"

namespace icecache::kernels {

namespace {

template <int D>
int Run(Stream s, const AttentionParams& p) {
  constexpr int kBytes = PrefillLayout<D>::kBytes;
  // Raise the dynamic shared-memory limit once per kernel (above the 48 KB default).
  static const cudaError_t attr = cudaFuncSetAttribute(
      PrefillAttentionKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (attr != cudaSuccess) return static_cast<int>(attr);
  const dim3 grid(static_cast<unsigned>((p.n_tokens + kPrefillBM - 1) / kPrefillBM),
                  static_cast<unsigned>(p.n_heads));
  PrefillAttentionKernel<D><<<grid, kPrefillThreads, kBytes, s>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchPrefillAttention(Stream s, const AttentionParams& p) {
  if (p.n_tokens == 0) return 0;
  if (p.head_dim == 64) return Run<64>(s, p);
  return Run<128>(s, p);
}

}  // namespace icecache::kernels
