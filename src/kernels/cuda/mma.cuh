// Tensor-core and async-copy primitives (sm_80+ PTX): bf16 m16n8k16 MMA with f32 accumulators,
// ldmatrix, cp.async with zero fill.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace icecache::kernels {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared; zero-fills the destination when `valid` is false.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem),
               "r"(src_size));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t* r, const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t* r, const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}

// d += a * b for one m16n8k16 tile (a: 4 regs of bf16x2, b: 2 regs, d: 4 f32).
__device__ __forceinline__ void MmaBf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x (approximate, flush-to-zero; 2^-inf = 0): the softmax exponent.
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem, bool valid) {
  const int src_size = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem),
               "r"(src_size));
}

// Entry and offset of key slot `slot` of a row whose entries hold `ps` slots each (shift >= 0:
// ps is 1 << shift).
__device__ __forceinline__ void SlotEntry(int slot, int ps, int shift, int* entry, int* off) {
  if (shift >= 0) {
    *entry = slot >> shift;
    *off = slot & (ps - 1);
  } else {
    *entry = slot / ps;
    *off = slot - *entry * ps;
  }
}
__device__ __forceinline__ int Pow2Shift(int ps) {
  return (ps & (ps - 1)) == 0 ? __ffs(ps) - 1 : -1;
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// One online-softmax step for the two rows (g and g + 8) of an m16 accumulator tile: `mx` holds
// this lane's maxima of the new scores, reduced here over the lane quad; the running maxima `m`
// move to the new ones and the sums `l` are rescaled. Returns in `m_use` the maxima to subtract
// (0 where a row has seen no finite score) and in `alpha` the factor for the row's output,
// and whether any lane of the warp has a factor other than 1 (an output rescale is needed).
__device__ __forceinline__ bool OnlineSoftmaxStep(float (&mx)[2], float (&m)[2], float (&l)[2],
                                                  float (&m_use)[2], float (&alpha)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(~0u, mx[r], 2));
    const float m_new = fmaxf(m[r], mx[r]);
    m_use[r] = m_new == kNegInf ? 0.0f : m_new;
    alpha[r] = FastExp2(m[r] - m_use[r]);
    m[r] = m_new;
    l[r] *= alpha[r];
  }
  return __any_sync(~0u, alpha[0] != 1.0f || alpha[1] != 1.0f);
}

}  // namespace icecache::kernels
