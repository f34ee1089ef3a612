// Split-KV decode attention over paged KV (any page list, contiguous or not).
//
// Block (split s, KV head group chunk, token t) attends the query heads of one GQA group chunk
// (up to kGM heads that share one KV head, so each K/V row is read once for all of them) over
// the entries [s * E / S, (s + 1) * E / S) of the row's page list, E read from indptr on the
// device: the grid depends on the batch shape only, so a captured launch stays valid as the
// lists grow. The block gathers its key slots 64 at a time with cp.async into a three-stage
// shared-memory ring (two tiles in flight while one is used; page ids fetched a tile earlier),
// so many bytes are in flight without holding registers. Inside the block every "worker" (D / 8
// lanes holding 8 dims each) takes every kWorkers-th slot of a tile with an online softmax in
// base 2; workers merge in shared memory. With S > 1 each block writes a normalized partial
// output and its log-sum-exp; the last block of a (token, group chunk) to finish (an atomic
// counter) merges the S partials and resets the counter.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"

namespace icecache::kernels {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeTile = 64;
constexpr int kDecodeStages = 3;

template <int D>
struct DecodeLayout {
  static constexpr int kTileBytes = kDecodeTile * D * 2;
  static constexpr int kK = 0;
  static constexpr int kV = kK + kDecodeStages * kTileBytes;
  static constexpr int kPos = kV + kDecodeStages * kTileBytes;
  static constexpr int kValid = kPos + kDecodeStages * kDecodeTile * 4;
  static constexpr int kBytes = kValid + kDecodeStages * kDecodeTile * 4;
};

template <int D, int kGM>
__global__ void __launch_bounds__(kDecodeThreads)
    DecodeAttentionKernel(AttentionParams p, DecodeWorkspace ws, int splits, int head_chunks) {
  using L = DecodeLayout<D>;
  constexpr int kLanesPerRow = D / 8;
  constexpr int kWorkersPerWarp = 32 / kLanesPerRow;
  constexpr int kWarps = kDecodeThreads / 32;
  constexpr int kWorkers = kWarps * kWorkersPerWarp;
  constexpr int kChunk = 4;  // slots per worker per step
  constexpr int kPerWorker = kDecodeTile / kWorkers;
  constexpr int kChunks = D / 8;
  static_assert(kPerWorker % kChunk == 0, "tile slots split evenly over the workers");
  static_assert(kWorkers * kGM * D * 4 <= 2 * kDecodeStages * L::kTileBytes,
                "the merge area fits in the stage ring");

  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float sm_m[kWorkers][kGM];
  __shared__ float sm_l[kWorkers][kGM];
  __shared__ float sm_w[kGM][kMaxDecodeSplits > kWorkers ? kMaxDecodeSplits : kWorkers];
  __shared__ int sm_last;
  int* kpos_s = reinterpret_cast<int*>(smem + L::kPos);
  int* kvalid_s = reinterpret_cast<int*>(smem + L::kValid);

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / head_chunks;
  const int hc = blockIdx.y % head_chunks;
  const int t = blockIdx.z;
  const int group = p.n_heads / p.n_kv_heads;
  const int h0 = kvh * group + hc * kGM;
  const int nh = min(kGM, group - hc * kGM);
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int sub = lane % kLanesPerRow;
  const int worker = warp * kWorkersPerWarp + lane / kLanesPerRow;

  const int row = p.row_base[t] + kvh;
  int e_begin = 0, e_end = 0;
  if (row >= 0 && row < p.num_rows) {
    e_begin = p.indptr[row];
    e_end = max(e_begin, p.indptr[row + 1]);
  }
  const int64_t n_entries = e_end - e_begin;
  const int s0 = e_begin + static_cast<int>(n_entries * split / splits);
  const int s1 = e_begin + static_cast<int>(n_entries * (split + 1) / splits);
  const int qpos = p.causal ? p.q_pos[t] : 0x7fffffff;
  const int ps = p.page_size;
  const int shift = Pow2Shift(ps);
  const int n_slots = (s1 - s0) * ps;  // < 2^31: a pool holds at most INT32_MAX slots
  const int n_tiles = (n_slots + kDecodeTile - 1) / kDecodeTile;

  const __nv_bfloat16* pool_k = static_cast<const __nv_bfloat16*>(p.pool_k);
  const __nv_bfloat16* pool_v = static_cast<const __nv_bfloat16*>(p.pool_v);
  // Gathering: thread `tid` loads slot lr of a tile, half of its chunks.
  const int lr = tid / 2, part = tid % 2;
  auto fetch = [&](int tile, int* page, int* len) {
    const int slot = tile * kDecodeTile + lr;
    *page = -1;
    *len = 0;
    if (slot < n_slots) {
      int e, off;
      SlotEntry(slot, ps, shift, &e, &off);
      *page = p.indices[s0 + e];
      *len = p.lens[s0 + e];
    }
  };
  auto issue = [&](int tile, int page, int len) {
    const int stage = tile % kDecodeStages;
    int e, off;
    SlotEntry(tile * kDecodeTile + lr, ps, shift, &e, &off);
    const bool valid = page >= 0 && page < p.num_pages && off < len;
    const int64_t idx = valid ? static_cast<int64_t>(page) * ps + off : 0;
    if (part == 0) {
      kvalid_s[stage * kDecodeTile + lr] = valid;
      CpAsync4(kpos_s + stage * kDecodeTile + lr, p.pool_pos + idx, valid);
    }
    uint8_t* ks = smem + L::kK + stage * L::kTileBytes + lr * D * 2;
    uint8_t* vs = smem + L::kV + stage * L::kTileBytes + lr * D * 2;
#pragma unroll
    for (int c = part * (kChunks / 2); c < (part + 1) * (kChunks / 2); ++c) {
      CpAsync16(ks + c * 16, pool_k + idx * D + c * 8, valid);
      CpAsync16(vs + c * 16, pool_v + idx * D + c * 8, valid);
    }
  };
  // Two tiles in flight before the first is used; page ids one tile further ahead.
  int next_page = -1, next_len = 0;
  for (int tile = 0; tile < 2; ++tile) {
    if (tile < n_tiles) {
      int page, len;
      fetch(tile, &page, &len);
      issue(tile, page, len);
    }
    CpAsyncCommit();
  }
  if (n_tiles > 2) fetch(2, &next_page, &next_len);

  const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q);
  const float qscale = p.scale * kLog2e;
  float qf[kGM][8];
#pragma unroll
  for (int i = 0; i < kGM; ++i) {
    if (i < nh) {
      Load8(q + (static_cast<int64_t>(t) * p.n_heads + h0 + i) * D + sub * 8, qf[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[i][e] *= qscale;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[i][e] = 0.0f;
    }
  }
  float m[kGM], l[kGM], acc[kGM][8];
#pragma unroll
  for (int i = 0; i < kGM; ++i) {
    m[i] = kNegInf;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i][e] = 0.0f;
  }

  for (int tile = 0; tile < n_tiles; ++tile) {
    if (tile + 2 < n_tiles) {
      issue(tile + 2, next_page, next_len);
      if (tile + 3 < n_tiles) fetch(tile + 3, &next_page, &next_len);
    }
    CpAsyncCommit();  // one group per iteration (maybe empty): `tile` is then 2 groups back
    CpAsyncWait<2>();
    __syncthreads();
    const int stage = tile % kDecodeStages;
    const uint8_t* ks = smem + L::kK + stage * L::kTileBytes;
    const uint8_t* vs = smem + L::kV + stage * L::kTileBytes;
    const int* kpos = kpos_s + stage * kDecodeTile;
    const int* kvalid = kvalid_s + stage * kDecodeTile;
#pragma unroll
    for (int c0 = 0; c0 < kPerWorker; c0 += kChunk) {
      float s[kChunk][kGM];
      bool ok[kChunk];
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        const int r = worker + (c0 + c) * kWorkers;
        ok[c] = kvalid[r] && kpos[r] <= qpos;
        float kf[8];
        Unpack8(*reinterpret_cast<const Bf16x8*>(ks + r * D * 2 + sub * 16), kf);
#pragma unroll
        for (int i = 0; i < kGM; ++i) {
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < 8; ++e) d = fmaf(qf[i][e], kf[e], d);
          s[c][i] = d;
        }
      }
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
#pragma unroll
        for (int i = 0; i < kGM; ++i) {
#pragma unroll
          for (int o = kLanesPerRow / 2; o > 0; o >>= 1) {
            s[c][i] += __shfl_xor_sync(0xffffffffu, s[c][i], o);
          }
          if (!ok[c]) s[c][i] = kNegInf;
        }
      }
#pragma unroll
      for (int i = 0; i < kGM; ++i) {
        float mx = s[0][i];
#pragma unroll
        for (int c = 1; c < kChunk; ++c) mx = fmaxf(mx, s[c][i]);
        const float m_new = fmaxf(m[i], mx);
        if (m_new == kNegInf) continue;  // nothing attended yet
        const float alpha = FastExp2(m[i] - m_new);
        float pc[kChunk];
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
          pc[c] = FastExp2(s[c][i] - m_new);
          sum += pc[c];
        }
        l[i] = fmaf(l[i], alpha, sum);
        m[i] = m_new;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] *= alpha;
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
          if (pc[c] == 0.0f) continue;
          const int r = worker + (c0 + c) * kWorkers;
          float vf[8];
          Unpack8(*reinterpret_cast<const Bf16x8*>(vs + r * D * 2 + sub * 16), vf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[i][e] = fmaf(pc[c], vf[e], acc[i][e]);
        }
      }
    }
    __syncthreads();  // the stage is refilled two iterations later
  }
  CpAsyncWait<0>();
  __syncthreads();
  float(*sm_acc)[kGM][D] = reinterpret_cast<float(*)[kGM][D]>(smem);  // reuses the ring

  // Merge the workers of the block.
#pragma unroll
  for (int i = 0; i < kGM; ++i) {
#pragma unroll
    for (int e = 0; e < 8; ++e) sm_acc[worker][i][sub * 8 + e] = acc[i][e];
    if (sub == 0) {
      sm_m[worker][i] = m[i];
      sm_l[worker][i] = l[i];
    }
  }
  __syncthreads();
  // sm_w[i][w]: weight of worker w in head i (normalized); sm_l[0][i] becomes the block's
  // log2-sum-exp of head i (-inf when nothing was attended).
  if (threadIdx.x < kGM) {
    const int i = threadIdx.x;
    float mx = kNegInf;
    for (int w = 0; w < kWorkers; ++w) mx = fmaxf(mx, sm_m[w][i]);
    float total = 0.0f;
    for (int w = 0; w < kWorkers; ++w) {
      const float f = mx == kNegInf ? 0.0f : exp2f(sm_m[w][i] - mx);
      sm_w[i][w] = f;
      total = fmaf(sm_l[w][i], f, total);
    }
    for (int w = 0; w < kWorkers; ++w) sm_w[i][w] = total > 0.0f ? sm_w[i][w] / total : 0.0f;
    sm_l[0][i] = total > 0.0f ? mx + log2f(total) : kNegInf;
  }
  __syncthreads();
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);
  const int64_t head_base = static_cast<int64_t>(t) * p.n_heads + h0;
  for (int idx = threadIdx.x; idx < nh * D; idx += kDecodeThreads) {
    const int i = idx / D, d = idx % D;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWorkers; ++w) o = fmaf(sm_acc[w][i][d], sm_w[i][w], o);
    if (splits == 1) {
      out[(head_base + i) * D + d] = __float2bfloat16_rn(o);
    } else {
      ws.partial_o[((head_base + i) * splits + split) * D + d] = o;
      if (d == 0) ws.partial_lse[(head_base + i) * splits + split] = sm_l[0][i];
    }
  }
  if (splits == 1) return;

  // The last block of this (token, group chunk) merges the splits.
  __threadfence();
  __syncthreads();
  const int64_t counter = (static_cast<int64_t>(t) * p.n_kv_heads + kvh) * head_chunks + hc;
  if (threadIdx.x == 0) sm_last = atomicAdd(&ws.counters[counter], 1) == splits - 1;
  __syncthreads();
  if (!sm_last) return;
  __threadfence();
  if (threadIdx.x < nh) {
    const int i = threadIdx.x;
    const float* lse = ws.partial_lse + (head_base + i) * splits;
    float mx = kNegInf;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, __ldcg(lse + s));
    float total = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float f = mx == kNegInf ? 0.0f : exp2f(__ldcg(lse + s) - mx);
      sm_w[i][s] = f;
      total += f;
    }
    for (int s = 0; s < splits; ++s) sm_w[i][s] = total > 0.0f ? sm_w[i][s] / total : 0.0f;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < nh * D; idx += kDecodeThreads) {
    const int i = idx / D, d = idx % D;
    const float* po = ws.partial_o + (head_base + i) * splits * D + d;
    float o = 0.0f;
    for (int s = 0; s < splits; ++s) o = fmaf(__ldcg(po + s * D), sm_w[i][s], o);
    out[(head_base + i) * D + d] = __float2bfloat16_rn(o);
  }
  if (threadIdx.x == 0) ws.counters[counter] = 0;
}

}  // namespace icecache::kernels
