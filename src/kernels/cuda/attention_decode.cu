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

using Batch = ParamBatch<AttentionParams>;
static_assert(sizeof(Batch) + sizeof(DecodeWorkspace) + 2 * sizeof(int) <= 4096,
              "a batch's parameters stay within the classic 4 KB of kernel parameters");

// Raises the kernel's dynamic shared-memory limit once; returns the CUDA error of that.
template <int D, class B = AttentionParams>
cudaError_t Prepare() {
  static const cudaError_t e =
      cudaFuncSetAttribute(DecodeAttentionKernel<D, B>, cudaFuncAttributeMaxDynamicSharedMemorySize,
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
        &blocks, DecodeAttentionKernel<D, AttentionParams>, kDecodeThreads,
        DecodeLayout<D>::kBytes);
    return e == cudaSuccess && blocks > 0 ? blocks : 1;
  }();
  return n;
}

int BlocksPerSm(const AttentionParams& p) {
  return p.head_dim == 64 ? Occupancy<64>() : Occupancy<128>();
}

// `p`: the call's shape (a batch's first entry); `tokens`: the grid's z.
template <int D, class B>
int Run(Stream s, const B& params, const AttentionParams& p, int tokens, int splits,
        const DecodeWorkspace& ws) {
  if (const cudaError_t e = Prepare<D, B>(); e != cudaSuccess) return static_cast<int>(e);
  const int chunks = HeadChunks(p);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(p.n_kv_heads * chunks),
                  static_cast<unsigned>(tokens));
  return static_cast<int>(LaunchPdl(DecodeAttentionKernel<D, B>, grid, dim3(kDecodeThreads),
                                    DecodeLayout<D>::kBytes, s, params, ws, splits, chunks));
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
  return p.head_dim == 64 ? Run<64>(s, p, p, p.n_tokens, splits, ws)
                          : Run<128>(s, p, p, p.n_tokens, splits, ws);
}

void SkipDecodeWorkspace(const AttentionParams& p, int splits, DecodeWorkspace* ws) {
  if (splits <= 1) return;  // one split writes no partials
  const int64_t heads = static_cast<int64_t>(p.n_tokens) * p.n_heads;
  const int64_t o = std::min(ws->o_capacity, heads * splits * p.head_dim);
  const int64_t lse = std::min(ws->lse_capacity, heads * splits);
  const int64_t counters = std::min(
      ws->counter_capacity, static_cast<int64_t>(p.n_tokens) * p.n_kv_heads * HeadChunks(p));
  ws->partial_o += o;
  ws->o_capacity -= o;
  ws->partial_lse += lse;
  ws->lse_capacity -= lse;
  ws->counters += counters;
  ws->counter_capacity -= counters;
}

int LaunchDecodeAttentionBatch(Stream s, const Batch& b, int splits, const DecodeWorkspace& ws) {
  if (b.n == 0) return 0;
  const AttentionParams& p = b.p[0];
  for (int i = 0; i < b.n; ++i) {
    const AttentionParams& e = b.p[i];
    if (e.n_tokens != 1 || e.head_dim != p.head_dim || e.n_heads != p.n_heads ||
        e.n_kv_heads != p.n_kv_heads) {
      return static_cast<int>(cudaErrorInvalidValue);
    }
  }
  return p.head_dim == 64 ? Run<64>(s, b, p, b.n, splits, ws) : Run<128>(s, b, p, b.n, splits, ws);
}

}  // namespace icecache::kernels
