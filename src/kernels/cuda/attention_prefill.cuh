// Prefill attention over paged KV with bf16 tensor cores (mma.sync m16n8k16), flash-attention
// style: a block of 4 warps holds 64 * MT query tokens of one head (16 * MT rows per warp, MT
// m-tiles that share every K and V fragment the warp loads, which halves the K/V bytes read per
// query at MT = 2) and walks the row's key slots BN at a time (slot s of a row is offset
// s % page_size of its entry s / page_size; offsets past an entry's length are masked), with an
// online softmax in base 2 that rescales the output only when a row maximum moves. The query
// tile stays in shared memory and is re-read per tile (its fragments would not fit in
// registers beside MT m-tiles of output). K/V tiles are gathered from their pages with cp.async
// into two swizzled shared-memory stages; the page ids of the tile after next are fetched one
// tile ahead, so no global load sits on the critical path. Causality is by absolute position
// (keys at positions > the query's are masked); a warp skips the math of a tile none of whose
// keys its queries can see. Query tokens of a block that belong to different rows (sequence
// boundaries) are handled one run of equal row_base at a time.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"

namespace icecache::kernels {

constexpr int kPrefillThreads = 128;

template <int D, int MT, int BN>
struct PrefillLayout {
  static constexpr int kBM = 64 * MT;  // query tokens per block
  static constexpr int kRowBytes = D * 2;
  static constexpr int kTileBytes = BN * kRowBytes;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kBM * kRowBytes;  // two stages
  static constexpr int kV = kK + 2 * kTileBytes;   // two stages
  static constexpr int kPos = kV + 2 * kTileBytes;
  static constexpr int kValid = kPos + 2 * BN * 4;
  static constexpr int kBytes = kValid + 2 * BN * 4;
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile: chunks are XOR-swizzled by the
// row so that ldmatrix's eight row reads hit eight different bank groups.
template <int D>
__device__ __forceinline__ int Swizzled(int row, int chunk) {
  return row * (D * 2) + ((chunk ^ (row & 7)) << 4);
}

// Byte offsets of 16-byte chunks 2 i + hi (i = 0..3) of `row` in a swizzled tile. Chunk 2 c + hi
// for any c is at b[c % 4] + (c / 4) * 128, and row + 8 k at that plus 8 k rows: the ldmatrix
// addresses of a whole tile from four registers and immediates.
template <int D>
__device__ __forceinline__ void SwizzleBases(int row, int hi, int (&b)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = Swizzled<D>(row, 2 * i + hi);
}
template <int D>
__device__ __forceinline__ int SwizzledAt(const int (&b)[4], int c, int row_add) {
  return b[c & 3] + (c >> 2) * 128 + row_add * (D * 2);
}

template <int D, int MT, int BN>
__global__ void __launch_bounds__(kPrefillThreads, 2) PrefillAttentionKernel(AttentionParams p) {
  using L = PrefillLayout<D, MT, BN>;
  constexpr int kSlotThreads = kPrefillThreads / BN;  // threads gathering one key slot
  static_assert(BN % 16 == 0 && kPrefillThreads % BN == 0 && (D / 8) % kSlotThreads == 0);
  constexpr int kChunks = D / 8;   // 16-byte chunks per row
  constexpr int kKSteps = D / 16;  // k-steps of q k^T
  constexpr int kDTiles = D / 8;   // n-tiles of the output
  constexpr int kNTiles = BN / 8;
  constexpr int kIntMax = 0x7fffffff;
  constexpr int kIntMin = -kIntMax - 1;
  extern __shared__ __align__(128) uint8_t smem[];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, tig = lane % 4;
  const int head = blockIdx.y;
  const int kvh = head / (p.n_heads / p.n_kv_heads);
  const int t0 = blockIdx.x * L::kBM;
  const int t_end = min(t0 + L::kBM, p.n_tokens);
  const int warp_row0 = warp * 16 * MT;  // the warp's first row in the block
  const int ps = p.page_size;
  const int shift = Pow2Shift(ps);
  const float scale_log2 = p.scale * kLog2e;
  const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q);
  const __nv_bfloat16* pool_k = static_cast<const __nv_bfloat16*>(p.pool_k);
  const __nv_bfloat16* pool_v = static_cast<const __nv_bfloat16*>(p.pool_v);
  int* kpos_s = reinterpret_cast<int*>(smem + L::kPos);
  int* kvalid_s = reinterpret_cast<int*>(smem + L::kValid);

  // The query tile, into shared memory (waited for with the first K/V tile).
  for (int i = tid; i < L::kBM * kChunks; i += kPrefillThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = t0 + r < p.n_tokens;
    const __nv_bfloat16* src =
        q + (static_cast<int64_t>(valid ? t0 + r : 0) * p.n_heads + head) * D + c * 8;
    CpAsync16(smem + L::kQ + Swizzled<D>(r, c), src, valid);
  }
  CpAsyncCommit();

  // The rows and chunks this lane's ldmatrix reads address: query rows (A, chunks 2 kk +
  // lane / 16), key rows (B of q k^T, chunks 2 kk + (lane / 8) % 2), value rows (B of p v,
  // transposed, chunks 2 np + lane / 16).
  int q_base[4], k_base[4], v_base[4];
  SwizzleBases<D>(warp_row0 + (lane % 8) + ((lane / 8) % 2) * 8, lane / 16, q_base);
  SwizzleBases<D>((lane % 8) + (lane / 16) * 8, (lane / 8) % 2, k_base);
  SwizzleBases<D>((lane % 8) + ((lane / 8) % 2) * 8, lane / 16, v_base);

  // Each thread gathers key slot `lr` of a tile (kSlotThreads threads per slot, a share of the
  // chunks each).
  const int lr = tid / kSlotThreads, part = tid % kSlotThreads;
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
    const int n_tiles = (n_slots + BN - 1) / BN;

    // Page id and length of this thread's slot in `tile` (-1, 0 past the row's end).
    auto fetch = [&](int tile, int* page, int* len) {
      const int slot = tile * BN + lr;
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
      SlotEntry(tile * BN + lr, ps, shift, &e, &off);
      const bool valid = page >= 0 && page < p.num_pages && off < len;
      const int64_t idx = valid ? static_cast<int64_t>(page) * ps + off : 0;
      if (part == 0) {
        kvalid_s[stage * BN + lr] = valid;
        CpAsync4(kpos_s + stage * BN + lr, p.pool_pos + idx, valid);
      }
      uint8_t* ks = smem + L::kK + stage * L::kTileBytes;
      uint8_t* vs = smem + L::kV + stage * L::kTileBytes;
#pragma unroll
      for (int c = part * (kChunks / kSlotThreads); c < (part + 1) * (kChunks / kSlotThreads);
           ++c) {
        CpAsync16(ks + Swizzled<D>(lr, c), pool_k + idx * D + c * 8, valid);
        CpAsync16(vs + Swizzled<D>(lr, c), pool_v + idx * D + c * 8, valid);
      }
    };

    // qlim[mt][j]: the position limit of row warp_row0 + 16 mt + g + 8 j (kIntMin: not in run).
    int qlim[MT][2];
    int warp_qmax = kIntMin, warp_qmin = kIntMax;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int t = t0 + warp_row0 + mt * 16 + g + 8 * j;
        const bool active = t >= cur && t < run_end;
        qlim[mt][j] = !active ? kIntMin : (p.causal ? p.q_pos[t] : kIntMax - 1);
        warp_qmax = max(warp_qmax, qlim[mt][j]);
        warp_qmin = min(warp_qmin, qlim[mt][j]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      warp_qmax = max(warp_qmax, __shfl_xor_sync(~0u, warp_qmax, o));
      warp_qmin = min(warp_qmin, __shfl_xor_sync(~0u, warp_qmin, o));
    }

    float o_acc[MT][kDTiles][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int i = 0; i < kDTiles; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o_acc[mt][i][e] = 0.0f;
      }
    }
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      m[mt][0] = m[mt][1] = kNegInf;
      l[mt][0] = l[mt][1] = 0.0f;
    }

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
      const int* kpos = kpos_s + stage * BN;
      const int* kvalid = kvalid_s + stage * BN;
      int kmin = kIntMax, kmax = kIntMin;
#pragma unroll
      for (int i = lane; i < BN; i += 32) {
        const int kp = kvalid[i] ? kpos[i] : kIntMax;
        kmin = min(kmin, kp);
        kmax = max(kmax, kp);
      }
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
        float s[MT][kNTiles][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][j][e] = 0.0f;
          }
        }
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          uint32_t a[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            LdMatrixX4(a[mt], smem + L::kQ + SwizzledAt<D>(q_base, kk, mt * 16));
          }
#pragma unroll
          for (int jp = 0; jp < kNTiles / 2; ++jp) {
            uint32_t b[4];
            LdMatrixX4(b, ks + SwizzledAt<D>(k_base, kk, jp * 16));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              MmaBf16(s[mt][2 * jp], a[mt], b[0], b[1]);
              MmaBf16(s[mt][2 * jp + 1], a[mt], b[2], b[3]);
            }
          }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          // Mask, scale, row maxima.
          float mx[2] = {kNegInf, kNegInf};
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              float v = s[mt][j][e] * scale_log2;
              if (!all_visible) {
                const int col = j * 8 + tig * 2 + (e & 1);
                const int kp = kvalid[col] ? kpos[col] : kIntMax;
                if (kp > qlim[mt][e >> 1]) v = kNegInf;
              }
              s[mt][j][e] = v;
              mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
          }
          // Rescale the output only where a row maximum moved (alpha is exactly 1 elsewhere):
          // past the first tiles of a long row it seldom does.
          float m_use[2], alpha[2];
          if (OnlineSoftmaxStep(mx, m[mt], l[mt], m_use, alpha)) {
#pragma unroll
            for (int i = 0; i < kDTiles; ++i) {
#pragma unroll
              for (int e = 0; e < 4; ++e) o_acc[mt][i][e] *= alpha[e >> 1];
            }
          }
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float pe = FastExp2(s[mt][j][e] - m_use[e >> 1]);
              s[mt][j][e] = pe;
              l[mt][e >> 1] += pe;
            }
          }
        }
        // o += p v, p as A fragments straight from the score accumulators.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          uint32_t a[MT][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            a[mt][0] = PackBf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            a[mt][1] = PackBf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            a[mt][2] = PackBf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            a[mt][3] = PackBf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
          }
#pragma unroll
          for (int np = 0; np < D / 16; ++np) {
            uint32_t b[4];
            LdMatrixX4Trans(b, vs + SwizzledAt<D>(v_base, np, kk * 16));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              MmaBf16(o_acc[mt][2 * np], a[mt], b[0], b[1]);
              MmaBf16(o_acc[mt][2 * np + 1], a[mt], b[2], b[3]);
            }
          }
        }
      }
      __syncthreads();
    }

#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float lr_sum = l[mt][r];
        lr_sum += __shfl_xor_sync(~0u, lr_sum, 1);
        lr_sum += __shfl_xor_sync(~0u, lr_sum, 2);
        if (qlim[mt][r] == kIntMin) continue;
        const int t = t0 + warp_row0 + mt * 16 + g + 8 * r;
        const float inv = lr_sum > 0.0f ? 1.0f / lr_sum : 0.0f;
        __nv_bfloat16* dst = out + (static_cast<int64_t>(t) * p.n_heads + head) * D + tig * 2;
#pragma unroll
        for (int i = 0; i < kDTiles; ++i) {
          *reinterpret_cast<__nv_bfloat162*>(dst + i * 8) =
              __floats2bfloat162_rn(o_acc[mt][i][2 * r] * inv, o_acc[mt][i][2 * r + 1] * inv);
        }
      }
    }
    cur = run_end;
  }
  CpAsyncWait<0>();  // the query tile's copy, where no run had a key tile
}

}  // namespace icecache::kernels
