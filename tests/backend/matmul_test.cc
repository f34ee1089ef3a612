// MatMul and the weight-row kernels of the CPU backend against float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/quant_dot.h"
#include "backend_test_util.h"
#include "core/quant.h"

namespace icecache {
namespace {

using testing::F32Tensor;
using testing::RandomVector;

constexpr DType kAllWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,
                                     DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                                     DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// A quantized [m, k] weight and its exact dequantized values (DequantizeRow).
struct QuantWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> deq;
};

QuantWeight MakeWeight(std::mt19937& rng, DType type, int64_t m, int64_t k, size_t offset = 0) {
  const std::vector<float> w = RandomVector(rng, m * k);
  const int64_t rb = RowBytes(type, k);
  QuantWeight q;
  q.bytes.assign(offset + static_cast<size_t>(m * rb), 0);
  q.deq.resize(static_cast<size_t>(m * k));
  for (int64_t j = 0; j < m; ++j) {
    QuantizeRow(type, w.data() + j * k, q.bytes.data() + offset + j * rb, k);
    DequantizeRow(type, q.bytes.data() + offset + j * rb, q.deq.data() + j * k, k);
  }
  return q;
}

// Block-aligned inner sizes to test for a weight type (odd ones where the type allows).
std::vector<int64_t> InnerSizes(DType type) {
  switch (BlockElems(type)) {
    case 1:
      return {1, 7, 33, 64, 200, 576};
    case 32:
      return {32, 96, 576};
    default:
      return {256, 768};
  }
}

TEST(CpuWeightKernelsTest, DequantizeRowsMatchesReferenceExactly) {
  ICECACHE_TEST_RNG(rng);
  for (DType type : kAllWeightTypes) {
    for (int64_t k : InnerSizes(type)) {
      for (size_t offset : {0, 1, 3}) {  // rows at odd byte offsets (GGUF alignment 1)
        SCOPED_TRACE(std::string(DTypeName(type)) + " k=" + std::to_string(k) +
                     " offset=" + std::to_string(offset));
        const int64_t m = 5;
        QuantWeight q = MakeWeight(rng, type, m, k, offset);
        std::vector<float> got(static_cast<size_t>(3 * k));
        cpu::DequantizeRows(type, q.bytes.data() + offset, k, 1, 4, got.data());
        // Same values (Q4_0 may give +0 where the reference gives -0: 0 * negative scale).
        for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], q.deq[k + i]) << "element " << i;
      }
    }
  }
}

// Worst error seen per weight type, recorded as test properties (see --gtest_output=xml).
std::map<std::string, double>& WorstErrors() {
  static std::map<std::string, double> worst;
  return worst;
}

void RecordWorstErrors() {
  for (const auto& [name, err] : WorstErrors()) {
    ::testing::Test::RecordProperty("max_rel_err_" + name, testing::Sci(err));
  }
}

// y = x w^T + bias in float64 from the dequantized weights; compares with the error measured
// against sum_k |x w| (the scale of f32 rounding in a dot product).
void CheckMatMul(Backend& backend, std::mt19937& rng, DType type, int64_t n, int64_t m, int64_t k,
                 bool with_bias, double tol) {
  SCOPED_TRACE(std::string(DTypeName(type)) + " n=" + std::to_string(n) +
               " m=" + std::to_string(m) + " k=" + std::to_string(k) + (with_bias ? " bias" : ""));
  QuantWeight q = MakeWeight(rng, type, m, k);
  Tensor w(q.bytes.data(), type, {m, k});
  auto prepared = backend.PrepareWeight(w);
  ASSERT_TRUE(prepared.ok());
  EXPECT_EQ(prepared.value().data(), w.data()) << "supported weights are borrowed, not copied";
  const std::vector<float> xs = RandomVector(rng, n * k);
  const std::vector<float> bs = RandomVector(rng, m);
  Tensor x = F32Tensor(xs, {n, k});
  Tensor bias = F32Tensor(bs, {m});
  Tensor y = testing::HostTensor(DType::kF32, {n, m});
  std::fill(y.data_as<float>(), y.data_as<float>() + n * m, std::nanf(""));  // overwritten
  backend.MatMul(x, prepared.value(), with_bias ? &bias : nullptr, y);
  const float* yp = y.data_as<const float>();
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double ref = with_bias ? bs[j] : 0.0;
      double mag = std::abs(ref);
      for (int64_t t = 0; t < k; ++t) {
        const double p = static_cast<double>(xs[i * k + t]) * q.deq[j * k + t];
        ref += p;
        mag += std::abs(p);
      }
      const double err = std::abs(yp[i * m + j] - ref) / std::max(mag, 1e-30);
      worst = std::max(worst, err);
      ASSERT_LE(err, tol) << "y[" << i << ", " << j << "] = " << yp[i * m + j] << " want " << ref;
    }
  }
  const std::string key = std::string(DTypeName(type)) + (n <= 8 ? "_gemv" : "_gemm");
  WorstErrors()[key] = std::max(WorstErrors()[key], worst);
}

TEST(CpuMatMulTest, EveryWeightTypeDecodeAndPrefillPaths) {
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (DType type : kAllWeightTypes) {
    for (int64_t k : InnerSizes(type)) {
      // n <= 8: fused GEMV (one or two row groups); 9, 64, 67: dequantized panels + sgemm.
      for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 64, 67}) {
        for (int64_t m : {1, 37, 130}) {
          CheckMatMul(*backend, rng, type, n, m, k, /*with_bias=*/(n + m) % 2 == 0, 2e-6);
        }
      }
    }
  }
  RecordWorstErrors();
}

TEST(CpuMatMulTest, LargeShapesAndThreadCounts) {
  ICECACHE_TEST_RNG(rng);
  for (int threads : {1, 2, 3}) {
    auto backend = MakeCpuBackend({.threads = threads});
    for (DType type : {DType::kQ4_1, DType::kQ8_0, DType::kQ6_K, DType::kF32}) {
      CheckMatMul(*backend, rng, type, 1, 1536, 512, true, 2e-6);
      CheckMatMul(*backend, rng, type, 3, 700, 1536, false, 2e-6);
      CheckMatMul(*backend, rng, type, 80, 600, 768, true, 2e-6);
    }
  }
}

TEST(CpuMatMulTest, ReusesOutputAcrossCallsWithDifferentSizes) {
  // Scratch grows between calls; a large call after a small one (and back) must stay exact.
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (int64_t k : {64, 2048, 96, 4096, 32}) {
    CheckMatMul(*backend, rng, DType::kQ4_0, 9, 300, k, false, 2e-6);
  }
}

// The stacked forms' default implementations (what the CPU runs): MatMulSplit equals MatMul on
// each row block and MatMulGlu equals MatMul, MatMul, SwiGlu, bit for bit. The CPU keeps
// weights apart (PrepareStacked gives nothing).
TEST(CpuMatMulTest, StackedFormsEqualTheSeparateOps) {
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  const int64_t k = 96, q = 40, kv = 24, f = 56;
  for (int64_t n : {1, 3, 9}) {
    const Tensor x = F32Tensor(RandomVector(rng, n * k), {n, k});
    const Tensor w = F32Tensor(RandomVector(rng, (q + 2 * kv) * k), {q + 2 * kv, k});
    std::vector<Tensor> outs = {testing::HostTensor(DType::kF32, {n, q}),
                                testing::HostTensor(DType::kF32, {n, kv}),
                                testing::HostTensor(DType::kF32, {n, kv})};
    backend->MatMulSplit(x, w, outs);
    int64_t row = 0;
    for (const Tensor& y : outs) {
      Tensor want = testing::HostTensor(DType::kF32, {n, y.cols()});
      backend->MatMul(x, w.Slice(row, row + y.cols()), nullptr, want);
      EXPECT_EQ(testing::ToVector(y), testing::ToVector(want)) << "block at row " << row;
      row += y.cols();
    }

    const Tensor gu = F32Tensor(RandomVector(rng, 2 * f * k), {2 * f, k});
    Tensor out = testing::HostTensor(DType::kF32, {n, f});
    Tensor up = testing::HostTensor(DType::kF32, {n, f});
    backend->MatMulGlu(x, gu, up, out);
    Tensor g = testing::HostTensor(DType::kF32, {n, f});
    Tensor u = testing::HostTensor(DType::kF32, {n, f});
    backend->MatMul(x, gu.Slice(0, f), nullptr, g);
    backend->MatMul(x, gu.Slice(f, 2 * f), nullptr, u);
    backend->SwiGlu(g, u, g);
    EXPECT_EQ(testing::ToVector(out), testing::ToVector(g)) << "n=" << n;
  }
  const Tensor a = F32Tensor({1, 2}, {1, 2});
  const Tensor* parts[] = {&a, &a};
  auto stacked = backend->PrepareStacked(parts);
  ASSERT_TRUE(stacked.ok());
  EXPECT_TRUE(stacked->empty());
}

TEST(CpuBackendTest, PrepareWeightRejectsI32) {
  auto backend = MakeCpuBackend({});
  Tensor w = testing::HostTensor(DType::kI32, {2, 2});
  auto r = backend->PrepareWeight(w);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
}

TEST(CpuBackendTest, CopyChecksSizesAndCopies) {
  auto backend = MakeCpuBackend({});
  Tensor a = F32Tensor({1, 2, 3, 4}, {2, 2});
  Tensor b = testing::HostTensor(DType::kF32, {4});
  ASSERT_TRUE(backend->Copy(a, b).ok());
  EXPECT_EQ(testing::ToVector(b), (std::vector<float>{1, 2, 3, 4}));
  Tensor c = testing::HostTensor(DType::kF32, {3});
  EXPECT_EQ(backend->Copy(a, c).code(), StatusCode::kInvalidArgument);
  auto z = backend->Allocate(DType::kQ8_0, {2, 64});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z.value().nbytes(), 2 * 2 * 34);
  EXPECT_NE(backend->Describe().find("cpu"), std::string::npos);
}

}  // namespace
}  // namespace icecache
