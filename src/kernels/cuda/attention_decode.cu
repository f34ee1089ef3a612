// Launcher of the split-KV decode attention (attention_decode.cuh): head dims 64 and 128, group
// chunks of up to kDecodeHeads query heads.
#include <algorithm>

#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/pdl.cuh"

namespace icecache::kernels {

namespace {

int HeadChunks(const AttentionParams& p) {
  const int group = p.n_heads / p.n_kv_heads;
  return (group + kDecodeHeads - 1) / kDecodeHeads;
}

// Raises the kernel's dynamic shared-memory limit once; returns the CUDA error of that.
template <int D>
cudaError_t Prepare() {
  static const cudaError_t e =
      cudaFuncSetAttribute(DecodeAttentionKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           DecodeLayout<D>::kBytes);
  return e;
}

// Blocks of the decode kernel for head dim D that fit on one SM at once.
template <int D>
int Occupancy() {
  static const int n = [] {
    int blocks = 0;
    if (Prepare<D>() != cudaSuccess) return 1;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, DecodeAttentionKernel<D>, kDecodeThreads, DecodeLayout<D>::kBytes);
    return e == cudaSuccess && blocks > 0 ? blocks : 1;
  }();
  return n;
}

int BlocksPerSm(const AttentionParams& p) {
  return p.head_dim == 64 ? Occupancy<64>() : Occupancy<128>();
}

template <int D>
int Run(Stream s, const AttentionParams& p, int splits, const DecodeWorkspace& ws) {
  if (const cudaError_t e = Prepare<D>(); e != cudaSuccess) return static_cast<int>(e);
  const int chunks = HeadChunks(p);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(p.n_kv_heads * chunks),
                  static_cast<unsigned>(p.n_tokens));
  return static_cast<int>(LaunchPdl(DecodeAttentionKernel<D>, grid, dim3(kDecodeThreads),
                                    DecodeLayout<D>::kBytes, s, p, ws, splits, chunks));
}

}  // namespace

bool AttentionSupportsHeadDim(int head_dim) { return head_dim == 64 || head_dim == 128; }

int DecodeSplits(const AttentionParams& p, const DecodeWorkspace& ws, int num_sms) {
  const int64_t blocks = static_cast<int64_t>(p.n_tokens) * p.n_kv_heads * HeadChunks(p);
  if (blocks <= 0) return 1;
  // One full wave: as many splits as fit the SMs at once (rounded down, so that no second
  // partial wave waits behind the first).
  const int64_t slots = int64_t{BlocksPerSm(p)} * num_sms;
  int64_t splits = std::clamp<int64_t>(slots / blocks, 1, kMaxDecodeSplits);
  const int64_t heads = static_cast<int64_t>(p.n_tokens) * p.n_heads;
  const int64_t counters = blocks;
  if (splits > 1 && counters > ws.counter_capacity) splits = 1;
  while (splits > 1 &&
         (heads * splits * p.head_dim > ws.o_capacity || heads * splits > ws.lse_capacity)) {
    --splits;
  }
  return static_cast<int>(splits);
}

int LaunchDecodeAttention(Stream s, const AttentionParams& p, int splits,
                          const DecodeWorkspace& ws) {
  if (p.n_tokens == 0) return 0;
  return p.head_dim == 64 ? Run<64>(s, p, splits, ws) : Run<128>(s, p, splits, ws);
}

}  // namespace icecache::kernels
