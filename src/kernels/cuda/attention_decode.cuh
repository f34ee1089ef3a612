// Split-KV decode attention over paged KV (any page list, contiguous or not), on bf16 tensor
// cores.
//
// Block (split s, head chunk, token t) attends up to kDecodeHeads query heads that share one KV
// head (a GQA group, or a chunk of a larger one) over the entries s, s + S, s + 2S, ... of the
// row's page list (E entries, E read from indptr on the device): the grid depends on the batch
// shape only, so a captured launch stays valid as the lists grow. The block gathers its key slots
// 64 at a time with cp.async into a three-stage swizzled shared-memory ring (two tiles in flight
// while one is used), so many bytes are in flight without holding registers; the page ids of a
// tile are read two tiles ahead and kept in shared memory as slot indices, so that the gather
// can load whole K/V rows per group of lanes (full 128-byte lines per warp instruction, which
// took the kernel from ~2.5 to ~3.1-4.0 TB/s at 32K-128K keys on an H200). Each of the four warps
// takes 16 slots of a tile: scores S = Q K^T with the heads as the MMA's M dimension (16 rows, the
// unused ones zero) and the 16 keys as two n-tiles, an online softmax in base 2 on the
// accumulators, then O += P V with P straight from the score registers, so each key costs a few
// instructions whatever the group size. The warps merge in shared memory. With S > 1 each block
// writes a normalized partial output and its log-sum-exp; the last block of a (token, head chunk)
// to finish (an atomic counter) merges the S partials and resets the counter.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"

namespace icecache::kernels {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeWarps = kDecodeThreads / 32;
constexpr int kDecodeTile = 64;  // key slots per tile, 16 per warp
constexpr int kDecodeStages = 3;
constexpr int kDecodeHeads = 16;  // query heads per block: the MMA's M

template <int D>
struct DecodeLayout {
  static constexpr int kTileBytes = kDecodeTile * D * 2;
  static constexpr int kK = 0;
  static constexpr int kV = kK + kDecodeStages * kTileBytes;
  static constexpr int kPos = kV + kDecodeStages * kTileBytes;
  static constexpr int kSidx = kPos + kDecodeStages * kDecodeTile * 4;  // [4][tile] slots
  static constexpr int kBytes = kSidx + 4 * kDecodeTile * 4;
  // The warps' accumulators at the end, [warp][head][kAccStride] floats over the ring (rows
  // padded against bank conflicts).
  static constexpr int kAccStride = D + 4;
  static_assert(kDecodeWarps * kDecodeHeads * kAccStride * 4 <= kPos, "merge area fits");
};

// Byte offset of 16-byte chunk `chunk` of slot `row` in a tile: XOR-swizzled by the row so that
// ldmatrix's eight row reads hit eight different bank groups.
template <int D>
__device__ __forceinline__ int DecodeSwizzled(int row, int chunk) {
  return row * (D * 2) + ((chunk ^ (row & 7)) << 4);
}

// The call a block of the decode kernel works on and its token t there (for q, positions, row
// base and output): one call's token blockIdx.z, or entry blockIdx.z of a batch (one token each).
// Either way the block uses workspace token blockIdx.z.
__device__ __forceinline__ const AttentionParams& DecodeEntry(const AttentionParams& p, int* t) {
  *t = blockIdx.z;
  return p;
}
__device__ __forceinline__ const AttentionParams& DecodeEntry(const ParamBatch<AttentionParams>& b,
                                                              int* t) {
  *t = 0;
  return b.p[blockIdx.z];
}

// B: AttentionParams (one call) or ParamBatch<AttentionParams> (a batch of decode calls).
template <int D, class B>
__global__ void __launch_bounds__(kDecodeThreads, 2)
    DecodeAttentionKernel(const __grid_constant__ B params, DecodeWorkspace ws, int splits,
                          int head_chunks) {
  using L = DecodeLayout<D>;
  constexpr int kChunks = D / 8;   // 16-byte chunks per row
  constexpr int kKSteps = D / 16;  // k-steps of q k^T
  constexpr int kDTiles = D / 8;   // n-tiles of the output
  constexpr int kQuads = D / 4;    // groups of four dims in the merges

  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float sm_m[kDecodeWarps][kDecodeHeads];
  __shared__ float sm_l[kDecodeWarps][kDecodeHeads];
  __shared__ float sm_w[kDecodeHeads][kMaxDecodeSplits];
  __shared__ float sm_lse[kDecodeHeads];
  __shared__ int sm_last;
  int* kpos_s = reinterpret_cast<int*>(smem + L::kPos);
  int* sidx_s = reinterpret_cast<int*>(smem + L::kSidx);
  PdlTrigger();
  PdlWait();  // q, the pages and the workspace come from (or are reused after) earlier kernels

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / head_chunks;
  const int hc = blockIdx.y % head_chunks;
  int t = 0;
  const AttentionParams& p = DecodeEntry(params, &t);
  const int wt = blockIdx.z;  // workspace token
  const int group = p.n_heads / p.n_kv_heads;
  const int h0 = kvh * group + hc * kDecodeHeads;
  const int nh = min(kDecodeHeads, group - hc * kDecodeHeads);
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int g = lane / 4, tig = lane % 4;

  const int row = p.row_base[t] + kvh;
  int e_begin = 0, e_end = 0;
  if (row >= 0 && row < p.num_rows) {
    e_begin = p.indptr[row];
    e_end = max(e_begin, p.indptr[row + 1]);
  }
  // Entries go round-robin: split s takes e_begin + s, e_begin + s + S, ... Which split holds an
  // entry then depends on its index only, never on how many entries follow it, so a table with
  // empty slack entries at the end of a row (DenseAttention's) sums every page in the same
  // order as a packed table of the same pages (the staged and working-set tables): the results
  // agree bit for bit.
  const int64_t n_entries = e_end - e_begin;
  const int n_mine =
      n_entries > split ? static_cast<int>((n_entries - split + splits - 1) / splits) : 0;
  const int qpos = p.causal ? p.q_pos[t] : 0x7fffffff;
  const int ps = p.page_size;
  const int shift = Pow2Shift(ps);
  const int n_slots = n_mine * ps;  // < 2^31: a pool holds at most INT32_MAX slots
  const int n_tiles = (n_slots + kDecodeTile - 1) / kDecodeTile;

  const __nv_bfloat16* pool_k = static_cast<const __nv_bfloat16*>(p.pool_k);
  const __nv_bfloat16* pool_v = static_cast<const __nv_bfloat16*>(p.pool_v);
  // Page lookups: thread tid < kDecodeTile reads the entry of slot tid of a tile (two tiles
  // before its data is gathered, so that the load is long done when the slot index is stored).
  auto fetch = [&](int tile, int* page, int* len) {
    const int slot = tile * kDecodeTile + tid;
    *page = -1;
    *len = 0;
    if (slot < n_slots) {
      int e, off;
      SlotEntry(slot, ps, shift, &e, &off);
      const int64_t at = e_begin + split + static_cast<int64_t>(e) * splits;
      *page = p.indices[at];
      *len = p.lens[at];
    }
  };
  // The slot indices of a tile (or -1) go to one of four buffers sidx_s[tile % 4]; the
  // gather then loads whole rows, kChunks lanes a row, so that each warp instruction reads
  // whole 128-byte lines.
  auto stash = [&](int tile, int page, int len) {
    int e, off;
    SlotEntry(tile * kDecodeTile + tid, ps, shift, &e, &off);
    const bool valid = page >= 0 && page < p.num_pages && off < len;
    sidx_s[(tile % 4) * kDecodeTile + tid] = valid ? page * ps + off : -1;
  };
  auto issue = [&](int tile) {
    const int stage = tile % kDecodeStages;
    const int* sx = sidx_s + (tile % 4) * kDecodeTile;
    if (tid < kDecodeTile) {
      const int si = sx[tid];
      CpAsync4(kpos_s + stage * kDecodeTile + tid, p.pool_pos + max(si, 0), si >= 0);
    }
    uint8_t* ks = smem + L::kK + stage * L::kTileBytes;
    uint8_t* vs = smem + L::kV + stage * L::kTileBytes;
    constexpr int kRowsPerPass = kDecodeThreads / kChunks;
    const int c = tid % kChunks, r0 = tid / kChunks;
#pragma unroll
    for (int i = 0; i < kDecodeTile / kRowsPerPass; ++i) {
      const int r = i * kRowsPerPass + r0;
      const int si = sx[r];
      const int64_t idx = max(si, 0);
      CpAsync16(ks + DecodeSwizzled<D>(r, c), pool_k + idx * D + c * 8, si >= 0);
      CpAsync16(vs + DecodeSwizzled<D>(r, c), pool_v + idx * D + c * 8, si >= 0);
    }
  };
  // Two tiles in flight before the first is used; slot indices one tile further ahead, page
  // ids two.
  int next_page = -1, next_len = 0;
  if (tid < kDecodeTile) {
    int pg[3], ln[3];
#pragma unroll
    for (int k = 0; k < 3; ++k) fetch(k, &pg[k], &ln[k]);
#pragma unroll
    for (int k = 0; k < 3; ++k) stash(k, pg[k], ln[k]);
    if (n_tiles > 3) fetch(3, &next_page, &next_len);
  }
  __syncthreads();
  for (int tile = 0; tile < 2; ++tile) {
    if (tile < n_tiles) issue(tile);
    CpAsyncCommit();
  }

  // The queries as A fragments (rows g and g + 8; rows past the chunk's heads are zero).
  uint32_t qf[kKSteps][4];
  {
    const uint32_t* q32 = static_cast<const uint32_t*>(p.q);
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int head = g + 8 * r;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t at =
              (static_cast<int64_t>(t) * p.n_heads + h0 + head) * D + kk * 16 + half * 8 + tig * 2;
          qf[kk][r + 2 * half] = head < nh ? q32[at / 2] : 0u;
        }
      }
    }
  }
  const float qscale = p.scale * kLog2e;

  float o[kDTiles][4];
#pragma unroll
  for (int i = 0; i < kDTiles; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[i][e] = 0.0f;
  }
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  const int k_row = warp * 16 + (lane % 8) + (lane / 16) * 8;       // ldmatrix of K
  const int v_row = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8;  // ldmatrix.trans of V

  for (int tile = 0; tile < n_tiles; ++tile) {
    if (tile + 2 < n_tiles) issue(tile + 2);
    // sidx_s[(tile + 3) % 4] was last read in iteration tile - 1, before its final barrier.
    if (tid < kDecodeTile && tile + 3 < n_tiles) {
      stash(tile + 3, next_page, next_len);
      if (tile + 4 < n_tiles) fetch(tile + 4, &next_page, &next_len);
    }
    CpAsyncCommit();  // one group per iteration (maybe empty): `tile` is then 2 groups back
    CpAsyncWait<2>();
    __syncthreads();
    const int stage = tile % kDecodeStages;
    const uint8_t* ks = smem + L::kK + stage * L::kTileBytes;
    const uint8_t* vs = smem + L::kV + stage * L::kTileBytes;
    const int* kpos = kpos_s + stage * kDecodeTile;
    const int* sidx = sidx_s + (tile % 4) * kDecodeTile;  // valid slots: >= 0

    float s[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t b[4];
      LdMatrixX4(b, ks + DecodeSwizzled<D>(k_row, kk * 2 + (lane / 8) % 2));
      MmaBf16(s[0], qf[kk], b[0], b[1]);
      MmaBf16(s[1], qf[kk], b[2], b[3]);
    }
    // Mask, scale, row maxima (rows g and g + 8; each spread over the four lanes of a quad).
    float mx[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int col = warp * 16 + j * 8 + tig * 2;
      const int2 kp = *reinterpret_cast<const int2*>(kpos + col);
      const int2 kv = *reinterpret_cast<const int2*>(sidx + col);
      const bool ok0 = kv.x >= 0 && kp.x <= qpos, ok1 = kv.y >= 0 && kp.y <= qpos;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = ((e & 1) ? ok1 : ok0) ? s[j][e] * qscale : kNegInf;
        s[j][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    }
    float m_use[2], alpha[2];
    if (OnlineSoftmaxStep(mx, m, l, m_use, alpha)) {
#pragma unroll
      for (int i = 0; i < kDTiles; ++i) {
        o[i][0] *= alpha[0];
        o[i][1] *= alpha[0];
        o[i][2] *= alpha[1];
        o[i][3] *= alpha[1];
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = FastExp2(s[j][e] - m_use[e >> 1]);
        s[j][e] = pe;
        l[e >> 1] += pe;
      }
    }
    // o += p v, p as an A fragment straight from the score accumulators.
    const uint32_t a[4] = {PackBf16(s[0][0], s[0][1]), PackBf16(s[0][2], s[0][3]),
                           PackBf16(s[1][0], s[1][1]), PackBf16(s[1][2], s[1][3])};
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t b[4];
      LdMatrixX4Trans(b, vs + DecodeSwizzled<D>(v_row, np * 2 + lane / 16));
      MmaBf16(o[2 * np], a, b[0], b[1]);
      MmaBf16(o[2 * np + 1], a, b[2], b[3]);
    }
    __syncthreads();  // the stage is refilled two iterations later
  }
  CpAsyncWait<0>();
  __syncthreads();

  // Merge the warps of the block: unnormalized accumulators, maxima and sums per head.
  float* sm_acc = reinterpret_cast<float*>(smem);  // reuses the ring
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(~0u, l[r], 1);
    l[r] += __shfl_xor_sync(~0u, l[r], 2);
    const int i = g + 8 * r;
    if (i < nh) {
      float* dst = sm_acc + (warp * kDecodeHeads + i) * L::kAccStride + tig * 2;
#pragma unroll
      for (int n = 0; n < kDTiles; ++n) {
        *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][2 * r], o[n][2 * r + 1]);
      }
      if (tig == 0) {
        sm_m[warp][i] = m[r];
        sm_l[warp][i] = l[r];
      }
    }
  }
  __syncthreads();
  // sm_w[i][w]: weight of warp w in head i (normalized); sm_lse[i]: the block's log2-sum-exp of
  // head i (-inf when nothing was attended).
  if (tid < nh) {
    const int i = tid;
    float mx = kNegInf;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) mx = fmaxf(mx, sm_m[w][i]);
    float f[kDecodeWarps];
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      f[w] = mx == kNegInf ? 0.0f : exp2f(sm_m[w][i] - mx);
      total = fmaf(sm_l[w][i], f[w], total);
    }
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) sm_w[i][w] = f[w] * inv;
    sm_lse[i] = total > 0.0f ? mx + log2f(total) : kNegInf;
  }
  __syncthreads();
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
  const int64_t head_base = static_cast<int64_t>(t) * p.n_heads + h0;  // output
  const int64_t ws_base = static_cast<int64_t>(wt) * p.n_heads + h0;   // workspace
  for (int idx = tid; idx < nh * kQuads; idx += kDecodeThreads) {
    const int i = idx / kQuads, d = (idx % kQuads) * 4;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float4 v =
          *reinterpret_cast<const float4*>(sm_acc + (w * kDecodeHeads + i) * L::kAccStride + d);
      const float f = sm_w[i][w];
      acc.x = fmaf(v.x, f, acc.x);
      acc.y = fmaf(v.y, f, acc.y);
      acc.z = fmaf(v.z, f, acc.z);
      acc.w = fmaf(v.w, f, acc.w);
    }
    if (splits == 1) {
      __nv_bfloat162 packed[2] = {__floats2bfloat162_rn(acc.x, acc.y),
                                  __floats2bfloat162_rn(acc.z, acc.w)};
      *reinterpret_cast<uint2*>(out + (head_base + i) * D + d) =
          *reinterpret_cast<const uint2*>(packed);
    } else {
      *reinterpret_cast<float4*>(ws.partial_o + ((ws_base + i) * splits + split) * D + d) = acc;
      if (d == 0) ws.partial_lse[(ws_base + i) * splits + split] = sm_lse[i];
    }
  }
  if (splits == 1) return;

  // The last block of this (token, head chunk) merges the splits.
  __threadfence();
  __syncthreads();
  const int64_t counter = (static_cast<int64_t>(wt) * p.n_kv_heads + kvh) * head_chunks + hc;
  if (tid == 0) sm_last = atomicAdd(&ws.counters[counter], 1) == splits - 1;
  __syncthreads();
  if (!sm_last) return;
  __threadfence();
  // One warp per head: each lane weighs two splits (splits <= 64).
  for (int i = warp; i < nh; i += kDecodeWarps) {
    const float* lse = ws.partial_lse + (ws_base + i) * splits;
    const float v0 = lane < splits ? __ldcg(lse + lane) : kNegInf;
    const float v1 = lane + 32 < splits ? __ldcg(lse + lane + 32) : kNegInf;
    const float mx = WarpMax(fmaxf(v0, v1));
    const float f0 = mx == kNegInf ? 0.0f : FastExp2(v0 - mx);
    const float f1 = mx == kNegInf ? 0.0f : FastExp2(v1 - mx);
    const float total = WarpSum(f0 + f1);
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    if (lane < splits) sm_w[i][lane] = f0 * inv;
    if (lane + 32 < splits) sm_w[i][lane + 32] = f1 * inv;
  }
  __syncthreads();
  for (int idx = tid; idx < nh * kQuads; idx += kDecodeThreads) {
    const int i = idx / kQuads, d = (idx % kQuads) * 4;
    const float* po = ws.partial_o + (ws_base + i) * splits * D + d;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
    for (int s = 0; s < splits; ++s) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(po + s * D));
      const float f = sm_w[i][s];
      acc.x = fmaf(v.x, f, acc.x);
      acc.y = fmaf(v.y, f, acc.y);
      acc.z = fmaf(v.z, f, acc.z);
      acc.w = fmaf(v.w, f, acc.w);
    }
    __nv_bfloat162 packed[2] = {__floats2bfloat162_rn(acc.x, acc.y),
                                __floats2bfloat162_rn(acc.z, acc.w)};
    *reinterpret_cast<uint2*>(out + (head_base + i) * D + d) =
        *reinterpret_cast<const uint2*>(packed);
  }
  if (tid == 0) ws.counters[counter] = 0;
}

}  // namespace icecache::kernels
