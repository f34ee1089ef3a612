// Token sampling on the device, one block per logits row: greedy (argmax, ties to the lowest
// id), or temperature with top-k, top-p and min-p in the order of the CPU sampler
// (engine/sampler.cc). The k-th largest logit and the top-p cut are found by radix selection
// over an order-preserving integer key of the scaled logits (four 8-bit digits, a histogram in
// shared memory per digit), so nothing is sorted. Ties at a cut are resolved as the CPU does
// (lower ids first). The draw walks the kept tokens in id order with a block-wide prefix sum:
// the same distribution as the CPU sampler, a different mapping of random numbers to tokens.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"

namespace icecache::kernels {

constexpr int kSampleThreads = 1024;
constexpr int kSampleWarps = kSampleThreads / 32;

// Ascending order of floats as unsigned keys.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float KeyValue(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Exclusive prefix sum over the block (in thread order); *total gets the sum. Uses `scratch`
// (kSampleWarps entries) and ends with a barrier.
template <typename T>
__device__ T BlockExclusiveScan(T v, T* scratch, T* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(~0u, incl, o);
    if (lane >= o) incl += n;
  }
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  T warp_base = 0, sum = 0;
  for (int w = 0; w < kSampleWarps; ++w) {
    if (w < warp) warp_base += scratch[w];
    sum += scratch[w];
  }
  __syncthreads();
  *total = sum;
  return warp_base + incl - v;
}

struct SampleShared {
  unsigned hist[256];
  float mass[256];
  float fscratch[kSampleWarps];
  unsigned uscratch[kSampleWarps];
  unsigned long long best;
  uint32_t prefix;
  unsigned remaining;
  float remaining_mass;
  unsigned eq_count;
};

__device__ __forceinline__ uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void __launch_bounds__(kSampleThreads, 1)
    SampleKernel(const float* logits, int64_t vocab, const SampleRow* params, int32_t* out) {
  __shared__ SampleShared sh;
  const int64_t row = blockIdx.x;
  const float* x = logits + row * vocab;
  const SampleRow pr = params[row];
  const int tid = threadIdx.x;

  // Greedy: the largest logit, lowest id on ties (NaN never wins).
  if (pr.temperature <= 0.0f) {
    if (tid == 0) sh.best = 0;
    __syncthreads();
    unsigned long long best = 0;
    for (int64_t i = tid; i < vocab; i += kSampleThreads) {
      const float v = x[i];
      if (v != v) continue;
      const unsigned long long k = (static_cast<unsigned long long>(OrderKey(v)) << 32) |
                                   (0xffffffffu - static_cast<uint32_t>(i));
      best = k > best ? k : best;
    }
    atomicMax(&sh.best, best);
    __syncthreads();
    if (tid == 0) {
      out[row] =
          sh.best == 0 ? 0 : static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(sh.best));
    }
    return;
  }

  const float inv_t = 1.0f / pr.temperature;
  auto finite = [](float v) { return isfinite(v); };

  // Maximum scaled logit and the number of candidates.
  float zmax = kNegInf;
  unsigned n_fin = 0;
  for (int64_t i = tid; i < vocab; i += kSampleThreads) {
    const float v = x[i];
    if (!finite(v)) continue;
    zmax = fmaxf(zmax, v * inv_t);
    ++n_fin;
  }
  zmax = WarpMax(zmax);
  if (tid % 32 == 0) sh.fscratch[tid / 32] = zmax;
  __syncthreads();
  zmax = kNegInf;
  for (int w = 0; w < kSampleWarps; ++w) zmax = fmaxf(zmax, sh.fscratch[w]);
  unsigned total_fin;
  BlockExclusiveScan<unsigned>(n_fin, sh.uscratch, &total_fin);
  if (total_fin == 0) {
    if (tid == 0) out[row] = 0;
    return;
  }

  // ---- top-k: key of the k-th largest, and how many of its ties are kept ----
  uint32_t key_k = 0;  // keep keys > key_k, and cap_k of the keys == key_k
  unsigned cap_k = 0xffffffffu, n_eq_k = 1;
  if (pr.top_k > 0 && static_cast<unsigned>(pr.top_k) < total_fin) {
    if (tid == 0) {
      sh.prefix = 0;
      sh.remaining = static_cast<unsigned>(pr.top_k);
    }
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kSampleThreads) sh.hist[b] = 0;
      __syncthreads();
      const uint32_t prefix = sh.prefix;
      const uint32_t mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
      for (int64_t i = tid; i < vocab; i += kSampleThreads) {
        const float v = x[i];
        if (!finite(v)) continue;
        const uint32_t k = OrderKey(v * inv_t);
        if ((k & mask) == prefix) atomicAdd(&sh.hist[(k >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        unsigned need = sh.remaining;
        int b = 255;
        for (; b > 0 && sh.hist[b] < need; --b) need -= sh.hist[b];
        sh.remaining = need;
        sh.prefix = prefix | (static_cast<uint32_t>(b) << shift);
        sh.eq_count = sh.hist[b];
      }
      __syncthreads();
    }
    key_k = sh.prefix;
    cap_k = sh.remaining;
    n_eq_k = sh.eq_count;
  }
  const bool has_k = cap_k != 0xffffffffu;
  // Weight of an element in the top-k kept mass (ties at the cut share the kept count).
  auto weight_k = [&](uint32_t k) -> float {
    if (!has_k) return 1.0f;
    if (k > key_k) return 1.0f;
    if (k == key_k) return static_cast<float>(cap_k) / static_cast<float>(n_eq_k);
    return 0.0f;
  };

  // ---- top-p over the top-k survivors ----
  uint32_t key_p = 0;
  unsigned cap_p = 0xffffffffu;
  if (pr.top_p < 1.0f) {
    float z_mass = 0.0f;
    for (int64_t i = tid; i < vocab; i += kSampleThreads) {
      const float v = x[i];
      if (!finite(v)) continue;
      const float z = v * inv_t;
      z_mass += weight_k(OrderKey(z)) * expf(z - zmax);
    }
    z_mass = WarpSum(z_mass);
    if (tid % 32 == 0) sh.fscratch[tid / 32] = z_mass;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < kSampleWarps; ++w) total += sh.fscratch[w];
    __syncthreads();
    if (tid == 0) {
      sh.prefix = 0;
      sh.remaining_mass = pr.top_p * total;
    }
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kSampleThreads) {
        sh.hist[b] = 0;
        sh.mass[b] = 0.0f;
      }
      __syncthreads();
      const uint32_t prefix = sh.prefix;
      const uint32_t mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
      for (int64_t i = tid; i < vocab; i += kSampleThreads) {
        const float v = x[i];
        if (!finite(v)) continue;
        const float z = v * inv_t;
        const uint32_t k = OrderKey(z);
        const float wk = weight_k(k);
        if (wk == 0.0f || (k & mask) != prefix) continue;
        atomicAdd(&sh.mass[(k >> shift) & 255u], wk * expf(z - zmax));
        atomicAdd(&sh.hist[(k >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (tid == 0) {
        float need = sh.remaining_mass;
        int b = 255;
        for (; b > 0; --b) {
          if (sh.hist[b] == 0) continue;
          if (sh.mass[b] >= need) break;
          need -= sh.mass[b];
        }
        while (b > 0 && sh.hist[b] == 0) --b;
        sh.remaining_mass = need;
        sh.prefix = prefix | (static_cast<uint32_t>(b) << shift);
        sh.eq_count = sh.hist[b];
      }
      __syncthreads();
    }
    key_p = sh.prefix;
    // Ties at the cut, in id order, until the mass is reached (at least one).
    const float each = expf(KeyValue(key_p) - zmax);
    const float need = sh.remaining_mass;
    unsigned n = each > 0.0f ? static_cast<unsigned>(ceilf(need / each)) : 1u;
    n = n < 1u ? 1u : n;
    cap_p = n < sh.eq_count ? n : sh.eq_count;
  }

  // The final cut: keys above `cut` are kept, keys equal to it up to `cap` of them (by id).
  uint32_t cut = 0;
  unsigned cap = 0xffffffffu;
  const bool has_p = cap_p != 0xffffffffu;
  if (has_k) {
    cut = key_k;
    cap = cap_k;
  }
  if (has_p) {
    if (!has_k || key_p > key_k) {
      cut = key_p;
      cap = cap_p;
    } else if (key_p == key_k) {
      cap = cap_p < cap_k ? cap_p : cap_k;
    }
  }
  const float min_z = pr.min_p > 0.0f ? zmax + logf(pr.min_p) : kNegInf;

  // Contiguous id ranges per thread, so that tie ranks and the draw follow id order.
  const int64_t per = (vocab + kSampleThreads - 1) / kSampleThreads;
  const int64_t lo = tid * per, hi = lo + per < vocab ? lo + per : vocab;
  unsigned ties = 0;
  if (cap != 0xffffffffu) {
    for (int64_t i = lo; i < hi; ++i) {
      const float v = x[i];
      if (finite(v) && OrderKey(v * inv_t) == cut) ++ties;
    }
  }
  unsigned tie_total;
  unsigned tie_rank = BlockExclusiveScan<unsigned>(ties, sh.uscratch, &tie_total);
  auto kept = [&](float z, unsigned* rank) {
    const uint32_t k = OrderKey(z);
    if (z < min_z) return false;
    if (cap == 0xffffffffu) return true;
    if (k > cut) return true;
    if (k < cut) return false;
    return (*rank)++ < cap;
  };
  float mass = 0.0f;
  {
    unsigned rank = tie_rank;
    for (int64_t i = lo; i < hi; ++i) {
      const float v = x[i];
      if (!finite(v)) continue;
      const float z = v * inv_t;
      if (kept(z, &rank)) mass += expf(z - zmax);
    }
  }
  float mass_total;
  const float mass_base = BlockExclusiveScan<float>(mass, sh.fscratch, &mass_total);
  const uint64_t h = Mix64(pr.seed * 0x9e3779b97f4a7c15ull + pr.step * 0xd1b54a32d192ed03ull +
                           static_cast<uint64_t>(row) + 0x2545f4914f6cdd1dull);
  const float r = static_cast<float>(h >> 40) * (1.0f / 16777216.0f) * mass_total;
  if (tid == 0) sh.best = 0;
  __syncthreads();
  // The thread whose range holds r walks it; every thread also offers its last kept token, so
  // that rounding past the end picks the last kept token overall.
  unsigned long long pick = 0;  // (found << 40) | (id + 1)
  {
    unsigned rank = tie_rank;
    float acc = mass_base;
    const bool mine = r >= mass_base && r < mass_base + mass;
    for (int64_t i = lo; i < hi; ++i) {
      const float v = x[i];
      if (!finite(v)) continue;
      const float z = v * inv_t;
      if (!kept(z, &rank)) continue;
      acc += expf(z - zmax);
      if (mine && r < acc) {
        pick = (1ull << 40) | static_cast<unsigned long long>(i + 1);
        break;
      }
      pick = static_cast<unsigned long long>(i + 1);
    }
    // r inside this range but past its last partial sum by rounding: its last kept token.
    if (mine && pick != 0 && (pick >> 40) == 0) pick |= 1ull << 40;
  }
  // A found pick beats any fallback; among fallbacks the largest id (the last kept token).
  atomicMax(&sh.best, pick);
  __syncthreads();
  if (tid == 0) {
    const unsigned long long b = sh.best & ((1ull << 40) - 1);
    out[row] = b == 0 ? 0 : static_cast<int32_t>(b - 1);
  }
}

}  // namespace icecache::kernels
