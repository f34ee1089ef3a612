// Prefill attention over paged KV with bf16 tensor cores (mma.sync m16n8k16), flash-attention
// style: a block holds 64 query tokens of one head (16 per warp) in registers and walks the
// row's key slots 64 at a time (slot s of a row is offset s % page_size of its entry
// s / page_size; offsets past an entry's length are masked), with an online softmax in base 2.
// K/V tiles are gathered from their pages with cp.async into two swizzled shared-memory stages;
// the page ids of the tile after next are fetched one tile ahead, so no global load sits on
// the critical path. Causality is by absolute position (keys at positions > the query's are
// masked); a warp skips the math of a tile none of whose keys its queries can see. Query
// tokens of a block that belong to different rows (sequence boundaries) are handled one run
// of equal row_base at a time.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"

namespace icecache::kernels {

constexpr int kPrefillThreads = 128;
constexpr int kPrefillBM = 64;  // query tokens per block
constexpr int kPrefillBN = 64;  // key slots per tile

template <int D>
struct PrefillLayout {
  static constexpr int kRowBytes = D * 2;
  static constexpr int kTileBytes = 64 * kRowBytes;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kTileBytes;      // two stages
  static constexpr int kV = kK + 2 * kTileBytes;  // two stages
  static constexpr int kPos = kV + 2 * kTileBytes;
  static constexpr int kValid = kPos + 2 * kPrefillBN * 4;
  static constexpr int kBytes = kValid + 2 * kPrefillBN * 4;
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile: chunks are XOR-swizzled by the
// row so that ldmatrix's eight row reads hit eight different bank groups.
template <int D>
__device__ __forceinline__ int Swizzled(int row, int chunk) {
  return row * (D * 2) + ((chunk ^ (row & 7)) << 4);
}

template <int D>
__global__ void __launch_bounds__(kPrefillThreads, 2) PrefillAttentionKernel(AttentionParams p) {
  using L = PrefillLayout<D>;
  constexpr int kChunks = D / 8;   // 16-byte chunks per row
  constexpr int kKSteps = D / 16;  // k-steps of q k^T
  constexpr int kDTiles = D / 8;   // n-tiles of the output
  constexpr int kNTiles = kPrefillBN / 8;
  constexpr int kIntMax = 0x7fffffff;
  constexpr int kIntMin = -kIntMax - 1;
  extern __shared__ __align__(128) uint8_t smem[];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, tig = lane % 4;
  const int head = blockIdx.y;
  const int kvh = head / (p.n_heads / p.n_kv_heads);
  const int t0 = blockIdx.x * kPrefillBM;
  const int t_end = min(t0 + kPrefillBM, p.n_tokens);
  const int ps = p.page_size;
  const int shift = Pow2Shift(ps);
  const float scale_log2 = p.scale * kLog2e;
  const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q);
  const __nv_bfloat16* pool_k = static_cast<const __nv_bfloat16*>(p.pool_k);
  const __nv_bfloat16* pool_v = static_cast<const __nv_bfloat16*>(p.pool_v);
  int* kpos_s = reinterpret_cast<int*>(smem + L::kPos);
  int* kvalid_s = reinterpret_cast<int*>(smem + L::kValid);

  // The query tile, into registers as A fragments.
  for (int i = tid; i < kPrefillBM * kChunks; i += kPrefillThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = t0 + r < p.n_tokens;
    const __nv_bfloat16* src =
        q + (static_cast<int64_t>(valid ? t0 + r : 0) * p.n_heads + head) * D + c * 8;
    CpAsync16(smem + L::kQ + Swizzled<D>(r, c), src, valid);
  }
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  uint32_t qf[kKSteps][4];
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    const int r = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
    LdMatrixX4(qf[kk], smem + L::kQ + Swizzled<D>(r, kk * 2 + lane / 16));
  }

  // Each thread gathers key slot `lr` of a tile (two threads per slot, half the chunks each).
  const int lr = tid / 2, part = tid % 2;
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out);

  for (int cur = t0; cur < t_end;) {
    const int rb = p.row_base[cur];
    int run_end = cur + 1;
    while (run_end < t_end && p.row_base[run_end] == rb) ++run_end;
    const int row = rb + kvh;
    int e_begin = 0, e_end = 0;
    if (row >= 0 && row < p.num_rows) {
      e_begin = p.indptr[row];
      e_end = max(e_begin, p.indptr[row + 1]);
    }
    // Slots fit in int32: a pool holds at most INT32_MAX slots.
    const int n_slots = (e_end - e_begin) * ps;
    const int n_tiles = (n_slots + kPrefillBN - 1) / kPrefillBN;

    // Page id and length of this thread's slot in `tile` (-1, 0 past the row's end).
    auto fetch = [&](int tile, int* page, int* len) {
      const int slot = tile * kPrefillBN + lr;
      *page = -1;
      *len = 0;
      if (slot < n_slots) {
        int e, off;
        SlotEntry(slot, ps, shift, &e, &off);
        *page = p.indices[e_begin + e];
        *len = p.lens[e_begin + e];
      }
    };
    auto issue = [&](int tile, int stage, int page, int len) {
      int e, off;
      SlotEntry(tile * kPrefillBN + lr, ps, shift, &e, &off);
      const bool valid = page >= 0 && page < p.num_pages && off < len;
      const int64_t idx = valid ? static_cast<int64_t>(page) * ps + off : 0;
      if (part == 0) {
        kvalid_s[stage * kPrefillBN + lr] = valid;
        CpAsync4(kpos_s + stage * kPrefillBN + lr, p.pool_pos + idx, valid);
      }
      uint8_t* ks = smem + L::kK + stage * L::kTileBytes;
      uint8_t* vs = smem + L::kV + stage * L::kTileBytes;
#pragma unroll
      for (int c = part * (kChunks / 2); c < (part + 1) * (kChunks / 2); ++c) {
        CpAsync16(ks + Swizzled<D>(lr, c), pool_k + idx * D + c * 8, valid);
        CpAsync16(vs + Swizzled<D>(lr, c), pool_v + idx * D + c * 8, valid);
      }
    };

    int qlim[2];
    int warp_qmax = kIntMin, warp_qmin = kIntMax;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int t = t0 + warp * 16 + g + 8 * j;
      const bool active = t >= cur && t < run_end;
      qlim[j] = !active ? kIntMin : (p.causal ? p.q_pos[t] : kIntMax - 1);
      warp_qmax = max(warp_qmax, qlim[j]);
      warp_qmin = min(warp_qmin, qlim[j]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      warp_qmax = max(warp_qmax, __shfl_xor_sync(~0u, warp_qmax, o));
      warp_qmin = min(warp_qmin, __shfl_xor_sync(~0u, warp_qmin, o));
    }

    float o_acc[kDTiles][4];
#pragma unroll
    for (int i = 0; i < kDTiles; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[i][e] = 0.0f;
    }
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};

    int next_page = -1, next_len = 0;
    if (n_tiles > 0) {
      int page, len;
      fetch(0, &page, &len);
      issue(0, 0, page, len);
      CpAsyncCommit();
      if (n_tiles > 1) fetch(1, &next_page, &next_len);
    }
    for (int tile = 0; tile < n_tiles; ++tile) {
      const int stage = tile & 1;
      if (tile + 1 < n_tiles) {
        issue(tile + 1, stage ^ 1, next_page, next_len);
        CpAsyncCommit();
        if (tile + 2 < n_tiles) fetch(tile + 2, &next_page, &next_len);
        CpAsyncWait<1>();
      } else {
        CpAsyncWait<0>();
      }
      __syncthreads();
      const int* kpos = kpos_s + stage * kPrefillBN;
      const int* kvalid = kvalid_s + stage * kPrefillBN;
      const int kp0 = kvalid[lane] ? kpos[lane] : kIntMax;
      const int kp1 = kvalid[lane + 32] ? kpos[lane + 32] : kIntMax;
      int kmin = min(kp0, kp1), kmax = max(kp0, kp1);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        kmin = min(kmin, __shfl_xor_sync(~0u, kmin, o));
        kmax = max(kmax, __shfl_xor_sync(~0u, kmax, o));
      }
      // Every key of the tile is valid and visible to every query of the warp: no masks.
      const bool all_visible = kmax <= warp_qmin;
      if (kmin <= warp_qmax) {
        const uint8_t* ks = smem + L::kK + stage * L::kTileBytes;
        const uint8_t* vs = smem + L::kV + stage * L::kTileBytes;
        float s[kNTiles][4];
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
          for (int jp = 0; jp < kNTiles / 2; ++jp) {
            uint32_t b[4];
            const int key = jp * 16 + (lane % 8) + (lane / 16) * 8;
            LdMatrixX4(b, ks + Swizzled<D>(key, kk * 2 + (lane / 8) % 2));
            MmaBf16(s[2 * jp], qf[kk], b[0], b[1]);
            MmaBf16(s[2 * jp + 1], qf[kk], b[2], b[3]);
          }
        }
        // Mask, scale, row maxima.
        float mx[2] = {kNegInf, kNegInf};
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float v = s[j][e] * scale_log2;
            if (!all_visible) {
              const int col = j * 8 + tig * 2 + (e & 1);
              const int kp = kvalid[col] ? kpos[col] : kIntMax;
              if (kp > qlim[e >> 1]) v = kNegInf;
            }
            s[j][e] = v;
            mx[e >> 1] = fmaxf(mx[e >> 1], v);
          }
        }
        float m_use[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 1));
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 2));
          const float m_new = fmaxf(m[r], mx[r]);
          m_use[r] = m_new == kNegInf ? 0.0f : m_new;
          const float alpha = FastExp2(m[r] - m_use[r]);
          m[r] = m_new;
          l[r] *= alpha;
#pragma unroll
          for (int i = 0; i < kDTiles; ++i) {
            o_acc[i][2 * r] *= alpha;
            o_acc[i][2 * r + 1] *= alpha;
          }
        }
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float pe = FastExp2(s[j][e] - m_use[e >> 1]);
            s[j][e] = pe;
            l[e >> 1] += pe;
          }
        }
        // o += p v, p as A fragments straight from the score accumulators.
#pragma unroll
        for (int kk = 0; kk < kPrefillBN / 16; ++kk) {
          const uint32_t a[4] = {PackBf16(s[2 * kk][0], s[2 * kk][1]),
                                 PackBf16(s[2 * kk][2], s[2 * kk][3]),
                                 PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                 PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
          for (int np = 0; np < D / 16; ++np) {
            uint32_t b[4];
            const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
            LdMatrixX4Trans(b, vs + Swizzled<D>(key, np * 2 + lane / 16));
            MmaBf16(o_acc[2 * np], a, b[0], b[1]);
            MmaBf16(o_acc[2 * np + 1], a, b[2], b[3]);
          }
        }
      }
      __syncthreads();
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(~0u, l[r], 1);
      l[r] += __shfl_xor_sync(~0u, l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (qlim[r] == kIntMin) continue;
      const int t = t0 + warp * 16 + g + 8 * r;
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      __nv_bfloat16* dst = out + (static_cast<int64_t>(t) * p.n_heads + head) * D + tig * 2;
#pragma unroll
      for (int i = 0; i < kDTiles; ++i) {
        *reinterpret_cast<__nv_bfloat162*>(dst + i * 8) =
            __floats2bfloat162_rn(o_acc[i][2 * r] * inv, o_acc[i][2 * r + 1] * inv);
      }
    }
    cur = run_end;
  }
}

}  // namespace icecache::kernels
