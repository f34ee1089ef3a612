// Reads K rows of host-tier pages as f32 (converting f16/bf16 pools through scratch).
#pragma once

#include <cstdint>
#include <vector>

#include "core/half.h"
#include "kv/kv_views.h"

namespace icecache {

class KeyReader {
 public:
  explicit KeyReader(const KvPoolView& pool) : pool_(pool) {}
  // The first `n` keys of `page` ([n][head_dim] f32). Valid until the next call.
  const float* Keys(int32_t page, int n) {
    const int64_t d = pool_.head_dim;
    const int64_t offset = static_cast<int64_t>(page) * pool_.page_size * d;
    if (pool_.dtype == DType::kF32) return static_cast<const float*>(pool_.k) + offset;
    scratch_.resize(static_cast<size_t>(n * d));
    const uint16_t* src = static_cast<const uint16_t*>(pool_.k) + offset;
    const bool bf16 = pool_.dtype == DType::kBF16;
    for (int64_t i = 0; i < n * d; ++i) scratch_[i] = bf16 ? Bf16ToF32(src[i]) : F16ToF32(src[i]);
    return scratch_.data();
  }
  const int32_t* Positions(int32_t page) const {
    return pool_.positions + static_cast<int64_t>(page) * pool_.page_size;
  }

 private:
  KvPoolView pool_;
  std::vector<float> scratch_;
};

inline float Dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace icecache
