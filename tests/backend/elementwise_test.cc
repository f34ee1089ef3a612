// Embed, RmsNorm, Add, SwiGlu, Rope and WriteKv of the CPU backend against float64 references;
// ScatterI32 and CopyBlocks against their definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"
#include "core/half.h"
#include "core/quant.h"

namespace icecache {
namespace {

using testing::F32Tensor;
using testing::I32Tensor;
using testing::MaxRelativeError;
using testing::RandomVector;
using testing::ToVector;

TEST(CpuEmbedTest, GathersDequantizedRows) {
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_1,
                     DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(DTypeName(type));
    const int64_t vocab = 50;
    const int64_t d = BlockElems(type) == 1 ? 40 : 2 * BlockElems(type);
    const std::vector<float> table = RandomVector(rng, vocab * d);
    std::vector<uint8_t> bytes(static_cast<size_t>(vocab * RowBytes(type, d)));
    for (int64_t r = 0; r < vocab; ++r) {
      QuantizeRow(type, table.data() + r * d, bytes.data() + r * RowBytes(type, d), d);
    }
    Tensor t(bytes.data(), type, {vocab, d});
    for (int64_t n : {1, 7, 300}) {
      std::vector<int32_t> ids(static_cast<size_t>(n));
      for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
      Tensor out = testing::HostTensor(DType::kF32, {n, d});
      backend->Embed(t, I32Tensor(ids, {n}), out);
      std::vector<float> want(static_cast<size_t>(d));
      for (int64_t i = 0; i < n; ++i) {
        DequantizeRow(type, bytes.data() + ids[i] * RowBytes(type, d), want.data(), d);
        for (int64_t c = 0; c < d; ++c) ASSERT_EQ(want[c], out.data_as<float>()[i * d + c]);
      }
    }
  }
}

TEST(CpuRmsNormTest, MatchesReferenceAndMayAlias) {
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (int64_t d : {1, 7, 64, 576, 1000}) {
    for (int64_t rows : {1, 3, 200}) {
      for (DType wtype : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE("d=" + std::to_string(d) + " rows=" + std::to_string(rows));
        const float eps = 1e-5f;
        std::vector<float> xs = RandomVector(rng, rows * d, -3.0f, 3.0f);
        std::vector<float> ws = RandomVector(rng, d, 0.5f, 1.5f);
        if (wtype == DType::kBF16) {
          for (auto& w : ws) w = Bf16ToF32(F32ToBf16(w));
        }
        std::vector<uint16_t> wbf(static_cast<size_t>(d));
        for (int64_t i = 0; i < d; ++i) wbf[i] = F32ToBf16(ws[i]);
        Tensor w = wtype == DType::kF32 ? F32Tensor(ws, {d}) : Tensor(wbf.data(), wtype, {d});
        std::vector<double> want(xs.size());
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0.0;
          for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xs[r * d + i]) * xs[r * d + i];
          const double inv = 1.0 / std::sqrt(ss / d + eps);
          for (int64_t i = 0; i < d; ++i) want[r * d + i] = xs[r * d + i] * inv * ws[i];
        }
        Tensor x = F32Tensor(xs, {rows, d});
        Tensor out = testing::HostTensor(DType::kF32, {rows, d});
        backend->RmsNorm(x, w, eps, out);
        EXPECT_LT(MaxRelativeError(ToVector(out), want), 1e-6);
        backend->RmsNorm(x, w, eps, x);  // in place
        EXPECT_EQ(ToVector(x), ToVector(out));
      }
    }
  }
}

TEST(CpuAddTest, AddsInPlace) {
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (int64_t n : {1, 9, 576, 300001}) {
    const std::vector<float> a = RandomVector(rng, n);
    const std::vector<float> b = RandomVector(rng, n);
    Tensor ta = F32Tensor(a, {n});
    Tensor tb = F32Tensor(b, {n});
    backend->Add(ta, tb);
    const float* got = tb.data_as<const float>();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], a[i] + b[i]);
  }
}

TEST(CpuSwiGluTest, MatchesReference) {
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (int64_t n : {1, 13, 1536, 70001}) {
    std::vector<float> g = RandomVector(rng, n, -12.0f, 12.0f);
    const std::vector<float> u = RandomVector(rng, n, -2.0f, 2.0f);
    if (n > 4) {  // extremes: exp(-g) overflows or vanishes
      g[0] = -100.0f;
      g[1] = 100.0f;
      g[2] = 0.0f;
      g[3] = -87.5f;
    }
    Tensor out = testing::HostTensor(DType::kF32, {n});
    backend->SwiGlu(F32Tensor(g, {n}), F32Tensor(u, {n}), out);
    const float* got = out.data_as<const float>();
    for (int64_t i = 0; i < n; ++i) {
      const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      ASSERT_NEAR(got[i], want, 1e-6 * std::abs(want) + 1e-30) << "g=" << g[i] << " u=" << u[i];
    }
  }
}

TEST(CpuRopeTest, RotateHalfMatchesReference) {
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (int64_t hd : {2, 6, 64, 128}) {
    for (int64_t n : {1, 5, 100}) {
      const int64_t heads = 3;
      const int64_t half = hd / 2;
      std::vector<float> inv(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) {
        inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / static_cast<double>(hd)));
      }
      std::vector<int32_t> pos(static_cast<size_t>(n));
      for (auto& p : pos) p = static_cast<int32_t>(rng() % 40000);
      const std::vector<float> xs = RandomVector(rng, n * heads * hd);
      Tensor x = F32Tensor(xs, {n, heads, hd});
      backend->Rope(I32Tensor(pos, {n}), F32Tensor(inv, {half}), x);
      const float* got = x.data_as<const float>();
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t i = 0; i < half; ++i) {
            // The angle is defined as one f32 product (as torch computes it); cos/sin exact.
            const double angle = static_cast<float>(pos[t]) * inv[i];
            const double c = std::cos(angle), s = std::sin(angle);
            const int64_t base = (t * heads + h) * hd;
            const double x0 = xs[base + i], x1 = xs[base + i + half];
            ASSERT_NEAR(got[base + i], x0 * c - x1 * s, 1e-6);
            ASSERT_NEAR(got[base + i + half], x1 * c + x0 * s, 1e-6);
          }
        }
      }
    }
  }
}

TEST(CpuWriteKvTest, WritesRowsAndPositionsToSlots) {
  ICECACHE_TEST_RNG(rng);
  auto backend = MakeCpuBackend({.threads = 2});
  for (DType pool_type : {DType::kF32, DType::kF16}) {
    const int64_t pages = 10, page_size = 5, d = 12, kv_heads = 2, n = 7;
    const int64_t elem = pool_type == DType::kF32 ? 4 : 2;
    std::vector<uint8_t> kbuf(static_cast<size_t>(pages * page_size * d * elem), 0);
    std::vector<uint8_t> vbuf(kbuf.size(), 0);
    std::vector<int32_t> pbuf(static_cast<size_t>(pages * page_size), -1);
    KvWriteArgs args;
    args.pool = {kbuf.data(),        vbuf.data(), pbuf.data(),
                 pool_type,          pages,       static_cast<int>(page_size),
                 static_cast<int>(d)};
    const std::vector<float> ks = RandomVector(rng, n * kv_heads * d);
    const std::vector<float> vs = RandomVector(rng, n * kv_heads * d);
    args.k = F32Tensor(ks, {n, kv_heads, d});
    args.v = F32Tensor(vs, {n, kv_heads, d});
    std::vector<int32_t> slots(static_cast<size_t>(n * kv_heads));
    std::vector<int32_t> all(static_cast<size_t>(pages * page_size));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + slots.size(), slots.begin());
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(100 + 3 * t);
    args.slots = I32Tensor(slots, {n, kv_heads});
    args.positions = I32Tensor(pos, {n});
    backend->WriteKv(args);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < kv_heads; ++h) {
        const int64_t slot = slots[t * kv_heads + h];
        EXPECT_EQ(pbuf[slot], pos[t]);
        for (int64_t i = 0; i < d; ++i) {
          const float kw = ks[(t * kv_heads + h) * d + i];
          const float vw = vs[(t * kv_heads + h) * d + i];
          if (pool_type == DType::kF32) {
            EXPECT_EQ(reinterpret_cast<float*>(kbuf.data())[slot * d + i], kw);
            EXPECT_EQ(reinterpret_cast<float*>(vbuf.data())[slot * d + i], vw);
          } else {
            EXPECT_EQ(reinterpret_cast<uint16_t*>(kbuf.data())[slot * d + i], F32ToF16(kw));
            EXPECT_EQ(reinterpret_cast<uint16_t*>(vbuf.data())[slot * d + i], F32ToF16(vw));
          }
        }
      }
    }
    int written = 0;
    for (int32_t p : pbuf) written += p != -1;
    EXPECT_EQ(written, n * kv_heads) << "nothing outside the given slots is touched";
  }
}

TEST(CpuScatterI32Test, WritesEachValueAtItsIndexAndNothingElse) {
  auto backend = MakeCpuBackend({.threads = 1});
  std::vector<int32_t> dst(50, -7);
  Tensor tdst = I32Tensor(dst, {5, 10});
  const std::vector<int32_t> index{3, 49, 0, 17}, values{30, 490, 1, 170};
  backend->ScatterI32(I32Tensor(index, {4}), I32Tensor(values, {4}), tdst);
  const int32_t* got = tdst.data_as<const int32_t>();
  for (int i = 0; i < 50; ++i) {
    const auto it = std::find(index.begin(), index.end(), i);
    EXPECT_EQ(got[i], it == index.end() ? -7 : values[it - index.begin()]) << i;
  }
}

// Block i goes from src + i * src_pitch to dst + i * dst_pitch; the bytes between blocks stay.
TEST(CpuCopyBlocksTest, CopiesEachBlockAtItsPitchAndNothingElse) {
  auto backend = MakeCpuBackend({.threads = 1});
  const int64_t count = 9, block = 5, src_pitch = 7, dst_pitch = 11;
  std::vector<uint8_t> src(count * src_pitch);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i + 1);
  for (bool queued : {false, true}) {
    std::vector<uint8_t> dst(count * dst_pitch, 0xEE);
    const Status s =
        queued
            ? backend->CopyBlocksQueued(src.data(), dst.data(), count, block, src_pitch, dst_pitch)
            : backend->CopyBlocks(src.data(), dst.data(), count, block, src_pitch, dst_pitch);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t b = 0; b < dst_pitch; ++b) {
        const uint8_t want = b < block ? src[i * src_pitch + b] : 0xEE;
        ASSERT_EQ(dst[i * dst_pitch + b], want) << "block " << i << " byte " << b;
      }
    }
  }
}

}  // namespace
}  // namespace icecache
