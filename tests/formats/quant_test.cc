// DequantizeRow / QuantizeRow against gguf-py (fixtures from tools/dev/make_quant_fixtures.py)
// and round trips within each format's expected error.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/half.h"
#include "core/quant.h"
#include "format_test_util.h"
#include "testing/paths.h"

namespace icecache {
namespace {

using testing::DataPath;
using testing::ReadArray;
using testing::ReadBytes;

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                               DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

std::string Fixture(DType t, const std::string& suffix) {
  return DataPath("quant/" + std::string(DTypeName(t)) + suffix);
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Compares bit patterns so that -0 vs +0 (and any NaN payload) count as differences.
void ExpectBitEqual(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 5; ++i) {
    if (Bits(got[i]) != Bits(want[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " (0x" << std::hex
                    << Bits(got[i]) << "), gguf-py says " << want[i] << " (0x" << Bits(want[i])
                    << std::dec << ")";
      ++reported;
    }
  }
}

class QuantFixtureTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantFixtureTest, DequantizeMatchesGgufPyBitForBit) {
  const DType t = GetParam();
  const std::vector<uint8_t> raw = ReadBytes(Fixture(t, ".bin"));
  const std::vector<float> want = ReadArray<float>(Fixture(t, ".f32"));
  ASSERT_FALSE(want.empty());
  const auto n = static_cast<int64_t>(want.size());
  ASSERT_EQ(n % BlockElems(t), 0);
  ASSERT_EQ(static_cast<int64_t>(raw.size()), RowBytes(t, n)) << "fixture size";

  std::vector<float> got(want.size(), -1.0f);
  DequantizeRow(t, raw.data(), got.data(), n);
  ExpectBitEqual(got, want, std::string(DTypeName(t)) + " whole row");

  // Block by block, from a source at an odd address (rows inside files need not be aligned).
  std::vector<uint8_t> shifted(raw.size() + 1);
  std::memcpy(shifted.data() + 1, raw.data(), raw.size());
  std::vector<float> got2(want.size(), -1.0f);
  const int64_t be = BlockElems(t), bb = BlockBytes(t);
  for (int64_t b = 0; b < n / be; ++b) {
    DequantizeRow(t, shifted.data() + 1 + b * bb, got2.data() + b * be, be);
  }
  ExpectBitEqual(got2, want, std::string(DTypeName(t)) + " per block, misaligned");
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantFixtureTest, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// gguf-py's quantizers for these types are bit-exact ports of ggml's reference code; ours uses
// the same arithmetic and must give the same bytes.
class QuantizeFixtureTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeFixtureTest, QuantizeMatchesGgufPyBitForBit) {
  const DType t = GetParam();
  const std::vector<float> src = ReadArray<float>(Fixture(t, ".src.f32"));
  const std::vector<uint8_t> want = ReadBytes(Fixture(t, t == DType::kF16 ? ".quant.bin" : ".bin"));
  const auto n = static_cast<int64_t>(src.size());
  ASSERT_EQ(static_cast<int64_t>(want.size()), RowBytes(t, n));
  std::vector<uint8_t> got(want.size(), 0xAB);
  QuantizeRow(t, src.data(), got.data(), n);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << DTypeName(t) << ": byte " << i << " (block " << i / BlockBytes(t)
                               << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(GgufPyQuantizable, QuantizeFixtureTest,
                         ::testing::Values(DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_1),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// ---- Round trips -------------------------------------------------------------------------------

enum class Dist { kNormal, kOutliers, kPositive, kNegative, kConstant, kZeros };

std::vector<float> MakeData(Dist dist, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // Vary the scale per 256 elements so super-blocks differ.
    const float scale = std::pow(10.0f, static_cast<float>((i / 256) % 5) - 2.0f);
    float v = normal(rng);
    switch (dist) {
      case Dist::kNormal:
        break;
      case Dist::kOutliers:
        v = uni(rng) < 0.01f ? v * 40.0f : v;
        break;
      case Dist::kPositive:
        v = 3.0f + uni(rng);
        break;
      case Dist::kNegative:
        v = -2.0f - uni(rng);
        break;
      case Dist::kConstant:
        v = 0.7f;
        break;
      case Dist::kZeros:
        v = 0.0f;
        break;
    }
    x[static_cast<size_t>(i)] = v * scale;
  }
  return x;
}

// Worst error allowed for a value of a group whose largest magnitude is `amax`, as a fraction of
// it: half a quantization step plus the rounding of the stored scales (and, for the K-quants,
// of the 6-/8-bit sub-block scales and mins).
double ErrorFraction(DType t) {
  switch (t) {
    case DType::kF32:
      return 0.0;
    case DType::kF16:
      return 1.0 / 2048;
    case DType::kBF16:
      return 1.0 / 256;
    case DType::kQ8_0:
      return 0.6 / 127;  // step amax/127, plus 127 x the f16 error of d
    case DType::kQ4_0:
      return 1.01 / 8;  // step amax/8; the side opposite the extreme clamps at +7
    case DType::kQ4_1:
      return 2 * 0.55 / 15;  // step range/15 with range <= 2 amax
    case DType::kQ4_K:
      return 0.08;  // measured worst about 0.066 over 200 random rows
    case DType::kQ5_K:
      return 0.04;  // measured about 0.032
    case DType::kQ6_K:
      return 1.06 / 32;  // like Q4_0: the side opposite the extreme clamps at +31
    case DType::kI32:
      break;
  }
  return 0.0;
}

struct RoundTripCase {
  DType type;
  Dist dist;
};

class QuantRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(QuantRoundTripTest, ErrorWithinFormatBound) {
  const auto [t, dist] = GetParam();
  const int64_t n = 256 * 10;
  const std::vector<float> x = MakeData(dist, n, 1234 + static_cast<uint32_t>(dist));
  std::vector<uint8_t> q(static_cast<size_t>(RowBytes(t, n)));
  QuantizeRow(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  DequantizeRow(t, q.data(), y.data(), n);

  // Bounds are per group of the format's block (a K-quant's super-block), relative to the
  // group's largest magnitude.
  const int64_t group = IsQuantized(t) ? BlockElems(t) : 1;
  double err2 = 0, x2 = 0;
  for (int64_t g = 0; g < n; g += group) {
    float amax = 0;
    for (int64_t i = g; i < g + group; ++i) amax = std::max(amax, std::fabs(x[i]));
    // f16 values below 2^-14 are subnormal: their step is 2^-24 whatever their size.
    const double floor = t == DType::kF16 ? std::ldexp(1.0, -25) : 1e-30;
    const double bound = ErrorFraction(t) * amax + floor;
    for (int64_t i = g; i < g + group; ++i) {
      const double e = std::fabs(static_cast<double>(y[i]) - x[i]);
      ASSERT_LE(e, bound) << DTypeName(t) << ": element " << i << " " << x[i] << " -> " << y[i]
                          << " (group max " << amax << ")";
      err2 += e * e;
      x2 += static_cast<double>(x[i]) * x[i];
    }
  }
  if (dist == Dist::kZeros) {
    EXPECT_EQ(err2, 0.0) << "zeros must round-trip exactly";
  } else if (dist == Dist::kNormal && IsQuantized(t)) {
    // Typical error well below the worst case: relative RMS error of a Gaussian row.
    const double rel = std::sqrt(err2 / x2);
    // Measured: Q8_0 0.005, Q4_0 0.086, Q4_1 0.078, Q4_K 0.078, Q5_K 0.038, Q6_K 0.019.
    const double limit = t == DType::kQ8_0   ? 0.008
                         : t == DType::kQ6_K ? 0.025
                         : t == DType::kQ5_K ? 0.05
                                             : 0.1;
    EXPECT_LT(rel, limit) << DTypeName(t) << " relative RMS error";
  }
}

std::vector<RoundTripCase> AllRoundTripCases() {
  std::vector<RoundTripCase> out;
  for (DType t : kAllTypes) {
    for (Dist d : {Dist::kNormal, Dist::kOutliers, Dist::kPositive, Dist::kNegative,
                   Dist::kConstant, Dist::kZeros}) {
      out.push_back({t, d});
    }
  }
  return out;
}

std::string CaseName(const ::testing::TestParamInfo<RoundTripCase>& info) {
  static const char* kDist[] = {"Normal", "Outliers", "Positive", "Negative", "Constant", "Zeros"};
  return std::string(DTypeName(info.param.type)) + "_" + kDist[static_cast<int>(info.param.dist)];
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRoundTripTest, ::testing::ValuesIn(AllRoundTripCases()),
                         CaseName);

TEST(QuantTest, QuantizedRoundTripIsStableForDequantizedInput) {
  // Values that are already on a block's grid come back exactly for the 8-bit format.
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i - 32) * 0.25f;
  std::vector<uint8_t> q(static_cast<size_t>(RowBytes(DType::kQ8_0, 64)));
  QuantizeRow(DType::kQ8_0, x.data(), q.data(), 64);
  std::vector<float> y(64);
  DequantizeRow(DType::kQ8_0, q.data(), y.data(), 64);
  std::vector<uint8_t> q2(q.size());
  QuantizeRow(DType::kQ8_0, y.data(), q2.data(), 64);
  EXPECT_EQ(q, q2);
}

TEST(QuantTest, QuantizersDoNotCrashOnNonFiniteInput) {
  // Garbage in, garbage out, but no undefined float-to-int conversions (checked under UBSan).
  std::vector<float> x(256, 1.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[70] = std::numeric_limits<float>::infinity();
  x[200] = -std::numeric_limits<float>::infinity();
  for (DType t : kAllTypes) {
    std::vector<uint8_t> q(static_cast<size_t>(RowBytes(t, 256)));
    QuantizeRow(t, x.data(), q.data(), 256);
    std::vector<float> y(256);
    DequantizeRow(t, q.data(), y.data(), 256);
  }
}

TEST(QuantTest, HalfConversionsAreExactOnFixtureBits) {
  // The scalar half helpers are what every f16 scale goes through.
  const std::vector<uint16_t> bits = ReadArray<uint16_t>(Fixture(DType::kF16, ".bin"));
  for (uint16_t h : bits) {
    const float f = F16ToF32(h);
    if (!std::isfinite(f)) continue;
    EXPECT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

}  // namespace
}  // namespace icecache
