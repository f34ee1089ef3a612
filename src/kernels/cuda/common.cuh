// Device helpers shared by the kernels: bf16 conversions, vector loads, warp reductions.
// No engine includes (kernels see plain pointers and sizes only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace icecache::kernels {

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Eight bf16 values in one 16-byte word.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ void Unpack8(const Bf16x8& v, float* f) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(v.h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ Bf16x8 Pack8(const float* f) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// Loads eight consecutive elements (16-byte aligned for bf16, 32 for f32) as floats.
__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float* f) {
  Unpack8(*reinterpret_cast<const Bf16x8*>(p), f);
}
__device__ __forceinline__ void Load8(const float* p, float* f) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void Store8(__nv_bfloat16* p, const float* f) {
  *reinterpret_cast<Bf16x8*>(p) = Pack8(f);
}
__device__ __forceinline__ void Store8(float* p, const float* f) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

// Programmatic dependent launch (sm_90; LaunchPdl in pdl.cuh): PdlTrigger lets the next kernel
// of the stream start its blocks (once every block of this one has started), and a kernel so
// launched calls PdlWait before it touches memory that the kernel before it writes or reads
// (weights and other constants may be read before). Without a programmatic launch both return
// at once.
__device__ __forceinline__ void PdlTrigger() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void PdlWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// torch's silu: g / (1 + exp(-g)).
__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of `kThreads` threads (a multiple of 32); every thread gets the result.
// `scratch` holds kThreads / 32 floats; the call ends with the scratch free for reuse.
template <int kThreads>
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  v = WarpSum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

}  // namespace icecache::kernels
