// Helpers of the backend tests: fresh random inputs (seed printed on failure, fixed with
// ICECACHE_TEST_SEED=<n>), host tensors and float64 error measures.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace icecache::testing {

// A seed from ICECACHE_TEST_SEED or std::random_device.
inline uint32_t FreshSeed() {
  if (const char* s = std::getenv("ICECACHE_TEST_SEED"))
    return static_cast<uint32_t>(std::atoll(s));
  return std::random_device{}();
}

// Declares `rng`, seeded freshly, and traces the seed so a failure can be replayed.
#define ICECACHE_TEST_RNG(rng)                                      \
  const uint32_t rng##_seed = ::icecache::testing::FreshSeed();     \
  SCOPED_TRACE("ICECACHE_TEST_SEED=" + std::to_string(rng##_seed)); \
  std::mt19937 rng(rng##_seed)

inline std::vector<float> RandomVector(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline Tensor HostTensor(DType dtype, std::initializer_list<int64_t> shape) {
  auto t = Tensor::Host(dtype, shape);
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

inline Tensor F32Tensor(const std::vector<float>& values, std::initializer_list<int64_t> shape) {
  Tensor t = HostTensor(DType::kF32, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  std::copy(values.begin(), values.end(), t.data_as<float>());
  return t;
}

inline Tensor I32Tensor(const std::vector<int32_t>& values, std::initializer_list<int64_t> shape) {
  Tensor t = HostTensor(DType::kI32, shape);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

inline std::vector<float> ToVector(const Tensor& t) {
  const float* p = t.data_as<const float>();
  return std::vector<float>(p, p + t.numel());
}

// "1.23e-07": errors recorded as test properties.
inline std::string Sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

// max_i |got[i] - want[i]| / max_i |want[i]| (0 when both are all zero).
inline double MaxRelativeError(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0;
  double scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale == 0.0 ? err : err / scale;
}

}  // namespace icecache::testing
