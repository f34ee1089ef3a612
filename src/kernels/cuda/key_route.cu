// Insertion routes for icecache (Backend::RouteKeys): one block per key. The key (bf16, read from
// the mapped host tier) goes to shared memory; each thread scans entries of the key's list range
// and keeps its nearest mean key, then the block keeps the nearest of those. A distance is the
// CPU reference's sum, operation for operation (backend/cpu/key_route_cpu.cc): per dimension in
// order, x = k - c, s = fma(x, x, s), with c read back from Q8_0 as q * scale. Ties go to the
// lower entry; NaN distances never win.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace icecache::kernels {

namespace {

constexpr int kRouteThreads = 256;
constexpr int kMaxDim = 256;
constexpr int kQ8Block = 32;  // Q8_0: an f16 scale, then 32 int8 values (core/quant.h)
constexpr int kQ8Bytes = 34;

// Whether (d, e) is nearer than (best_d, best_e) (best_e -1: none yet).
__device__ __forceinline__ bool Nearer(float d, int e, float best_d, int best_e) {
  if (isnan(d) || e < 0) return false;
  return best_e < 0 || d < best_d || (d == best_d && e < best_e);
}

__global__ void __launch_bounds__(kRouteThreads) RouteKeysKernel(KeyRouteParams p) {
  __shared__ float key_s[kMaxDim];
  __shared__ float dist_s[kRouteThreads / 32];
  __shared__ int entry_s[kRouteThreads / 32];
  const int64_t i = blockIdx.x;
  const int d = p.head_dim;
  const int64_t slot = p.slots[i];
  const int row = p.ranges[3 * i];
  const int first = max(0, p.ranges[3 * i + 1]), end = min(p.stride, p.ranges[3 * i + 2]);
  // Block-uniform exit (before any barrier): out-of-range input routes nowhere.
  if (slot < 0 || slot >= p.pool_slots || row < 0 || row >= p.rows) {
    if (threadIdx.x == 0) p.out[i] = -1;
    return;
  }
  const __nv_bfloat16* k = static_cast<const __nv_bfloat16*>(p.pool_k) + slot * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) key_s[j] = __bfloat162float(k[j]);
  __syncthreads();
  const int64_t row_bytes = static_cast<int64_t>(d / kQ8Block) * kQ8Bytes;
  const int32_t* rows = p.list_rows + static_cast<int64_t>(row) * p.stride;
  float best_d = 0.0f;
  int best_e = -1;
  for (int e = first + threadIdx.x; e < end; e += blockDim.x) {
    const int32_t s = rows[e];
    if (s < 0 || s >= p.summaries) continue;
    const char* c = static_cast<const char*>(p.bounds) + s * row_bytes;
    float dist = 0.0f;
    for (int b = 0; b < d / kQ8Block; ++b) {
      const char* block = c + b * kQ8Bytes;
      const float scale = __half2float(*reinterpret_cast<const __half*>(block));
      for (int t = 0; t < kQ8Block; ++t) {
        const float m = __fmul_rn(static_cast<float>(static_cast<int8_t>(block[2 + t])), scale);
        const float x = __fsub_rn(key_s[b * kQ8Block + t], m);
        dist = __fmaf_rn(x, x, dist);
      }
    }
    if (Nearer(dist, e, best_d, best_e)) {
      best_d = dist;
      best_e = e;
    }
  }
  // The nearest of the warp, then of the block.
  for (int off = 16; off > 0; off /= 2) {
    const float od = __shfl_down_sync(0xffffffffu, best_d, off);
    const int oe = __shfl_down_sync(0xffffffffu, best_e, off);
    if (Nearer(od, oe, best_d, best_e)) {
      best_d = od;
      best_e = oe;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    dist_s[warp] = best_d;
    entry_s[warp] = best_e;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bd = 0.0f;
    int be = -1;
    for (int w = 0; w < kRouteThreads / 32; ++w) {
      if (Nearer(dist_s[w], entry_s[w], bd, be)) {
        bd = dist_s[w];
        be = entry_s[w];
      }
    }
    p.out[i] = be;
  }
}

}  // namespace

int LaunchRouteKeys(Stream s, const KeyRouteParams& p) {
  if (p.n == 0) return 0;
  if (p.head_dim > kMaxDim || p.head_dim % kQ8Block != 0) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  RouteKeysKernel<<<static_cast<unsigned>(p.n), kRouteThreads, 0, s>>>(p);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace icecache::kernels
