// Helpers of the CUDA backend tests: a GPU backend or a skip, host <-> device tensors in f32 or
// bf16, bf16-exact random data, and error measures against the CPU backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_test_util.h"
#include "core/half.h"

namespace icecache::testing {

// The CUDA backend, or null with the reason (no CUDA build, no GPU).
inline std::unique_ptr<Backend> TryCudaBackend(std::string* why) {
  auto b = MakeCudaBackend({});
  if (!b.ok()) {
    *why = b.status().message();
    return nullptr;
  }
  return std::move(b).value();
}

#define ICECACHE_CUDA_OR_SKIP(var)                                                            \
  std::string var##_why;                                                                      \
  std::unique_ptr<::icecache::Backend> var = ::icecache::testing::TryCudaBackend(&var##_why); \
  if (var == nullptr) GTEST_SKIP() << "no CUDA backend here: " << var##_why

// Values rounded to bf16 (so that the f32 CPU reference sees exactly the GPU's inputs).
inline std::vector<float> Bf16Exact(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                    float hi = 1.0f) {
  std::vector<float> v = RandomVector(rng, n, lo, hi);
  for (float& x : v) x = Bf16ToF32(F32ToBf16(x));
  return v;
}

// A device tensor of `dtype` (f32 or bf16) holding `values`.
inline Tensor ToDevice(Backend& b, const std::vector<float>& values, DType dtype,
                       std::initializer_list<int64_t> shape) {
  auto t = b.Allocate(dtype, shape);
  EXPECT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(static_cast<int64_t>(values.size()), t->numel());
  Tensor host = HostTensor(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      host.data_as<float>()[i] = values[i];
    } else {
      host.data_as<uint16_t>()[i] = F32ToBf16(values[i]);
    }
  }
  EXPECT_TRUE(b.Copy(host, *t).ok());
  return *t;
}

inline Tensor I32ToDevice(Backend& b, const std::vector<int32_t>& values,
                          std::initializer_list<int64_t> shape) {
  auto t = b.Allocate(DType::kI32, shape);
  EXPECT_TRUE(t.ok()) << t.status().message();
  Tensor host = I32Tensor(values, shape);
  EXPECT_TRUE(b.Copy(host, *t).ok());
  return *t;
}

// The contents of a device (or host) tensor of f32 or bf16 as floats.
inline std::vector<float> ToHostF32(Backend& b, const Tensor& t) {
  Tensor host = HostTensor(t.dtype(), {t.numel()});
  EXPECT_TRUE(b.Copy(t.Reshape({t.numel()}), host).ok());
  b.Synchronize();
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = t.dtype() == DType::kF32 ? host.data_as<float>()[i]
                                      : Bf16ToF32(host.data_as<uint16_t>()[i]);
  }
  return out;
}

inline std::vector<int32_t> I32ToHost(Backend& b, const Tensor& t) {
  Tensor host = HostTensor(DType::kI32, {t.numel()});
  EXPECT_TRUE(b.Copy(t.Reshape({t.numel()}), host).ok());
  b.Synchronize();
  const int32_t* p = host.data_as<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// max |got - want| / max |want| with want in f32.
inline double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  std::vector<double> w(want.begin(), want.end());
  return MaxRelativeError(got, w);
}

// Per-dtype tolerance of one output rounding plus f32 accumulation-order differences, relative
// to the largest magnitude.
inline double Tolerance(DType out) { return out == DType::kBF16 ? 1e-2 : 1e-4; }

}  // namespace icecache::testing
