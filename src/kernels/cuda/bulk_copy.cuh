// Bulk asynchronous copies (sm_90 PTX, the TMA's non-tensor form): global to shared memory
// completing on an mbarrier, shared to global memory in bulk groups. Sizes are multiples of 16
// bytes and addresses 16-byte aligned. Compiled to traps below sm_90 (the build targets sm_90).
#pragma once

#include <cstdint>

#include "kernels/cuda/mma.cuh"

namespace icecache::kernels {

__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(bar)), "r"(count));
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

// One arrival that also expects `bytes` of bulk copies to complete on `bar`.
__device__ __forceinline__ void MbarArriveExpect(uint64_t* bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SmemAddr(bar)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Waits until the barrier's phase of parity `phase` has completed.
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t phase) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(SmemAddr(bar)),
      "r"(phase)
      : "memory");
#else
  __trap();
#endif
}

// `bytes` from global memory (device or mapped host memory) to shared memory, completing on `bar`.
__device__ __forceinline__ void BulkToShared(void* smem, const void* gmem, uint32_t bytes,
                                             uint64_t* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(SmemAddr(smem)),
      "l"(gmem), "r"(bytes), "r"(SmemAddr(bar))
      : "memory");
#else
  __trap();
#endif
}

// `bytes` from shared memory to global memory, in the thread's current bulk group.
__device__ __forceinline__ void BulkToGlobal(void* gmem, const void* smem, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gmem),
               "r"(SmemAddr(smem)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Closes the thread's current bulk group.
__device__ __forceinline__ void BulkCommit() {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  __trap();
#endif
}

// Waits until every committed bulk group of the thread has completed (its writes done, its
// shared memory read).
__device__ __forceinline__ void BulkWaitAll() {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#else
  __trap();
#endif
}

}  // namespace icecache::kernels
