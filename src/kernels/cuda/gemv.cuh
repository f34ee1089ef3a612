// Small-batch GEMV for decode: y[n, m] = x[n, k] w[m, k]^T (+ bias), bf16 x and w, f32
// accumulation. Memory-bound on the weights, so the layout is chosen for bandwidth: each warp
// owns kRows weight rows and a slice of k, streams them with 16-byte loads (several in flight
// per lane), and reuses each 16-byte chunk of x across its rows. When m is small the k dimension
// is split over the warps of a block (kSplit) so that enough loads are in flight; partial sums
// meet in shared memory.
//
// Two fused forms read a stacked weight once: split outputs (w = [w0; w1; w2], each row block
// written to its own tensor: the q/k/v projections in one launch) and the SwiGLU input
// (w = [w_gate; w_up]: each warp takes the same output rows of both halves and writes
// silu(gate) * up from the f32 sums).
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace icecache::kernels {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kGemvRowsPerWarp = 4;
constexpr int kGemvUnroll = 2;

// Where the rows of a GEMV go: up to three consecutive row blocks, each to its own [n, width]
// output (one block: a plain GEMV). With kGlu, width[0] = m / 2 outputs of silu(gate) * up.
struct GemvOut {
  void* y[3] = {nullptr, nullptr, nullptr};
  int64_t width[3] = {0, 0, 0};  // rows of w in each block (0: unused)
};

// The weight row of a warp's j-th row: consecutive rows, or with kGlu gate rows o0, o0 + 1 and
// the up rows m_out further (-1: past the end).
template <bool kGlu>
__device__ __forceinline__ int64_t GemvRow(int64_t first, int j, int64_t m) {
  if (!kGlu) return first + j < m ? first + j : -1;
  constexpr int kHalf = kGemvRowsPerWarp / 2;
  const int64_t out = first + j % kHalf;
  return out < m ? out + (j / kHalf) * m : -1;
}

// kN: batch rows (1..4); kSplit: warps sharing one row group (1, 2, 4 or 8); m: rows of w
// (with kGlu, outputs: w has 2 m rows).
template <int kN, int kSplit, bool kGlu, typename Tout>
__global__ void __launch_bounds__(kGemvThreads)
    GemvKernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
               const float* __restrict__ bias, GemvOut out, int64_t m, int64_t k) {
  constexpr int kGroups = kGemvWarps / kSplit;  // row groups per block
  constexpr int kOutPerWarp = kGlu ? kGemvRowsPerWarp / 2 : kGemvRowsPerWarp;
  __shared__ float partial[kGemvWarps][kN][kGemvRowsPerWarp];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / kSplit, part = warp % kSplit;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kGroups + group) * kOutPerWarp;
  const int64_t chunks = k / 8;
  const int64_t c_begin = chunks * part / kSplit;
  const int64_t c_end = chunks * (part + 1) / kSplit;

  float acc[kN][kGemvRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kN; ++r) {
#pragma unroll
    for (int j = 0; j < kGemvRowsPerWarp; ++j) acc[r][j] = 0.0f;
  }
  const Bf16x8* wv = reinterpret_cast<const Bf16x8*>(w);
  const Bf16x8* xv = reinterpret_cast<const Bf16x8*>(x);
  // The weights of chunk group c0 (constants: read before waiting on the kernel before).
  Bf16x8 wr[kGemvUnroll][kGemvRowsPerWarp];
  auto load_weights = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const int64_t c = c0 + u * 32;
#pragma unroll
      for (int j = 0; j < kGemvRowsPerWarp; ++j) {
        const int64_t row = GemvRow<kGlu>(row0, j, m);
        if (c < c_end && row >= 0) {
          // Weights are read once per step: stream them past the caches.
          const uint4 t = __ldcs(reinterpret_cast<const uint4*>(wv + row * chunks + c));
          wr[u][j] = *reinterpret_cast<const Bf16x8*>(&t);
        } else {
          wr[u][j] = Bf16x8{};
        }
      }
    }
  };
  PdlTrigger();
  load_weights(c_begin + lane);
  PdlWait();  // x comes from the kernel before
  for (int64_t c0 = c_begin + lane; c0 < c_end; c0 += 32 * kGemvUnroll) {
    Bf16x8 xr[kGemvUnroll][kN];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const int64_t c = c0 + u * 32;
      const bool ok = c < c_end;
#pragma unroll
      for (int r = 0; r < kN; ++r) xr[u][r] = ok ? xv[r * chunks + c] : Bf16x8{};
    }
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
#pragma unroll
      for (int r = 0; r < kN; ++r) {
        float xf[8];
        Unpack8(xr[u][r], xf);
#pragma unroll
        for (int j = 0; j < kGemvRowsPerWarp; ++j) {
          float wf[8];
          Unpack8(wr[u][j], wf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][j] = fmaf(xf[e], wf[e], acc[r][j]);
        }
      }
    }
    if (c0 + 32 * kGemvUnroll < c_end) load_weights(c0 + 32 * kGemvUnroll);
  }
#pragma unroll
  for (int r = 0; r < kN; ++r) {
#pragma unroll
    for (int j = 0; j < kGemvRowsPerWarp; ++j) acc[r][j] = WarpSum(acc[r][j]);
  }
  if (kSplit > 1) {
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kN; ++r) {
#pragma unroll
        for (int j = 0; j < kGemvRowsPerWarp; ++j) partial[warp][r][j] = acc[r][j];
      }
    }
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < kN; ++r) {
#pragma unroll
      for (int j = 0; j < kGemvRowsPerWarp; ++j) {
        float s = 0.0f;
#pragma unroll
        for (int p = 0; p < kSplit; ++p) s += partial[warp + p][r][j];
        acc[r][j] = s;
      }
    }
  }
  // Lanes 0..kN*kOutPerWarp-1 write one output each.
#pragma unroll
  for (int r = 0; r < kN; ++r) {
#pragma unroll
    for (int j = 0; j < kOutPerWarp; ++j) {
      const int64_t row = row0 + j;
      if (lane != r * kOutPerWarp + j || row >= m) continue;
      if (kGlu) {
        static_cast<Tout*>(out.y[0])[r * m + row] =
            FromFloat<Tout>(Silu(acc[r][j]) * acc[r][j + kOutPerWarp]);
        continue;
      }
      const float v = acc[r][j] + (bias != nullptr ? bias[row] : 0.0f);
      int b = 0;
      int64_t local = row;
      while (b < 2 && local >= out.width[b]) local -= out.width[b++];
      static_cast<Tout*>(out.y[b])[r * out.width[b] + local] = FromFloat<Tout>(v);
    }
  }
}

}  // namespace icecache::kernels
