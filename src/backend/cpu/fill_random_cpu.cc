// FillRandom on the CPU: the counter-based sequence of RandomUnit, one f32 rounding (and one
// bf16 rounding for bf16 tensors), the same values as every other backend.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "core/check.h"
#include "core/half.h"

namespace icecache::cpu {

void FillRandomCpu(const CpuContext& ctx, const Tensor& t, uint64_t seed, float scale,
                   float offset) {
  ICECACHE_CHECK(t.device() == Device::kCpu);
  const int64_t n = t.numel();
  constexpr int64_t kUnit = 1 << 16;
  const int64_t units = (n + kUnit - 1) / kUnit;
  const bool bf16 = t.dtype() == DType::kBF16;
  ParallelUnits(*ctx.pool, units, [&](int, int64_t u) {
    const int64_t end = std::min(n, (u + 1) * kUnit);
    for (int64_t i = u * kUnit; i < end; ++i) {
      const float v = std::fma(scale, RandomUnit(seed, static_cast<uint64_t>(i)), offset);
      if (bf16) {
        t.data_as<uint16_t>()[i] = F32ToBf16(v);
      } else {
        t.data_as<float>()[i] = v;
      }
    }
  });
}

}  // namespace icecache::cpu
