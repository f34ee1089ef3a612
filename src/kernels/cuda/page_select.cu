// Device-side page selection: page summaries (bf16 min | max keys, or Q8_0 mean keys, each at
// the summary row its caller hands out), top pages per KV head ranked by them, and the
// working-set step (residency diff, slot assignment, fetch of the missing pages).
//
// SelectPages runs as two launches: a score kernel spreads the candidates over many blocks (a
// row's summaries are megabytes at 128K tokens): ScoreKernelMean for mean keys (one thread per
// candidate, the CPU reference's arithmetic operation for operation), ScoreKernel or
// ScoreKernelVec (head dims 64, 128 and 256) for min | max bounds. Then RankKernel (one block per
// row) finds the best `pages_left` scores by a radix select on the scores' order-preserving bit
// patterns, sorts those few by (score, entry) and walks them as AssembleSelection does. MapPages:
// AssignKernel (one block per row) diffs the selection against the row's slots with warp ballots,
// then FetchKernel copies the missing pages, one block per page (with ICECACHE_FETCH_BULK=1 the
// TMA's bulk copies move them, FetchKernelBulk).
#include <algorithm>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "core/env_switch.h"
#include "kernels/cuda/bulk_copy.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace icecache::kernels {

namespace {

using Bf16 = __nv_bfloat16;

int LastError() { return static_cast<int>(cudaGetLastError()); }

constexpr int kScoreThreads = 256;
constexpr int kScoreWarps = kScoreThreads / 32;
constexpr int kScorePerWarp = 8;  // candidates per warp
constexpr int kRankThreads = 512;
constexpr int kRankHeld = 16;  // candidate keys a RankKernel thread keeps in registers
constexpr int kMaxGroup = 32;
constexpr int kMaxDim = 256;
constexpr int kSortCap = 2048;  // kMaxSelectPicks (backend.h)
constexpr int kQ8Block = 32;    // Q8_0: an f16 scale, then 32 int8 values (core/quant.h)
constexpr int kQ8Bytes = 34;

// Byte address of a summary row: bf16 [rows][d] for min | max, Q8_0 blocks for mean keys.
__device__ __forceinline__ const char* SummaryRow(const void* bounds, int64_t row, int rows,
                                                  int d) {
  const int64_t bytes = rows == 1 ? static_cast<int64_t>(d / kQ8Block) * kQ8Bytes
                                  : static_cast<int64_t>(rows) * d * 2;
  return static_cast<const char*>(bounds) + row * bytes;
}

// ---- PageBounds -------------------------------------------------------------------------------

__global__ void PageBoundsKernel(PageBoundsParams p) {
  __shared__ float mean_s[kMaxDim];
  __shared__ float spread_s[kMaxDim];
  const int32_t id = p.ids[blockIdx.x];
  const int32_t srow = p.summary_rows[blockIdx.x];
  const int n = min(p.lens[blockIdx.x], p.page_size);
  // Block-uniform exits (before any barrier).
  if (id < 0 || id >= p.pool_pages || n < 1 || srow < 0 || srow >= p.summaries) return;
  const int d = p.head_dim;
  if (threadIdx.x == 0 && p.resident != nullptr) {
    const int32_t s = p.resident[id];
    if (s >= 0 && s < p.slot_pages && p.slot_page[s] == id) p.slot_len[s] = -1;  // stale copy
  }
  const Bf16* k = static_cast<const Bf16*>(p.pool_k) + static_cast<int64_t>(id) * p.page_size * d;
  char* row = const_cast<char*>(SummaryRow(p.bounds, srow, p.rows, d));
  if (p.rows == 1) {
    // KeyMean's arithmetic (kv/key_mean.h): an f32 sum in row order, one division, rounded.
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      float sum = 0.0f;
      for (int t = 0; t < n; ++t)
        sum = __fadd_rn(sum, __bfloat162float(k[static_cast<int64_t>(t) * d + j]));
      const float m = __bfloat162float(__float2bfloat16_rn(__fdiv_rn(sum, static_cast<float>(n))));
      mean_s[j] = m;
      // KeySpread's arithmetic: per dimension, fma(k - m, k - m, s) in row order.
      float s2 = 0.0f;
      for (int t = 0; t < n; ++t) {
        const float x = __fsub_rn(__bfloat162float(k[static_cast<int64_t>(t) * d + j]), m);
        s2 = __fmaf_rn(x, x, s2);
      }
      spread_s[j] = s2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the dimensions' sums in order, as KeySpread adds them
      float total = 0.0f;
      for (int j = 0; j < d; ++j) total = __fadd_rn(total, spread_s[j]);
      p.spread[srow] = __fdiv_rn(total, static_cast<float>(n * d));
    }
    // QuantQ8_0's arithmetic (core/quant.cc), one warp per block of 32 dimensions.
    const int lane = threadIdx.x % 32;
    for (int blk = threadIdx.x / 32; blk < d / kQ8Block; blk += blockDim.x / 32) {
      const float x = mean_s[blk * kQ8Block + lane];
      const float amax = WarpMax(fabsf(x));
      const float scale = __fdiv_rn(amax, 127.0f);
      const float inv = scale != 0.0f ? __fdiv_rn(1.0f, scale) : 0.0f;
      const float r = roundf(__fmul_rn(x, inv));
      const int v = !(r >= -127.0f) ? -127 : (r > 127.0f ? 127 : static_cast<int>(r));
      char* block = row + blk * kQ8Bytes;
      if (lane == 0) *reinterpret_cast<__half*>(block) = __float2half_rn(scale);
      block[2 + lane] = static_cast<char>(static_cast<int8_t>(v));
    }
    return;
  }
  Bf16* b = reinterpret_cast<Bf16*>(row);
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float lo = __bfloat162float(k[j]), hi = lo;
    for (int t = 1; t < n; ++t) {
      const float v = __bfloat162float(k[static_cast<int64_t>(t) * d + j]);
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
    }
    b[j] = __float2bfloat16_rn(lo);  // exact: both are stored bf16 values
    b[d + j] = __float2bfloat16_rn(hi);
  }
}

// ---- SelectPages --------------------------------------------------------------------------

struct Limits {
  int count, sink_end, window_begin, tokens_left, pages_left;
};

__device__ __forceinline__ Limits LoadLimits(const int32_t* limits, int row, int stride) {
  const int32_t* l = limits + row * 5;
  Limits r{min(l[0], stride), max(0, l[1]), l[2], l[3], l[4]};
  r.window_begin = max(r.sink_end, min(r.window_begin, r.count));
  r.sink_end = min(r.sink_end, r.window_begin);
  return r;
}

// Shared start of the min | max score kernels: the row's limits, the block's first candidate and
// the group's queries in shared memory. False when the block has no candidate (block-uniform).
__device__ __forceinline__ bool ScoreBlockStart(const PageSelectParams& p, float* q_s, Limits* lim,
                                                int* first) {
  const int row = blockIdx.y;
  // A batch entry with fewer rows than the grid, or with mean keys (ScoreKernelMean's).
  if (row >= p.rows || p.bound_rows != 2) return false;
  *lim = LoadLimits(p.limits, row, p.stride);
  *first = lim->sink_end + blockIdx.x * kScoreWarps * kScorePerWarp;
  if (*first >= lim->window_begin) return false;
  const int d = p.head_dim;
  const Bf16* q = static_cast<const Bf16*>(p.q) + static_cast<int64_t>(row) * p.group * d;
  for (int i = threadIdx.x; i < p.group * d; i += blockDim.x) q_s[i] = __bfloat162float(q[i]);
  __syncthreads();
  return true;
}

// Block (chunk, row): kScoreWarps warps, kScorePerWarp candidates each, min | max bounds. Lanes
// split the dimensions; the score is the maximum over the group's query heads of the bound.
template <int N>
__global__ void __launch_bounds__(kScoreThreads)
    ScoreKernel(const __grid_constant__ ParamBatch<PageSelectParams, N> b) {
  const PageSelectParams& p = b.p[blockIdx.z];
  __shared__ float q_s[kMaxGroup * kMaxDim];
  Limits lim;
  int first = 0;
  if (!ScoreBlockStart(p, q_s, &lim, &first)) return;
  const int row = blockIdx.y;
  const int d = p.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int c = 0; c < kScorePerWarp; ++c) {
    const int e = first + warp * kScorePerWarp + c;
    if (e >= lim.window_begin) break;
    const int64_t at = static_cast<int64_t>(row) * p.stride + e;
    const int32_t srow = p.list_rows[at];
    float best = kNegInf;
    if (srow >= 0 && srow < p.summaries && p.list_lens[at] > 0) {
      const Bf16* b = reinterpret_cast<const Bf16*>(SummaryRow(p.bounds, srow, 2, d));
      float lo[kMaxDim / 32], hi[kMaxDim / 32];
      const int per = d / 32;
      for (int k = 0; k < per; ++k) {
        lo[k] = __bfloat162float(b[lane + 32 * k]);
        hi[k] = __bfloat162float(b[d + lane + 32 * k]);
      }
      for (int g = 0; g < p.group; ++g) {
        const float* qg = q_s + g * d;
        float s = 0.0f;
        for (int k = 0; k < per; ++k) {
          const float x = qg[lane + 32 * k];
          s += fmaxf(x * lo[k], x * hi[k]);
        }
        s = WarpSum(s);
        best = g == 0 ? s : fmaxf(best, s);
      }
    }
    if (lane == 0) p.scores[static_cast<int64_t>(row) * p.stride + e] = best;
  }
}

// The same min | max scores for head dims that are multiples of 64 (kV = d / 64 <= 4): eight
// lanes per candidate, four candidates of a warp at once, each lane loading its 8 kV dimensions
// of a bound row as 16-byte words (whole 128-byte lines per group of lanes). A lane sums its
// dimensions in order, then the eight lanes combine by a butterfly; only the summation order
// differs from ScoreKernel's (and the CPU reference's), which the parity tests' exact inputs do
// not see.
template <int kV, int N>
__global__ void __launch_bounds__(kScoreThreads)
    ScoreKernelVec(const __grid_constant__ ParamBatch<PageSelectParams, N> b) {
  const PageSelectParams& p = b.p[blockIdx.z];
  __shared__ float q_s[kMaxGroup * kMaxDim];
  Limits lim;
  int first = 0;
  if (!ScoreBlockStart(p, q_s, &lim, &first)) return;
  const int row = blockIdx.y;
  const int d = p.head_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / 8, l8 = lane % 8;
#pragma unroll
  for (int c0 = 0; c0 < kScorePerWarp; c0 += 4) {
    const int e = first + warp * kScorePerWarp + c0 + sub;
    const int64_t at = static_cast<int64_t>(row) * p.stride + e;
    bool ok = false;
    float lo[8 * kV], hi[8 * kV];
#pragma unroll
    for (int i = 0; i < 8 * kV; ++i) lo[i] = hi[i] = 0.0f;
    if (e < lim.window_begin) {
      const int32_t srow = p.list_rows[at];
      ok = srow >= 0 && srow < p.summaries && p.list_lens[at] > 0;
      if (ok) {
        const Bf16* b = reinterpret_cast<const Bf16*>(SummaryRow(p.bounds, srow, 2, d));
#pragma unroll
        for (int v = 0; v < kV; ++v) {
          const uint4 w = *reinterpret_cast<const uint4*>(b + v * 64 + l8 * 8);
          const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float2 f =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[k]));
            lo[v * 8 + 2 * k] = f.x;
            lo[v * 8 + 2 * k + 1] = f.y;
          }
          const uint4 u = *reinterpret_cast<const uint4*>(b + d + v * 64 + l8 * 8);
          const uint32_t hw[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&hw[k]));
            hi[v * 8 + 2 * k] = f.x;
            hi[v * 8 + 2 * k + 1] = f.y;
          }
        }
      }
    }
    float best = kNegInf;
    for (int g = 0; g < p.group; ++g) {
      const float* qg = q_s + g * d;
      float s = 0.0f;
#pragma unroll
      for (int v = 0; v < kV; ++v) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float x = qg[v * 64 + l8 * 8 + i];
          s += fmaxf(x * lo[v * 8 + i], x * hi[v * 8 + i]);
        }
      }
      s += __shfl_xor_sync(0xffffffffu, s, 4);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      best = g == 0 ? s : fmaxf(best, s);
    }
    if (e < lim.window_begin && l8 == 0) p.scores[at] = ok ? best : kNegInf;
  }
}

// Mean-key scores: one thread per candidate, kMeanThreads candidates per block (chunk, row). A
// thread reads its Q8_0 row block by block as 4-byte words (blocks start 2-byte aligned), and
// computes CentroidScore's operations in its order (kv/key_mean.h): c_j = q8_j x scale, then per
// query head fma(q_j, c_j, sum) over the dimensions in order and fma(|q|^2 x spread, factor, sum),
// |q|^2 by QuerySquares' fmas in order; the same bits as the CPU reference. The queries sit in
// shared memory (every lane reads the same word: a broadcast), padded with zero heads to a
// multiple of kMeanHeads, so that the inner loop has no condition and its loads can run ahead of
// the fmas; heads go kMeanHeads at a time. kNB = d / 32 when it is 2, 4 or 8 (unrolled), else 0
// (the count read at run time).
constexpr int kMeanThreads = 256;
constexpr int kMeanHeads = 4;

// Floats of ScoreKernelMean's shared memory: the padded queries, then |q|^2 per head.
inline size_t MeanSharedFloats(int group, int d) {
  return static_cast<size_t>((group + kMeanHeads - 1) / kMeanHeads * kMeanHeads) * d + group;
}

template <int kNB, int N>
__global__ void __launch_bounds__(kMeanThreads)
    ScoreKernelMean(const __grid_constant__ ParamBatch<PageSelectParams, N> b) {
  const PageSelectParams& p = b.p[blockIdx.z];
  extern __shared__ float q_smem[];  // [padded group][d] queries, then [group] |q|^2
  const int row = blockIdx.y;
  // A batch entry with fewer rows than the grid, or with min | max bounds (the other kernels').
  if (row >= p.rows || p.bound_rows != 1) return;
  const Limits lim = LoadLimits(p.limits, row, p.stride);
  const int e = lim.sink_end + static_cast<int>(blockIdx.x) * kMeanThreads + threadIdx.x;
  if (lim.sink_end + static_cast<int>(blockIdx.x) * kMeanThreads >= lim.window_begin) return;
  const int d = p.head_dim, group = p.group;
  const int nb = kNB > 0 ? kNB : d / kQ8Block;
  const int padded = (group + kMeanHeads - 1) / kMeanHeads * kMeanHeads;
  float* q_s = q_smem;
  float* qq_s = q_smem + padded * d;
  const Bf16* q = static_cast<const Bf16*>(p.q) + static_cast<int64_t>(row) * group * d;
  for (int i = threadIdx.x; i < padded * d; i += blockDim.x) {
    q_s[i] = i < group * d ? __bfloat162float(q[i]) : 0.0f;
  }
  __syncthreads();
  for (int g = threadIdx.x; g < group; g += blockDim.x) {
    float qq = 0.0f;
    for (int j = 0; j < d; ++j) qq = __fmaf_rn(q_s[g * d + j], q_s[g * d + j], qq);
    qq_s[g] = qq;
  }
  __syncthreads();
  if (e >= lim.window_begin) return;
  const int64_t at = static_cast<int64_t>(row) * p.stride + e;
  const int32_t srow = p.list_rows[at];
  if (srow < 0 || srow >= p.summaries || p.list_lens[at] <= 0) {
    p.scores[at] = kNegInf;
    return;
  }
  const char* sr = SummaryRow(p.bounds, srow, 1, d);
  const float spread = p.spread[srow];
  const float factor = __fdiv_rn(0.5f, __fsqrt_rn(static_cast<float>(d)));
  float best = kNegInf;
  for (int g0 = 0; g0 < group; g0 += kMeanHeads) {
    float acc[kMeanHeads];
#pragma unroll
    for (int h = 0; h < kMeanHeads; ++h) acc[h] = 0.0f;
#pragma unroll
    for (int blk = 0; blk < (kNB > 0 ? kNB : kMaxDim / kQ8Block); ++blk) {
      if (kNB == 0 && blk >= nb) break;
      // The block's 34 bytes (f16 scale, 32 int8): the 4-byte words from the one at or before
      // its start, shifted into place (`al` word i = block bytes 4i .. 4i + 3); its last two
      // bytes alone when the block starts on a word, so that no read passes its end.
      const uintptr_t start = reinterpret_cast<uintptr_t>(sr) + blk * kQ8Bytes;
      const uint32_t* w = reinterpret_cast<const uint32_t*>(start & ~uintptr_t{3});
      const int shift = static_cast<int>(start & 3) * 8;  // 0 or 16
      uint32_t word[9];
#pragma unroll
      for (int i = 0; i < 8; ++i) word[i] = w[i];
      word[8] = shift == 0 ? *reinterpret_cast<const unsigned short*>(start + 32) : w[8];
      uint32_t al[9];
#pragma unroll
      for (int i = 0; i < 8; ++i) al[i] = __funnelshift_r(word[i], word[i + 1], shift);
      al[8] = word[8] >> shift;
      auto byte_at = [&](int k) { return (al[k / 4] >> (8 * (k % 4))) & 0xffu; };
      const float scale = __half2float(__ushort_as_half(static_cast<unsigned short>(al[0])));
#pragma unroll
      for (int k = 0; k < kQ8Block; k += 4) {
        float c[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          c[i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(byte_at(2 + k + i))), scale);
        }
#pragma unroll
        for (int h = 0; h < kMeanHeads; ++h) {  // padded heads add zeros, never read
          const float4 qv =
              *reinterpret_cast<const float4*>(q_s + (g0 + h) * d + blk * kQ8Block + k);
          acc[h] = __fmaf_rn(qv.x, c[0], acc[h]);
          acc[h] = __fmaf_rn(qv.y, c[1], acc[h]);
          acc[h] = __fmaf_rn(qv.z, c[2], acc[h]);
          acc[h] = __fmaf_rn(qv.w, c[3], acc[h]);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kMeanHeads; ++h) {
      if (g0 + h < group) {
        const float s = __fmaf_rn(__fmul_rn(qq_s[g0 + h], spread), factor, acc[h]);
        best = g0 + h == 0 || s > best ? s : best;
      }
    }
  }
  p.scores[at] = best;
}

// Order-preserving bits of a float (larger float, larger key).
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One block per row: radix select of the best `want` keys, then sort and walk.
template <int N>
__global__ void __launch_bounds__(kRankThreads)
    RankKernel(const __grid_constant__ ParamBatch<PageSelectParams, N> b) {
  const PageSelectParams& p = b.p[blockIdx.z];
  using Scan = cub::BlockScan<int, kRankThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ unsigned hist[256];
  __shared__ uint32_t s_prefix, s_mask, s_and, s_or;
  __shared__ int s_remaining, s_done, s_taken_eq, s_selected, s_taken;
  __shared__ unsigned long long sort_keys[kSortCap];
  __shared__ int taken[kSortCap];

  const int row = blockIdx.x;
  if (row >= p.rows) return;  // a batch entry with fewer rows than the grid
  const Limits lim = LoadLimits(p.limits, row, p.stride);
  const int64_t base = static_cast<int64_t>(row) * p.stride;
  const int n_cand = lim.window_begin - lim.sink_end;
  const int want = max(0, min(min(lim.pages_left, n_cand), kSortCap));
  const float* scores = p.scores + base;
  const int tid = threadIdx.x;

  // Rows of up to kRankThreads * kRankHeld candidates keep their keys in registers, each thread
  // a contiguous range of entries, so that every pass reads them once from L2 at most.
  const bool held = n_cand <= kRankThreads * kRankHeld;
  uint32_t keys[kRankHeld];
  const int first = tid * kRankHeld;
  if (held) {
#pragma unroll
    for (int j = 0; j < kRankHeld; ++j) {
      keys[j] = first + j < n_cand ? OrderKey(scores[lim.sink_end + first + j]) : 0u;
    }
  }

  // Radix select: the key of the want-th best candidate and how many equal to it to take, as a
  // prefix under a mask of its leading bits. The bits above the highest bit in which the row's
  // keys differ are the same in every key, so the digits start there (scores of a row are close:
  // their sign and most of their exponent agree), and a digit whose bin of the want-th key is
  // taken whole ends the search early: every key in that bin is selected, so the bits below
  // cannot change the set.
  if (tid == 0) {
    s_prefix = 0;
    s_mask = 0xffffffffu;
    s_remaining = want;
    s_and = 0xffffffffu;
    s_or = 0u;
    s_done = 0;
  }
  __syncthreads();
  if (want > 0 && want < n_cand) {
    uint32_t k_and = 0xffffffffu, k_or = 0u;
    if (held) {
#pragma unroll
      for (int j = 0; j < kRankHeld; ++j) {
        if (first + j < n_cand) {
          k_and &= keys[j];
          k_or |= keys[j];
        }
      }
    } else {
      for (int i = tid; i < n_cand; i += blockDim.x) {
        const uint32_t k = OrderKey(scores[lim.sink_end + i]);
        k_and &= k;
        k_or |= k;
      }
    }
    k_and = __reduce_and_sync(0xffffffffu, k_and);
    k_or = __reduce_or_sync(0xffffffffu, k_or);
    if ((tid & 31) == 0) {
      atomicAnd(&s_and, k_and);
      atomicOr(&s_or, k_or);
    }
    __syncthreads();
    const uint32_t differ = s_and ^ s_or;
    // Digits [lo, top] from the highest differing bit down; none when all keys are equal.
    int top = differ == 0 ? -1 : 31 - __clz(differ);
    const uint32_t lead = top >= 31 ? 0u : 0xffffffffu << (top + 1);
    if (tid == 0) {
      s_prefix = s_and & lead;
      s_mask = lead;
    }
    __syncthreads();
    while (top >= 0) {
      const int lo = max(0, top - 7);
      const uint32_t digit = (0xffffffffu >> (31 - (top - lo))) << lo;  // bits lo .. top
      for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix, mask = s_mask;
      // Most keys share a bin in the first digits: a warp's lanes with the same bin add once,
      // by their leader (every lane runs every round, so the warp stays whole). After the first
      // digit few keys still match the prefix, and a warp with none skips the match.
      auto count = [&](bool valid, uint32_t k) {
        const int bin = valid && (k & mask) == prefix ? static_cast<int>((k & digit) >> lo) : -1;
        if (!__any_sync(0xffffffffu, bin >= 0)) return;
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (bin >= 0 && (tid & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
      };
      if (held) {
#pragma unroll
        for (int j = 0; j < kRankHeld; ++j) count(first + j < n_cand, keys[j]);
      } else {
        for (int start = 0; start < n_cand; start += blockDim.x) {
          const int i = start + tid;
          count(i < n_cand, i < n_cand ? OrderKey(scores[lim.sink_end + i]) : 0u);
        }
      }
      __syncthreads();
      if (tid < 32) {
        // Lane l owns bins [8 (31 - l), 8 (31 - l) + 8): lane 0 the highest.
        const int lo8 = 8 * (31 - tid);
        unsigned own = 0;
        for (int b = 0; b < 8; ++b) own += hist[lo8 + b];
        unsigned incl = own;  // inclusive sum over lanes 0..tid (bins from the top down)
        for (int o = 1; o < 32; o <<= 1) {
          const unsigned v = __shfl_up_sync(0xffffffffu, incl, o);
          if (tid >= o) incl += v;
        }
        const unsigned excl = incl - own;
        const unsigned need = static_cast<unsigned>(s_remaining);
        if (excl < need && incl >= need) {
          unsigned above = excl;
          for (int b = 7; b >= 0; --b) {
            const unsigned c = hist[lo8 + b];
            if (above + c >= need) {
              s_prefix = prefix | (static_cast<uint32_t>(lo8 + b) << lo);
              s_mask = mask | digit;
              s_remaining = static_cast<int>(need - above);
              s_done = above + c == need;  // the bin is taken whole
              break;
            }
            above += c;
          }
        }
      }
      __syncthreads();
      if (s_done) break;
      top = lo - 1;
    }
  }
  // Collect: keys above the threshold, and the first s_remaining equal to it by entry.
  const bool all = want >= n_cand;
  const uint32_t thr = s_prefix, cmask = s_mask;  // compared under the mask
  const int eq_take = s_remaining;
  if (tid == 0) {
    s_taken_eq = 0;
    s_selected = 0;
  }
  __syncthreads();
  // Descending by key, then ascending by entry.
  auto sort_key = [](uint32_t k, int i) {
    return (static_cast<unsigned long long>(k) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
  };
  if (held && want > 0) {
    // Entries are in thread order: two scans place every thread's picks.
    int gt = 0, eq = 0;
#pragma unroll
    for (int j = 0; j < kRankHeld; ++j) {
      if (first + j < n_cand) {
        gt += all || (keys[j] & cmask) > thr;
        eq += !all && (keys[j] & cmask) == thr;
      }
    }
    int eq_before, eq_total;
    Scan(scan_tmp).ExclusiveSum(eq, eq_before, eq_total);
    __syncthreads();
    const int eq_mine = max(0, min(eq, eq_take - eq_before));
    int pos, sel_total;
    Scan(scan_tmp).ExclusiveSum(gt + eq_mine, pos, sel_total);
    int eq_left = eq_mine;
#pragma unroll
    for (int j = 0; j < kRankHeld; ++j) {
      if (first + j < n_cand) {
        const uint32_t km = keys[j] & cmask;
        const bool sel = all || km > thr || (km == thr && eq_left-- > 0);
        if (sel) {
          if (pos < kSortCap) sort_keys[pos] = sort_key(keys[j], first + j);
          ++pos;
        }
      }
    }
    if (tid == 0) s_selected = sel_total;
    __syncthreads();
  }
  for (int start = 0; !held && start < n_cand && want > 0; start += blockDim.x) {
    const int i = start + tid;
    uint32_t k = 0;
    int gt = 0, eq = 0;
    if (i < n_cand) {
      k = OrderKey(scores[lim.sink_end + i]);
      gt = all || (k & cmask) > thr;
      eq = !all && (k & cmask) == thr;
    }
    int eq_rank, eq_total;
    Scan(scan_tmp).ExclusiveSum(eq, eq_rank, eq_total);
    __syncthreads();
    const int sel = gt || (eq && s_taken_eq + eq_rank < eq_take);
    int pos, sel_total;
    Scan(scan_tmp).ExclusiveSum(sel, pos, sel_total);
    if (sel && s_selected + pos < kSortCap) sort_keys[s_selected + pos] = sort_key(k, i);
    __syncthreads();
    if (tid == 0) {
      s_taken_eq += eq_total;
      s_selected += sel_total;
    }
    __syncthreads();
  }
  const int m = min(s_selected, kSortCap);
  // Descending order of the picks' (distinct) sort keys, then their entries and token counts:
  // `taken` gets the entries in rank order, `sort_keys` their token counts.
  auto place = [&](int rank, unsigned long long key) {
    const int e = lim.sink_end + static_cast<int>(0xffffffffu - static_cast<uint32_t>(key));
    taken[rank] = e;
    sort_keys[rank] = static_cast<unsigned long long>(p.list_lens[base + e]);
  };
  if (m <= kRankThreads) {
    // A pick's rank is the number of larger keys: every thread reads every key (a broadcast).
    const unsigned long long mine = tid < m ? sort_keys[tid] : 0ull;
    int rank = 0;
    if (tid < m) {
      for (int j = 0; j < m; ++j) rank += sort_keys[j] > mine;
    }
    __syncthreads();
    if (tid < m) place(rank, mine);
  } else {
    int m2 = 1;
    while (m2 < m) m2 <<= 1;
    for (int i = m + tid; i < m2; i += blockDim.x) sort_keys[i] = 0;
    __syncthreads();
    // Bitonic sort, descending.
    for (int size = 2; size <= m2; size <<= 1) {
      for (int stride = size / 2; stride > 0; stride >>= 1) {
        for (int i = tid; i < m2; i += blockDim.x) {
          const int j = i ^ stride;
          if (j > i) {
            const bool desc = (i & size) == 0;
            const unsigned long long a = sort_keys[i], b = sort_keys[j];
            if (desc ? a < b : a > b) {
              sort_keys[i] = b;
              sort_keys[j] = a;
            }
          }
        }
        __syncthreads();
      }
    }
    for (int i = tid; i < m; i += blockDim.x) place(i, sort_keys[i]);  // each its own slot
  }
  __syncthreads();
  // The greedy walk (AssembleSelection's): in rank order, a pick is taken while tokens are left
  // and its count fits them. One warp walks 32 picks at a time: from the first pick that fits, a
  // run of picks whose running sum fits is taken at once (an inclusive scan), and the pick that
  // ends the run is skipped as the serial walk skips it.
  if (tid < 32) {
    const int lane = tid;
    int tokens = lim.tokens_left, t = 0;
    for (int chunk = 0; chunk < m && tokens > 0; chunk += 32) {
      const int i = chunk + lane;
      const bool valid = i < m;
      const int len = valid ? static_cast<int>(sort_keys[i]) : 0;
      const int entry = valid ? taken[i] : 0;
      __syncwarp();
      int from = 0;
      while (tokens > 0 && from < 32) {
        const unsigned fits = __ballot_sync(0xffffffffu, valid && lane >= from && len <= tokens);
        if (fits == 0) break;
        from = __ffs(fits) - 1;
        const int v = valid && lane >= from ? len : 0;
        int incl = v;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int n = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += n;
        }
        // Serially, pick `lane` sees tokens - (incl - v) left: taken when that is positive and
        // v fits it. Both sums only grow with the lane, so the taken picks are a run.
        const bool take = valid && lane >= from && incl <= tokens && incl - v < tokens;
        const unsigned run = __ballot_sync(0xffffffffu, take);
        const int last = 31 - __clz(run);
        if (take) taken[t + lane - from] = entry;  // t <= chunk + from: no unread pick is hit
        tokens -= __shfl_sync(0xffffffffu, incl, last);
        t += __popc(run);
        from = last + 2;  // `last + 1` did not fit (or the chunk ended)
      }
      __syncwarp();
    }
    if (lane == 0) s_taken = t;
  }
  __syncthreads();
  const int taken_n = s_taken;
  const int window = lim.count - lim.window_begin;
  const int total = min(lim.sink_end + taken_n + window, p.out_stride);
  int32_t* out_ids = p.out_ids + static_cast<int64_t>(row) * p.out_stride;
  int32_t* out_lens = p.out_lens + static_cast<int64_t>(row) * p.out_stride;
  for (int i = tid; i < total; i += blockDim.x) {
    int e;
    if (i < lim.sink_end) {
      e = i;
    } else if (i < lim.sink_end + taken_n) {
      e = taken[i - lim.sink_end];
    } else {
      e = lim.window_begin + (i - lim.sink_end - taken_n);
    }
    out_ids[i] = p.list_ids[base + e];
    out_lens[i] = p.list_lens[base + e];
  }
  if (tid == 0) p.out_count[row] = total;
}

// ---- MapPages -----------------------------------------------------------------------------

constexpr int kMapThreads = 256;

// One block per row. Shared: kept flags and the free-slot list over the row's capacity, the
// slot of each selected entry.
template <int N>
__global__ void __launch_bounds__(kMapThreads)
    AssignKernel(const __grid_constant__ ParamBatch<PageMapParams, N> b) {
  const PageMapParams& p = b.p[blockIdx.z];
  if (static_cast<int>(blockIdx.x) >= p.rows) return;  // a batch entry with fewer rows
  extern __shared__ int smem[];
  // [capacity]: 1 for a slot holding a selected page, then (once the selection is read) each
  // slot's class: kTaken, or the order in which free slots are handed out (kEmpty first).
  int* kept = smem;
  int* free_slots = kept + p.capacity;     // [capacity]
  int* slot_of = free_slots + p.capacity;  // [stride]: slot page, or -1 (missing)
  // [stride]: 1 when resident but out of date, 2 when deferred (fetch behind), else 0.
  int* stale = slot_of + p.stride;
  __shared__ int s_missing, s_copies, s_hits, s_begin, s_tokens;
  const int row = blockIdx.x;
  const int tid = threadIdx.x, lane = tid % 32;
  const bool prefetch = p.pending != nullptr;
  int n = min(p.sel_count[row], min(p.stride, p.capacity));
  if (prefetch && p.prefetch_pages > 0) n = min(n, p.prefetch_pages);
  const int64_t base = static_cast<int64_t>(p.first_group + row) * p.capacity;
  const int32_t* ids = p.sel_ids + static_cast<int64_t>(row) * p.stride;
  const int32_t* lens = p.sel_lens + static_cast<int64_t>(row) * p.stride;
  const int32_t skip = prefetch ? p.pending[row] : -1;  // prefetch: never kept nor copied
  // Fetch behind: the entries [lo, hi) between the sink's and the window's may be deferred.
  int lo = n, hi = n;
  if (!prefetch && p.defer_limits != nullptr) {
    const int32_t* lim = p.defer_limits + static_cast<int64_t>(row) * 5;
    lo = min(max(lim[1] + max(p.defer_after, 0), 0), n);
    hi = max(lo, n - min(max(lim[0] - lim[2], 0), n));
  }
  for (int i = tid; i < p.capacity; i += blockDim.x) kept[i] = 0;
  if (tid == 0) {
    int begin = 0;
    for (int r = 0; r < row; ++r) begin += min(p.sel_count[r], min(p.stride, p.capacity));
    s_begin = begin;
    s_hits = 0;
    s_tokens = 0;
  }
  __syncthreads();
  int hits = 0;
  for (int i = tid; i < n; i += blockDim.x) {
    const int32_t id = ids[i];
    int s = -1;
    stale[i] = 0;
    if (id >= 0 && id < p.host_pages && id != skip) {
      const int32_t r = p.resident[id];
      const bool in_slot = r >= base && r < base + p.capacity && p.slot_page[r] == id;
      const bool current = in_slot && p.slot_len[r] == lens[i];
      if (in_slot) kept[r - base] = 1;  // a deferred stale copy stays for the copy behind
      if (!current && i >= lo && i < hi) {
        stale[i] = 2;
      } else if (in_slot) {
        s = r;
        if (current) {
          hits += prefetch ? 0 : 1;
        } else {
          stale[i] = 1;
        }
      }
    }
    slot_of[i] = s;
  }
  if (hits > 0) atomicAdd(&s_hits, hits);
  int tokens = 0;
  for (int i = tid; i < n; i += blockDim.x) tokens += stale[i] == 2 ? 0 : lens[i];
  if (tokens > 0) atomicAdd(&s_tokens, tokens);
  __syncthreads();
  // Free slots by class: never used, then not listed by the last normal map, then the rest.
  constexpr int kEmpty = 0, kIdle = 1, kRecent = 2, kTaken = 3;
  for (int i = tid; i < p.capacity; i += blockDim.x) {
    if (kept[i]) {
      kept[i] = kTaken;
    } else if (p.slot_page[base + i] < 0) {
      kept[i] = kEmpty;
    } else {
      const bool recent = p.slot_used != nullptr && p.slot_used[base + i] >= p.clock - 1;
      kept[i] = recent ? kRecent : kIdle;
    }
  }
  __syncthreads();
  int32_t* fetch = p.fetch + static_cast<int64_t>(row) * (1 + 2 * p.capacity);
  if (tid < 32) {
    // Free slots, lowest first within each class: empty ones, then (with slot_used) those the
    // last normal map did not list, then the rest. Then the copies: stale entries first, then
    // missing ones (each taking the next free slot), both in selection order.
    int count = 0;
    for (int cls = kEmpty; cls < kTaken; ++cls) {
      for (int start = 0; start < p.capacity; start += 32) {
        const int i = start + lane;
        const bool f = i < p.capacity && kept[i] == cls;
        const unsigned mask = __ballot_sync(0xffffffffu, f);
        if (f) free_slots[count + __popc(mask & ((1u << lane) - 1))] = i;
        count += __popc(mask);
      }
    }
    int copies = 0;
    for (int start = 0; start < n; start += 32) {
      const int i = start + lane;
      const bool st = i < n && stale[i] == 1;
      const unsigned mask = __ballot_sync(0xffffffffu, st);
      if (st) {
        const int c = copies + __popc(mask & ((1u << lane) - 1));
        fetch[1 + 2 * c] = ids[i];
        fetch[2 + 2 * c] = slot_of[i];
      }
      copies += __popc(mask);
    }
    int missing = 0;
    for (int start = 0; start < n; start += 32) {
      const int i = start + lane;
      const bool miss = i < n && slot_of[i] < 0 && stale[i] != 2 && ids[i] >= 0 &&
                        ids[i] < p.host_pages && ids[i] != skip;
      const unsigned mask = __ballot_sync(0xffffffffu, miss);
      const int k = missing + __popc(mask & ((1u << lane) - 1));
      if (miss && k < count) {
        // A free slot always exists: n <= capacity and every kept slot holds a selected page.
        const int32_t s = static_cast<int32_t>(base) + free_slots[k];
        slot_of[i] = s;
        fetch[1 + 2 * (copies + k)] = ids[i];
        fetch[2 + 2 * (copies + k)] = s;
      }
      missing += __popc(mask);
    }
    missing = min(missing, count);
    if (lane == 0) {
      s_missing = missing;
      s_copies = copies + missing;
      fetch[0] = copies + missing;
    }
  }
  __syncthreads();
  // Evict and claim (each free slot is claimed by at most one entry; see the REQUIRES on ids).
  const int copies = s_copies, stale_n = s_copies - s_missing;
  for (int c = tid; c < copies; c += blockDim.x) {
    const int32_t id = fetch[1 + 2 * c], s = fetch[2 + 2 * c];
    if (c >= stale_n) {
      const int32_t old = p.slot_page[s];
      if (old >= 0 && old < p.host_pages && p.resident[old] == s) p.resident[old] = -1;
      p.slot_page[s] = id;
      p.resident[id] = s;
    }
  }
  if (prefetch) {
    for (int i = tid; i < n; i += blockDim.x) {
      if (slot_of[i] >= 0) p.slot_len[slot_of[i]] = lens[i];
    }
    if (tid == 0 && copies > 0) {
      atomicAdd(&p.counters[3], static_cast<unsigned long long>(copies));
    }
    return;
  }
  // The table: indptr, then entries in selection order.
  int32_t* indptr = p.table;
  int32_t* indices = p.table + p.rows + 1;
  int32_t* out_lens = indices + static_cast<int64_t>(p.rows) * p.stride;
  const int begin = s_begin;
  int deferred = 0;
  for (int i = tid; i < n; i += blockDim.x) {
    if (stale[i] == 2) {
      // Deferred: listed with no tokens at a slot of the row (attention skips it).
      indices[begin + i] = static_cast<int32_t>(base);
      out_lens[begin + i] = 0;
      ++deferred;
      continue;
    }
    const int s = slot_of[i];
    indices[begin + i] = s;
    out_lens[begin + i] = lens[i];
    if (s >= 0) {
      p.slot_len[s] = lens[i];
      if (p.slot_used != nullptr) p.slot_used[s] = p.clock;
    }
  }
  if (deferred > 0) atomicAdd(&p.counters[4], static_cast<unsigned long long>(deferred));
  if (tid == 0) {
    if (row == 0) indptr[0] = 0;
    indptr[row + 1] = begin + n;
    if (s_hits > 0) atomicAdd(&p.counters[0], static_cast<unsigned long long>(s_hits));
    if (copies > 0) atomicAdd(&p.counters[1], static_cast<unsigned long long>(copies));
    if (s_tokens > 0) atomicAdd(&p.counters[2], static_cast<unsigned long long>(s_tokens));
  }
}

// The page that block (c, row) of a fetch copies: false when the row lists fewer copies, or the
// entry is out of range (a batch entry smaller than the grid included).
__device__ __forceinline__ bool FetchEntry(const PageMapParams& p, int row, int c, int32_t* src,
                                           int32_t* dst) {
  if (row >= p.rows || c >= p.capacity) return false;
  const int32_t* fetch = p.fetch + static_cast<int64_t>(row) * (1 + 2 * p.capacity);
  if (c >= fetch[0]) return false;
  *src = fetch[1 + 2 * c];
  *dst = fetch[2 + 2 * c];
  return *src >= 0 && *src < p.host_pages && *dst >= 0 && *dst < p.slot_pages;
}

// The block's threads copy host page `src`'s token positions into slot page `dst`.
__device__ __forceinline__ void CopyPositions(const PageMapParams& p, int32_t src, int32_t dst) {
  for (int i = threadIdx.x; i < p.page_size; i += blockDim.x) {
    p.slot_pos[static_cast<int64_t>(dst) * p.page_size + i] =
        p.host_pos[static_cast<int64_t>(src) * p.page_size + i];
  }
}

// Block (copy, row): copies one fetched page (K, V and positions) from the host tier.
template <int N>
__global__ void FetchKernel(const __grid_constant__ ParamBatch<PageMapParams, N> b) {
  const PageMapParams& p = b.p[blockIdx.z];
  int32_t src = 0, dst = 0;
  if (!FetchEntry(p, blockIdx.y, blockIdx.x, &src, &dst)) return;
  const int64_t elems = static_cast<int64_t>(p.page_size) * p.head_dim;
  const int64_t words = elems * 2 / 16;  // 16-byte words per page of K (or V)
  const uint4* sk =
      reinterpret_cast<const uint4*>(static_cast<const Bf16*>(p.host_k) + src * elems);
  const uint4* sv =
      reinterpret_cast<const uint4*>(static_cast<const Bf16*>(p.host_v) + src * elems);
  uint4* dk = reinterpret_cast<uint4*>(static_cast<Bf16*>(p.slot_k) + dst * elems);
  uint4* dv = reinterpret_cast<uint4*>(static_cast<Bf16*>(p.slot_v) + dst * elems);
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    dk[i] = sk[i];
    dv[i] = sv[i];
  }
  CopyPositions(p, src, dst);
}

// FetchKernel's work with the TMA's bulk copies (ICECACHE_FETCH_BULK=1), one warp per block:
// its first thread moves the page's K and V from the host tier into shared memory and from
// there to the slot, a page per copy instead of 16 bytes per thread and load; the other threads
// copy the positions.
template <int N>
__global__ void FetchKernelBulk(const __grid_constant__ ParamBatch<PageMapParams, N> b) {
  extern __shared__ __align__(128) unsigned char buf[];  // one page of K, then one of V
  __shared__ __align__(8) uint64_t bar;
  const PageMapParams& p = b.p[blockIdx.z];
  int32_t src = 0, dst = 0;
  if (!FetchEntry(p, blockIdx.y, blockIdx.x, &src, &dst)) return;
  const uint32_t bytes = static_cast<uint32_t>(p.page_size) * p.head_dim * 2;
  if (threadIdx.x == 0) {
    MbarInit(&bar, 1);
    MbarArriveExpect(&bar, 2 * bytes);
    BulkToShared(buf, static_cast<const char*>(p.host_k) + int64_t{src} * bytes, bytes, &bar);
    BulkToShared(buf + bytes, static_cast<const char*>(p.host_v) + int64_t{src} * bytes, bytes,
                 &bar);
  }
  CopyPositions(p, src, dst);
  if (threadIdx.x == 0) {
    MbarWait(&bar, 0);
    BulkToGlobal(static_cast<char*>(p.slot_k) + int64_t{dst} * bytes, buf, bytes);
    BulkToGlobal(static_cast<char*>(p.slot_v) + int64_t{dst} * bytes, buf + bytes, bytes);
    BulkCommit();
    BulkWaitAll();  // the slot written and the buffer read before the block ends
  }
}

bool FetchBulk() {
  static const bool on = EnvSwitch("ICECACHE_FETCH_BULK", false);
  return on;
}

}  // namespace

int LaunchPageBounds(Stream s, const PageBoundsParams& p) {
  if (p.n == 0) return 0;
  if ((p.rows != 1 && p.rows != 2) || p.head_dim > kMaxDim ||
      (p.rows == 1 && p.head_dim % kQ8Block != 0)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  PageBoundsKernel<<<static_cast<unsigned>(p.n), 128, 0, s>>>(p);
  return LastError();
}

// A batch's parameters stay within the classic 4 KB of kernel parameters.
static_assert(sizeof(ParamBatch<PageSelectParams>) <= 4096);
static_assert(sizeof(ParamBatch<PageMapParams>) <= 4096);

namespace {

// One launch of each SelectPages kernel over the entries of `b` (grid: the largest entry's).
template <int N>
int SelectPagesOver(Stream s, const ParamBatch<PageSelectParams, N>& b) {
  int rows = 0, stride = 0, group = 0;
  bool aligned = true, mean = false, minmax = false;
  for (int i = 0; i < b.n; ++i) {
    const PageSelectParams& p = b.p[i];
    if (p.group > kMaxGroup || p.head_dim > kMaxDim || p.head_dim % 32 != 0 ||
        p.head_dim != b.p[0].head_dim) {
      return static_cast<int>(cudaErrorInvalidValue);
    }
    rows = std::max(rows, p.rows);
    stride = std::max(stride, p.stride);
    group = std::max(group, p.group);
    mean = mean || p.bound_rows == 1;
    minmax = minmax || p.bound_rows != 1;
    // bf16 bounds are read as 16-byte words.
    aligned = aligned && (p.bound_rows == 1 || reinterpret_cast<uintptr_t>(p.bounds) % 16 == 0);
  }
  if (rows == 0) return 0;
  const int d = b.p[0].head_dim;
  const unsigned z = static_cast<unsigned>(b.n);
  const unsigned mean_chunks = static_cast<unsigned>((stride + kMeanThreads - 1) / kMeanThreads);
  if (mean && mean_chunks > 0) {
    const dim3 grid(mean_chunks, static_cast<unsigned>(rows), z);
    const size_t smem = MeanSharedFloats(group, d) * sizeof(float);
    if (d == 64) {
      ScoreKernelMean<2, N><<<grid, kMeanThreads, smem, s>>>(b);
    } else if (d == 128) {
      ScoreKernelMean<4, N><<<grid, kMeanThreads, smem, s>>>(b);
    } else if (d == 256) {
      ScoreKernelMean<8, N><<<grid, kMeanThreads, smem, s>>>(b);
    } else {
      ScoreKernelMean<0, N><<<grid, kMeanThreads, smem, s>>>(b);
    }
    const int e = LastError();
    if (e != 0) return e;
  }
  const int per_block = kScoreWarps * kScorePerWarp;
  const unsigned chunks = static_cast<unsigned>((stride + per_block - 1) / per_block);
  if (minmax && chunks > 0) {
    const dim3 grid(chunks, static_cast<unsigned>(rows), z);
    if (aligned && d == 64) {
      ScoreKernelVec<1, N><<<grid, kScoreThreads, 0, s>>>(b);
    } else if (aligned && d == 128) {
      ScoreKernelVec<2, N><<<grid, kScoreThreads, 0, s>>>(b);
    } else if (aligned && d == 256) {
      ScoreKernelVec<4, N><<<grid, kScoreThreads, 0, s>>>(b);
    } else {
      ScoreKernel<N><<<grid, kScoreThreads, 0, s>>>(b);
    }
    const int e = LastError();
    if (e != 0) return e;
  }
  RankKernel<N><<<dim3(static_cast<unsigned>(rows), 1, z), kRankThreads, 0, s>>>(b);
  return LastError();
}

template <int N>
int MapPagesOver(Stream s, const ParamBatch<PageMapParams, N>& b) {
  int rows = 0, capacity = 0;
  size_t smem = 0;
  for (int i = 0; i < b.n; ++i) {
    const PageMapParams& p = b.p[i];
    rows = std::max(rows, p.rows);
    capacity = std::max(capacity, p.capacity);
    smem =
        std::max(smem, (2 * static_cast<size_t>(p.capacity) + 2 * static_cast<size_t>(p.stride)) *
                           sizeof(int));
  }
  if (rows == 0) return 0;
  if (smem > 48 * 1024) return static_cast<int>(cudaErrorInvalidValue);
  const int stage = b.p[0].stage;
  for (int i = 1; i < b.n; ++i) {
    if (b.p[i].stage != stage) return static_cast<int>(cudaErrorInvalidValue);
  }
  const unsigned z = static_cast<unsigned>(b.n);
  if (stage != 2) {
    AssignKernel<N><<<dim3(static_cast<unsigned>(rows), 1, z), kMapThreads, smem, s>>>(b);
    const int e = LastError();
    if (e != 0 || stage == 1) return e;
  }
  const dim3 grid(static_cast<unsigned>(capacity), static_cast<unsigned>(rows), z);
  // Bulk copies need pages of whole 16-byte words that fit shared memory twice (K and V).
  int64_t page_bytes = 0;
  bool words = true;
  for (int i = 0; i < b.n; ++i) {
    const int64_t pb = int64_t{b.p[i].page_size} * b.p[i].head_dim * 2;
    page_bytes = std::max(page_bytes, pb);
    words = words && pb % 16 == 0;
  }
  if (FetchBulk() && words && 2 * page_bytes <= 48 * 1024) {
    FetchKernelBulk<N><<<grid, 32, static_cast<size_t>(2 * page_bytes), s>>>(b);
  } else {
    FetchKernel<N><<<grid, 128, 0, s>>>(b);
  }
  return LastError();
}

}  // namespace

int LaunchSelectPages(Stream s, const PageSelectParams& p) {
  ParamBatch<PageSelectParams, 1> b;
  b.p[0] = p;
  b.n = 1;
  return SelectPagesOver(s, b);
}

int LaunchSelectPagesBatch(Stream s, const ParamBatch<PageSelectParams>& b) {
  return SelectPagesOver(s, b);
}

int LaunchMapPages(Stream s, const PageMapParams& p) {
  ParamBatch<PageMapParams, 1> b;
  b.p[0] = p;
  b.n = 1;
  return MapPagesOver(s, b);
}

int LaunchMapPagesBatch(Stream s, const ParamBatch<PageMapParams>& b) { return MapPagesOver(s, b); }

}  // namespace icecache::kernels
