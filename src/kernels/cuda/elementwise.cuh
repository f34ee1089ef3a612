// Element-wise and row-wise kernels: embedding gather, RMSNorm (optionally fused with the
// residual add), add, SwiGLU, RoPE (optionally fused with the K/V page write), page copies,
// seeded random fill, int32 scatter. Math in f32; one rounding to the output type.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace icecache::kernels {

constexpr int kRowThreads = 256;

// out[i, :] = table[ids[i], :]; rows with an out-of-range id become zeros.
template <typename Tin, typename Tout>
__global__ void EmbedKernel(const Tin* table, int64_t vocab, const int32_t* ids, int64_t cols,
                            Tout* out) {
  const int64_t r = blockIdx.x;
  const int32_t id = ids[r];
  const bool ok = id >= 0 && id < vocab;
  const Tin* src = table + static_cast<int64_t>(ok ? id : 0) * cols;
  Tout* dst = out + r * cols;
  if (cols % 8 == 0) {
    for (int64_t c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
      float f[8];
      if (ok) {
        Load8(src + c, f);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) f[i] = 0.0f;
      }
      Store8(dst + c, f);
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      dst[c] = FromFloat<Tout>(ok ? ToFloat(src[c]) : 0.0f);
    }
  }
}

constexpr int kRowVecs = 4;  // rows up to kRowThreads * 8 * kRowVecs elements stay in registers

template <typename T>
__device__ __forceinline__ float RoundTo(float v) {
  return ToFloat(FromFloat<T>(v));
}

// One block per row. Hugging Face LlamaRMSNorm order: h = x * (1 / sqrt(mean(x^2) + eps)),
// out = w * h. Rows of a multiple of 8 elements (up to 8192) are read once, 16 bytes at a time,
// and kept in registers; others take a plain two-pass loop. `out` may alias `x` (every thread
// reads only the elements it alone writes).
template <typename Tin, typename Tout>
__global__ void __launch_bounds__(kRowThreads)
    RmsNormKernel(const Tin* x, const float* w, float eps, int64_t cols, Tout* out) {
  __shared__ float scratch[kRowThreads / 32];
  const int64_t r = blockIdx.x;
  const Tin* xr = x + r * cols;
  Tout* orow = out + r * cols;
  if (cols % 8 == 0 && cols <= int64_t{kRowThreads} * 8 * kRowVecs) {
    float v[kRowVecs][8];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
      const int64_t c = (threadIdx.x + int64_t{k} * kRowThreads) * 8;
      if (c < cols) {
        Load8(xr + c, v[k]);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss = fmaf(v[k][e], v[k][e], ss);
      }
    }
    ss = BlockSum<kRowThreads>(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
      const int64_t c = (threadIdx.x + int64_t{k} * kRowThreads) * 8;
      if (c < cols) {
        float wf[8], o[8];
        Load8(w + c, wf);
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = wf[e] * (v[k][e] * inv);
        Store8(orow + c, o);
      }
    }
    return;
  }
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    const float v = ToFloat(xr[c]);
    ss = fmaf(v, v, ss);
  }
  ss = BlockSum<kRowThreads>(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    orow[c] = FromFloat<Tout>(w[c] * (ToFloat(xr[c]) * inv));
  }
}

// inout[r] += a[r]; out[r] = RmsNorm(inout[r]) * w. The norm reads the rounded sum (what the
// unfused Add + RmsNorm would read). `out` may alias `a`: each thread reads a[c] before it
// writes out[c], and no other thread touches column c.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    AddRmsNormKernel(const T* a, T* inout, const float* w, float eps, int64_t cols, T* out) {
  __shared__ float scratch[kRowThreads / 32];
  PdlTrigger();
  const int64_t r = blockIdx.x;
  const T* ar = a + r * cols;
  T* xr = inout + r * cols;
  T* orow = out + r * cols;
  if (cols % 8 == 0 && cols <= int64_t{kRowThreads} * 8 * kRowVecs) {
    // The norm's weights are constants: read them before waiting on the kernel before.
    float wf[kRowVecs][8];
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
      const int64_t c = (threadIdx.x + int64_t{k} * kRowThreads) * 8;
      if (c < cols) Load8(w + c, wf[k]);
    }
    PdlWait();
    float v[kRowVecs][8];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
      const int64_t c = (threadIdx.x + int64_t{k} * kRowThreads) * 8;
      if (c < cols) {
        float av[8];
        Load8(xr + c, v[k]);
        Load8(ar + c, av);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          v[k][e] = RoundTo<T>(v[k][e] + av[e]);
          ss = fmaf(v[k][e], v[k][e], ss);
        }
        Store8(xr + c, v[k]);
      }
    }
    ss = BlockSum<kRowThreads>(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
#pragma unroll
    for (int k = 0; k < kRowVecs; ++k) {
      const int64_t c = (threadIdx.x + int64_t{k} * kRowThreads) * 8;
      if (c < cols) {
        float o[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] = wf[k][e] * (v[k][e] * inv);
        Store8(orow + c, o);
      }
    }
    return;
  }
  PdlWait();
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    const T sum = FromFloat<T>(ToFloat(xr[c]) + ToFloat(ar[c]));
    xr[c] = sum;
    const float v = ToFloat(sum);
    ss = fmaf(v, v, ss);
  }
  ss = BlockSum<kRowThreads>(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    orow[c] = FromFloat<T>(w[c] * (ToFloat(xr[c]) * inv));
  }
}

template <typename T>
__global__ void AddKernel(const T* a, T* inout, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    inout[i] = FromFloat<T>(ToFloat(inout[i]) + ToFloat(a[i]));
  }
}

// torch's silu: g / (1 + exp(-g)), times up.
template <typename T>
__global__ void SwiGluKernel(const T* gate, const T* up, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<T>(Silu(ToFloat(gate[i])) * ToFloat(up[i]));
  }
}

template <typename T>
__global__ void AddBiasKernel(T* y, const float* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = FromFloat<T>(ToFloat(y[i]) + bias[i % cols]);
  }
}

// The rotate-half RoPE of one pair, as the CPU reference computes it: products rounded
// before the sum (no FMA contraction).
__device__ __forceinline__ void RotatePair(float x0, float x1, float c, float s, float* r0,
                                           float* r1) {
  *r0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  *r1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// One block per token: rotates all heads of x in place.
template <typename T>
__global__ void RopeKernel(const int32_t* positions, const float* inv_freq, T* x, int64_t heads,
                           int64_t head_dim) {
  extern __shared__ float cs[];  // [half] cos, then [half] sin
  const int64_t t = blockIdx.x;
  const int64_t half = head_dim / 2;
  const float p = static_cast<float>(positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    sincosf(p * inv_freq[i], &cs[half + i], &cs[i]);
  }
  __syncthreads();
  T* xt = x + t * heads * head_dim;
  for (int64_t j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int64_t h = j / half, i = j % half;
    T* a = xt + h * head_dim + i;
    float r0, r1;
    RotatePair(ToFloat(a[0]), ToFloat(a[half]), cs[i], cs[half + i], &r0, &r1);
    a[0] = FromFloat<T>(r0);
    a[half] = FromFloat<T>(r1);
  }
}

struct KvWriteArgsDevice {
  const void* k;
  const void* v;
  const int32_t* slots;
  const int32_t* positions;
  int64_t kv_heads;
  int64_t head_dim;
  __nv_bfloat16* pool_k;
  __nv_bfloat16* pool_v;
  int32_t* pool_pos;
  int64_t num_slots;
};

// Blocks (token, part): optionally rotates q and k (in place), then stores the token's K and V
// rows into their page slots (bf16) and the token's position into each slot. The gridDim.y parts
// of a token share its rotary pairs (each part computes the angles itself), so a decode step's
// single token is spread over several SMs instead of one block's long serial loop.
template <typename T, bool kRope>
__global__ void RopeWriteKvKernel(const float* inv_freq, T* q, int64_t q_heads,
                                  KvWriteArgsDevice a) {
  extern __shared__ float cs[];
  PdlTrigger();
  PdlWait();
  const int64_t t = blockIdx.x;
  const int d = static_cast<int>(a.head_dim);
  const int half = d / 2;
  const int first = blockIdx.y * blockDim.x + threadIdx.x;
  const int step = gridDim.y * blockDim.x;
  T* k = const_cast<T*>(static_cast<const T*>(a.k)) + t * a.kv_heads * d;
  const T* v = static_cast<const T*>(a.v) + t * a.kv_heads * d;
  if constexpr (kRope) {
    const float p = static_cast<float>(a.positions[t]);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      sincosf(p * inv_freq[i], &cs[half + i], &cs[i]);
    }
    __syncthreads();
    T* qt = q + t * q_heads * d;
    const int q_pairs = static_cast<int>(q_heads) * half;
    for (int j = first; j < q_pairs; j += step) {
      const int h = j / half, i = j % half;
      T* e = qt + h * d + i;
      float r0, r1;
      RotatePair(ToFloat(e[0]), ToFloat(e[half]), cs[i], cs[half + i], &r0, &r1);
      e[0] = FromFloat<T>(r0);
      e[half] = FromFloat<T>(r1);
    }
  }
  const int kv_pairs = static_cast<int>(a.kv_heads) * half;
  for (int j = first; j < kv_pairs; j += step) {
    const int h = j / half, i = j % half;
    T* e = k + h * d + i;
    float k0 = ToFloat(e[0]), k1 = ToFloat(e[half]);
    if constexpr (kRope) {
      float r0, r1;
      RotatePair(k0, k1, cs[i], cs[half + i], &r0, &r1);
      e[0] = FromFloat<T>(r0);
      e[half] = FromFloat<T>(r1);
      k0 = r0;
      k1 = r1;
    }
    const int64_t slot = a.slots[t * a.kv_heads + h];
    if (slot < 0 || slot >= a.num_slots) continue;
    a.pool_k[slot * d + i] = __float2bfloat16_rn(k0);
    a.pool_k[slot * d + i + half] = __float2bfloat16_rn(k1);
    a.pool_v[slot * d + i] = __float2bfloat16_rn(ToFloat(v[h * d + i]));
    a.pool_v[slot * d + i + half] = __float2bfloat16_rn(ToFloat(v[h * d + i + half]));
    if (i == 0) a.pool_pos[slot] = a.positions[t];
  }
}

// One block per page pair; 16-byte words when the page size allows.
__global__ void CopyPagesKernel(const __nv_bfloat16* src_k, const __nv_bfloat16* src_v,
                                const int32_t* src_pos, int64_t src_pages, __nv_bfloat16* dst_k,
                                __nv_bfloat16* dst_v, int32_t* dst_pos, int64_t dst_pages,
                                const int32_t* src_ids, const int32_t* dst_ids, int64_t page_size,
                                int64_t head_dim) {
  const int64_t s = src_ids[blockIdx.x], d = dst_ids[blockIdx.x];
  if (s < 0 || s >= src_pages || d < 0 || d >= dst_pages) return;
  const int64_t elems = page_size * head_dim;
  if (elems % 8 == 0) {
    const uint4* sk = reinterpret_cast<const uint4*>(src_k + s * elems);
    const uint4* sv = reinterpret_cast<const uint4*>(src_v + s * elems);
    uint4* dk = reinterpret_cast<uint4*>(dst_k + d * elems);
    uint4* dv = reinterpret_cast<uint4*>(dst_v + d * elems);
    for (int64_t i = threadIdx.x; i < elems / 8; i += blockDim.x) {
      dk[i] = sk[i];
      dv[i] = sv[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < elems; i += blockDim.x) {
      dst_k[d * elems + i] = src_k[s * elems + i];
      dst_v[d * elems + i] = src_v[s * elems + i];
    }
  }
  for (int64_t i = threadIdx.x; i < page_size; i += blockDim.x) {
    dst_pos[d * page_size + i] = src_pos[s * page_size + i];
  }
}

// Keep in step with RandomUnit in backend/backend.h (the same sequence on every backend).
__device__ __forceinline__ float DeviceRandomUnit(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<int64_t>(z >> 40) - (int64_t{1} << 23)) *
         (1.0f / 8388608.0f);
}

__global__ void ScatterI32Kernel(const int32_t* index, const int32_t* values, int64_t n,
                                 int32_t* dst, int64_t dst_n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t p = index[i];
    if (p >= 0 && p < dst_n) dst[p] = values[i];
  }
}

template <typename T>
__global__ void FillRandomKernel(T* t, int64_t n, uint64_t seed, float scale, float offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    t[i] = FromFloat<T>(fmaf(scale, DeviceRandomUnit(seed, static_cast<uint64_t>(i)), offset));
  }
}

}  // namespace icecache::kernels
