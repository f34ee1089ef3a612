// WriteKv on the CPU: copy each (token, KV head) row of K and V into its page slot.
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"
#include "core/check.h"
#include "core/half.h"

namespace icecache::cpu {

namespace {

void StoreRow(DType dtype, const float* src, void* pool, int64_t slot, int64_t d) {
  if (dtype == DType::kF32) {
    std::memcpy(static_cast<float*>(pool) + slot * d, src, static_cast<size_t>(d) * sizeof(float));
    return;
  }
  uint16_t* dst = static_cast<uint16_t*>(pool) + slot * d;
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) StoreF16(dst + i, _mm256_loadu_ps(src + i));
  for (; i < d; ++i) dst[i] = F32ToF16(src[i]);
}

}  // namespace

void WriteKvCpu(const CpuContext& ctx, const KvWriteArgs& args) {
  const KvPoolView& pool = args.pool;
  ICECACHE_CHECK(args.k.dtype() == DType::kF32 && args.v.dtype() == DType::kF32);
  ICECACHE_CHECK(args.slots.dtype() == DType::kI32 && args.positions.dtype() == DType::kI32);
  ICECACHE_CHECK(pool.dtype == DType::kF32 || pool.dtype == DType::kF16);
  const int64_t n = args.k.dim(0);
  const int64_t kv_heads = args.k.dim(1);
  const int64_t d = pool.head_dim;
  const int64_t num_slots = pool.num_pages * pool.page_size;
  const int32_t* slots = args.slots.data_as<const int32_t>();
  const int32_t* pos = args.positions.data_as<const int32_t>();
  const float* k = args.k.data_as<const float>();
  const float* v = args.v.data_as<const float>();
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < kv_heads; ++h) {
      const int64_t slot = slots[t * kv_heads + h];
      ICECACHE_CHECK(slot >= 0 && slot < num_slots);
      const int64_t row = t * kv_heads + h;
      StoreRow(pool.dtype, k + row * d, pool.k, slot, d);
      StoreRow(pool.dtype, v + row * d, pool.v, slot, d);
      pool.positions[slot] = pos[t];
    }
  }
}

}  // namespace icecache::cpu

namespace icecache::cpu {

void CopyPagesCpu(const CpuContext& ctx, const KvPoolView& src, const KvPoolView& dst,
                  const Tensor& src_ids, const Tensor& dst_ids) {
  const int64_t n = src_ids.numel();
  const int32_t* from = src_ids.data_as<const int32_t>();
  const int32_t* to = dst_ids.data_as<const int32_t>();
  const int64_t rows = src.page_size;
  const int64_t row_bytes = RowBytes(src.dtype, src.head_dim);
  const int64_t page_bytes = rows * row_bytes;
  for (int64_t i = 0; i < n; ++i) {
    ICECACHE_CHECK(from[i] >= 0 && from[i] < src.num_pages && to[i] >= 0 && to[i] < dst.num_pages);
  }
  ctx.pool->ParallelFor(n, 8, [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t s = from[i], d = to[i];
      std::memcpy(static_cast<char*>(dst.k) + d * page_bytes,
                  static_cast<const char*>(src.k) + s * page_bytes, page_bytes);
      std::memcpy(static_cast<char*>(dst.v) + d * page_bytes,
                  static_cast<const char*>(src.v) + s * page_bytes, page_bytes);
      std::memcpy(dst.positions + d * rows, src.positions + s * rows, rows * sizeof(int32_t));
    }
  });
}

}  // namespace icecache::cpu
