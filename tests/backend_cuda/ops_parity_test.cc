// CUDA backend ops against the CPU backend: embedding, RMSNorm (plain and fused with the
// residual add), add, SwiGLU, RoPE (plain and fused with the K/V page write), WriteKv,
// CopyPages, CopyBlocks (host <-> device, strided, queued), FillRandom, ScatterI32
// (bit-identical) and MatMul on both its paths (GEMV for n <= 4, cuBLASLt above), with bf16 and
// f32 outputs and biases, and its stacked forms (q/k/v, gate/up + SwiGLU). Inputs are bf16-exact,
// so differences come from accumulation order and one output rounding: tolerance 1e-2 relative
// (bf16 out), 1e-4 (f32).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "core/quant.h"
#include "cuda_test_util.h"

namespace icecache {
namespace {

using testing::Bf16Exact;
using testing::F32Tensor;
using testing::I32Tensor;
using testing::I32ToDevice;
using testing::RelErr;
using testing::ToDevice;
using testing::ToHostF32;
using testing::Tolerance;

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override { cpu_ = MakeCpuBackend({.threads = 2}); }
  std::unique_ptr<Backend> cpu_;
};

TEST_F(CudaOps, FillRandomMatchesCpuBitForBit) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Tensor c = testing::HostTensor(dt, {1000, 37});
    auto g = gpu->Allocate(dt, {1000, 37});
    ASSERT_TRUE(g.ok());
    cpu_->FillRandom(c, 77, 0.5f, 0.25f);
    gpu->FillRandom(*g, 77, 0.5f, 0.25f);
    const std::vector<float> got = ToHostF32(*gpu, *g);
    const std::vector<float> want = ToHostF32(*cpu_, c);
    EXPECT_EQ(got, want) << DTypeName(dt);
    EXPECT_NE(want[0], want[1]);
  }
}

TEST_F(CudaOps, ScatterI32MatchesCpu) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  std::vector<int32_t> dst(4096), index, values;
  for (int i = 0; i < 4096; ++i) dst[i] = -i;
  for (int i = 0; i < 700; ++i) {
    index.push_back(static_cast<int32_t>((i * 2654435761u) % 4096));  // distinct: odd multiplier
    values.push_back(i * 3 + 1);
  }
  const int64_t n = static_cast<int64_t>(index.size());
  Tensor c = testing::I32Tensor(dst, {4096});
  cpu_->ScatterI32(testing::I32Tensor(index, {n}), testing::I32Tensor(values, {n}), c);
  Tensor g = testing::I32ToDevice(*gpu, dst, {4096});
  gpu->ScatterI32(testing::I32ToDevice(*gpu, index, {n}), testing::I32ToDevice(*gpu, values, {n}),
                  g);
  Tensor got = testing::HostTensor(DType::kI32, {4096});
  ASSERT_TRUE(gpu->Copy(g, got).ok());
  gpu->Synchronize();
  EXPECT_EQ(0, std::memcmp(got.data(), c.data(), 4096 * sizeof(int32_t)));
  EXPECT_EQ(c.data_as<int32_t>()[index[5]], values[5]);
}

TEST_F(CudaOps, MatMulBothPathsAndOutputTypes) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  struct Shape {
    int64_t n, m, k;
  };
  // n <= 4 with k % 8 == 0: GEMV (with the k split for small m); the rest: cuBLASLt.
  for (Shape s :
       {Shape{1, 4096, 4096}, Shape{1, 1000, 576}, Shape{3, 192, 1536}, Shape{4, 37, 64},
        Shape{2, 100, 12}, Shape{5, 300, 256}, Shape{64, 512, 320}, Shape{300, 96, 512}}) {
    for (DType out : {DType::kBF16, DType::kF32}) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE("n=" + std::to_string(s.n) + " m=" + std::to_string(s.m) +
                     " k=" + std::to_string(s.k) + " out=" + std::string(DTypeName(out)) +
                     (with_bias ? " bias" : ""));
        const auto x = Bf16Exact(rng, s.n * s.k);
        const auto w = Bf16Exact(rng, s.m * s.k, -0.1f, 0.1f);
        const auto bias = testing::RandomVector(rng, s.m);
        // CPU: f32 x, bf16 weights, f32 bias.
        Tensor wc = testing::HostTensor(DType::kBF16, {s.m, s.k});
        for (size_t i = 0; i < w.size(); ++i) wc.data_as<uint16_t>()[i] = F32ToBf16(w[i]);
        Tensor bc = F32Tensor(bias, {s.m});
        Tensor yc = testing::HostTensor(DType::kF32, {s.n, s.m});
        cpu_->MatMul(F32Tensor(x, {s.n, s.k}), wc, with_bias ? &bc : nullptr, yc);
        Tensor xg = ToDevice(*gpu, x, DType::kBF16, {s.n, s.k});
        Tensor wg = ToDevice(*gpu, w, DType::kBF16, {s.m, s.k});
        Tensor bg = ToDevice(*gpu, bias, DType::kF32, {s.m});
        auto yg = gpu->Allocate(out, {s.n, s.m});
        ASSERT_TRUE(yg.ok());
        gpu->MatMul(xg, wg, with_bias ? &bg : nullptr, *yg);
        const double err = RelErr(ToHostF32(*gpu, *yg), testing::ToVector(yc));
        EXPECT_LE(err, Tolerance(out) + 1e-4) << "relative error " << err;
      }
    }
  }
}

// The stacked forms: [wq; wk; wv] read once into three outputs and [w_gate; w_up] into
// silu(gate) * up, on the GEMV path (n <= 4) and the GEMM path, against the CPU's separate ops.
// The weights are host matrices stacked by PrepareStacked (as a GGUF model's are).
TEST_F(CudaOps, StackedProjectionsMatchSeparateOnes) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  auto host_bf16 = [&](int64_t rows, int64_t k) {
    Tensor t = testing::HostTensor(DType::kBF16, {rows, k});
    const auto v = Bf16Exact(rng, rows * k, -0.1f, 0.1f);
    for (size_t i = 0; i < v.size(); ++i) t.data_as<uint16_t>()[i] = F32ToBf16(v[i]);
    return t;
  };
  for (int64_t n : {1, 3, 4, 9}) {
    for (int64_t k : {576, 4096}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
      const int64_t q = 512, kv = 128, f = 1000;
      const Tensor wq = host_bf16(q, k), wk = host_bf16(kv, k), wv = host_bf16(kv, k);
      const Tensor wg = host_bf16(f, k), wu = host_bf16(f, k);
      const auto x = Bf16Exact(rng, n * k);
      const Tensor xc = F32Tensor(x, {n, k});
      const Tensor xg = ToDevice(*gpu, x, DType::kBF16, {n, k});

      const Tensor* qkv_parts[] = {&wq, &wk, &wv};
      auto qkv = gpu->PrepareStacked(qkv_parts);
      ASSERT_TRUE(qkv.ok()) << qkv.status().ToString();
      ASSERT_EQ(qkv->dim(0), q + 2 * kv);
      std::vector<Tensor> outs;
      for (int64_t width : {q, kv, kv}) {
        auto y = gpu->Allocate(DType::kBF16, {n, width});
        ASSERT_TRUE(y.ok());
        outs.push_back(*y);
      }
      gpu->MatMulSplit(xg, *qkv, outs);
      const Tensor* singles[] = {&wq, &wk, &wv};
      for (int i = 0; i < 3; ++i) {
        Tensor yc = testing::HostTensor(DType::kF32, {n, outs[i].cols()});
        cpu_->MatMul(xc, *singles[i], nullptr, yc);
        const double err = RelErr(ToHostF32(*gpu, outs[i]), testing::ToVector(yc));
        EXPECT_LE(err, 1e-2) << "block " << i << ": relative error " << err;
      }

      const Tensor* gate_up_parts[] = {&wg, &wu};
      auto gate_up = gpu->PrepareStacked(gate_up_parts);
      ASSERT_TRUE(gate_up.ok()) << gate_up.status().ToString();
      auto out = gpu->Allocate(DType::kBF16, {n, f});
      auto up = gpu->Allocate(DType::kBF16, {n, f});
      ASSERT_TRUE(out.ok() && up.ok());
      gpu->MatMulGlu(xg, *gate_up, *up, *out);
      Tensor gc = testing::HostTensor(DType::kF32, {n, f});
      Tensor uc = testing::HostTensor(DType::kF32, {n, f});
      cpu_->MatMul(xc, wg, nullptr, gc);
      cpu_->MatMul(xc, wu, nullptr, uc);
      cpu_->SwiGlu(gc, uc, gc);
      const double err = RelErr(ToHostF32(*gpu, *out), testing::ToVector(gc));
      EXPECT_LE(err, 1e-2) << "SwiGLU: relative error " << err;
    }
  }
}

TEST_F(CudaOps, EmbedRowsOfWeightsAndActivations) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  const int64_t vocab = 500, d = 72;
  const auto table = Bf16Exact(rng, vocab * d);
  const std::vector<int32_t> ids = {3, 499, 0, 3, 250, 17};
  Tensor out_c = testing::HostTensor(DType::kF32, {6, d});
  cpu_->Embed(F32Tensor(table, {vocab, d}), I32Tensor(ids, {6}), out_c);
  for (DType tt : {DType::kBF16, DType::kF32}) {
    for (DType ot : {DType::kBF16, DType::kF32}) {
      Tensor tg = ToDevice(*gpu, table, tt, {vocab, d});
      auto og = gpu->Allocate(ot, {6, d});
      ASSERT_TRUE(og.ok());
      gpu->Embed(tg, I32ToDevice(*gpu, ids, {6}), *og);
      EXPECT_EQ(ToHostF32(*gpu, *og), testing::ToVector(out_c));  // exact: values are bf16
    }
  }
}

TEST_F(CudaOps, RmsNormPlainAndFusedWithResidual) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  for (int64_t d : {64, 576, 4096, 100}) {
    const int64_t rows = 7;
    const auto x = Bf16Exact(rng, rows * d, -3.0f, 3.0f);
    const auto a = Bf16Exact(rng, rows * d, -3.0f, 3.0f);
    const auto w = testing::RandomVector(rng, d, 0.5f, 1.5f);
    Tensor wc = F32Tensor(w, {d});
    Tensor wg = ToDevice(*gpu, w, DType::kF32, {d});
    // Plain, in place and into another tensor.
    Tensor yc = testing::HostTensor(DType::kF32, {rows, d});
    cpu_->RmsNorm(F32Tensor(x, {rows, d}), wc, 1e-5f, yc);
    Tensor xg = ToDevice(*gpu, x, DType::kBF16, {rows, d});
    gpu->RmsNorm(xg, wg, 1e-5f, xg);
    EXPECT_LE(RelErr(ToHostF32(*gpu, xg), testing::ToVector(yc)), 1e-2) << "d=" << d;
    // Fused: inout += a; out = norm(inout); out aliases a (as in the transformer).
    Tensor xc = F32Tensor(x, {rows, d});
    Tensor ac = F32Tensor(a, {rows, d});
    cpu_->AddRmsNorm(ac, xc, wc, 1e-5f, ac);
    Tensor x2 = ToDevice(*gpu, x, DType::kBF16, {rows, d});
    Tensor a2 = ToDevice(*gpu, a, DType::kBF16, {rows, d});
    gpu->AddRmsNorm(a2, x2, wg, 1e-5f, a2);
    EXPECT_LE(RelErr(ToHostF32(*gpu, x2), testing::ToVector(xc)), 1e-2) << "sum, d=" << d;
    EXPECT_LE(RelErr(ToHostF32(*gpu, a2), testing::ToVector(ac)), 2e-2) << "norm, d=" << d;
  }
}

TEST_F(CudaOps, AddAndSwiGlu) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  const int64_t n = 3 * 1000 + 7;
  const auto a = Bf16Exact(rng, n, -4.0f, 4.0f);
  const auto b = Bf16Exact(rng, n, -4.0f, 4.0f);
  Tensor bc = F32Tensor(b, {n});
  cpu_->Add(F32Tensor(a, {n}), bc);
  Tensor bg = ToDevice(*gpu, b, DType::kBF16, {n});
  gpu->Add(ToDevice(*gpu, a, DType::kBF16, {n}), bg);
  EXPECT_LE(RelErr(ToHostF32(*gpu, bg), testing::ToVector(bc)), 1e-2);

  Tensor oc = testing::HostTensor(DType::kF32, {n});
  cpu_->SwiGlu(F32Tensor(a, {n}), F32Tensor(b, {n}), oc);
  Tensor og = ToDevice(*gpu, std::vector<float>(n, 0.0f), DType::kBF16, {n});
  gpu->SwiGlu(ToDevice(*gpu, a, DType::kBF16, {n}), ToDevice(*gpu, b, DType::kBF16, {n}), og);
  EXPECT_LE(RelErr(ToHostF32(*gpu, og), testing::ToVector(oc)), 1e-2);
}

TEST_F(CudaOps, RopeAtLongPositions) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  for (int64_t hd : {64, 128}) {
    const int64_t n = 5, heads = 3;
    const auto x = Bf16Exact(rng, n * heads * hd);
    std::vector<float> inv(hd / 2);
    for (int64_t i = 0; i < hd / 2; ++i) inv[i] = std::pow(500000.0f, -2.0f * i / hd);
    const std::vector<int32_t> pos = {0, 1, 4095, 32767, 131071};
    Tensor xc = F32Tensor(x, {n, heads, hd});
    cpu_->Rope(I32Tensor(pos, {n}), F32Tensor(inv, {hd / 2}), xc);
    Tensor xg = ToDevice(*gpu, x, DType::kBF16, {n, heads, hd});
    gpu->Rope(I32ToDevice(*gpu, pos, {n}), ToDevice(*gpu, inv, DType::kF32, {hd / 2}), xg);
    EXPECT_LE(RelErr(ToHostF32(*gpu, xg), testing::ToVector(xc)), 1e-2) << "head_dim " << hd;
  }
}

// A small bf16 pool on the GPU and its f32 twin on the CPU.
struct Pools {
  Tensor ck, cv, cpos, gk, gv, gpos;
  KvPoolView cpu, gpu;
};

Pools MakePools(Backend& cpu, Backend& gpu, int64_t pages, int ps, int d) {
  Pools p;
  p.ck = testing::HostTensor(DType::kF32, {pages, ps, d});
  p.cv = testing::HostTensor(DType::kF32, {pages, ps, d});
  p.cpos = testing::HostTensor(DType::kI32, {pages, ps});
  p.gk = *gpu.Allocate(DType::kBF16, {pages, ps, d});
  p.gv = *gpu.Allocate(DType::kBF16, {pages, ps, d});
  p.gpos = *gpu.Allocate(DType::kI32, {pages, ps});
  p.cpu = {p.ck.data(), p.cv.data(), p.cpos.data_as<int32_t>(), DType::kF32, pages, ps, d};
  p.gpu = {p.gk.data(), p.gv.data(), p.gpos.data_as<int32_t>(), DType::kBF16, pages, ps, d};
  return p;
}

TEST_F(CudaOps, RopeWriteKvAndWriteKvAndCopyPages) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  const int64_t n = 6, heads = 4, kv_heads = 2, d = 64, pages = 9;
  const int ps = 4;
  Pools p = MakePools(*cpu_, *gpu, pages, ps, d);
  const auto q = Bf16Exact(rng, n * heads * d);
  const auto k = Bf16Exact(rng, n * kv_heads * d);
  const auto v = Bf16Exact(rng, n * kv_heads * d);
  std::vector<float> inv(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / d);
  const std::vector<int32_t> pos = {10, 11, 12, 13, 14, 900};
  std::vector<int32_t> slots(n * kv_heads);
  std::vector<int32_t> perm(pages * ps);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = perm[i];
  slots[3] = -1;  // dropped on the GPU; the CPU reference skips it by hand below
  // CPU: Rope q, Rope k, WriteKv (skipping the invalid slot).
  Tensor qc = F32Tensor(q, {n, heads, d}), kc = F32Tensor(k, {n, kv_heads, d}),
         vc = F32Tensor(v, {n, kv_heads, d});
  cpu_->Rope(I32Tensor(pos, {n}), F32Tensor(inv, {d / 2}), qc);
  cpu_->Rope(I32Tensor(pos, {n}), F32Tensor(inv, {d / 2}), kc);
  std::vector<int32_t> cpu_slots = slots;
  cpu_slots[3] = slots[4];  // write a duplicate of a valid slot instead (same values)
  std::vector<float> kcv = testing::ToVector(kc), vcv = testing::ToVector(vc);
  std::copy_n(kcv.begin() + 4 * d, d, kcv.begin() + 3 * d);
  std::copy_n(vcv.begin() + 4 * d, d, vcv.begin() + 3 * d);
  cpu_->WriteKv(KvWriteArgs{F32Tensor(kcv, {n, kv_heads, d}), F32Tensor(vcv, {n, kv_heads, d}),
                            I32Tensor(cpu_slots, {n, kv_heads}), I32Tensor(pos, {n}), p.cpu});
  // GPU: fused.
  Tensor qg = ToDevice(*gpu, q, DType::kBF16, {n, heads, d});
  Tensor kg = ToDevice(*gpu, k, DType::kBF16, {n, kv_heads, d});
  Tensor vg = ToDevice(*gpu, v, DType::kBF16, {n, kv_heads, d});
  gpu->RopeWriteKv(ToDevice(*gpu, inv, DType::kF32, {d / 2}), qg,
                   KvWriteArgs{kg, vg, I32ToDevice(*gpu, slots, {n, kv_heads}),
                               I32ToDevice(*gpu, pos, {n}), p.gpu});
  EXPECT_LE(RelErr(ToHostF32(*gpu, qg), testing::ToVector(qc)), 1e-2);
  EXPECT_LE(RelErr(ToHostF32(*gpu, kg), testing::ToVector(kc)), 1e-2);
  EXPECT_LE(RelErr(ToHostF32(*gpu, p.gk), testing::ToVector(p.ck)), 1e-2);
  EXPECT_EQ(ToHostF32(*gpu, p.gv), testing::ToVector(p.cv));  // V is copied, bf16-exact
  EXPECT_EQ(
      testing::I32ToHost(*gpu, p.gpos),
      std::vector<int32_t>(p.cpos.data_as<int32_t>(), p.cpos.data_as<int32_t>() + pages * ps));

  // Plain WriteKv of f32 activations overwrites V rows exactly.
  const auto v2 = Bf16Exact(rng, n * kv_heads * d);
  gpu->WriteKv(KvWriteArgs{ToDevice(*gpu, k, DType::kF32, {n, kv_heads, d}),
                           ToDevice(*gpu, v2, DType::kF32, {n, kv_heads, d}),
                           I32ToDevice(*gpu, slots, {n, kv_heads}), I32ToDevice(*gpu, pos, {n}),
                           p.gpu});
  const std::vector<float> gv = ToHostF32(*gpu, p.gv);
  for (int64_t r = 0; r < n * kv_heads; ++r) {
    if (slots[r] < 0) continue;
    for (int64_t c = 0; c < d; ++c) ASSERT_EQ(gv[slots[r] * d + c], v2[r * d + c]);
  }

  // CopyPages: pages 0..2 -> 6..8 on both.
  const std::vector<int32_t> src = {0, 1, 2}, dst = {6, 8, 7};
  cpu_->CopyPages(p.cpu, p.cpu, I32Tensor(src, {3}), I32Tensor(dst, {3}));
  gpu->CopyPages(p.gpu, p.gpu, I32ToDevice(*gpu, src, {3}), I32ToDevice(*gpu, dst, {3}));
  const std::vector<float> gk = ToHostF32(*gpu, p.gk);
  const std::vector<int32_t> gp = testing::I32ToHost(*gpu, p.gpos);
  for (int i = 0; i < 3; ++i) {
    for (int64_t e = 0; e < ps * d; ++e) {
      ASSERT_EQ(gk[dst[i] * ps * d + e], gk[src[i] * ps * d + e]);
    }
    for (int e = 0; e < ps; ++e) ASSERT_EQ(gp[dst[i] * ps + e], gp[src[i] * ps + e]);
  }
}

// CopyBlocks and CopyBlocksQueued, host to device and back, with pitches on both sides that
// differ from the block size: the blocks land where the CPU backend puts them and the gaps
// between them keep what they held. The queued copy reads staging memory that is overwritten
// once its fence has passed, which must not change what arrived.
TEST_F(CudaOps, CopyBlocksStridedBothWaysAndQueued) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  const int64_t count = 37, block = 24, src_pitch = 40, dst_pitch = 32, back_pitch = 48;
  std::vector<uint8_t> src(count * src_pitch);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  const int64_t dst_bytes = count * dst_pitch;
  // What the CPU backend makes of the same copy over a buffer of 0xEE.
  std::vector<uint8_t> want(dst_bytes, 0xEE);
  ASSERT_TRUE(cpu_->CopyBlocks(src.data(), want.data(), count, block, src_pitch, dst_pitch).ok());
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(0, std::memcmp(want.data() + i * dst_pitch, src.data() + i * src_pitch, block));
  }
  for (bool queued : {false, true}) {
    SCOPED_TRACE(queued ? "CopyBlocksQueued" : "CopyBlocks");
    auto dev = gpu->Allocate(DType::kI32, {dst_bytes / 4});
    ASSERT_TRUE(dev.ok()) << dev.status().message();
    std::vector<uint8_t> fill(dst_bytes, 0xEE);
    ASSERT_TRUE(gpu->CopyBlocks(fill.data(), dev->data(), 1, dst_bytes, dst_bytes, dst_bytes).ok());
    if (queued) {
      auto stage = gpu->AllocateStaging(DType::kI32, {count * src_pitch / 4});
      ASSERT_TRUE(stage.ok()) << stage.status().message();
      std::memcpy(stage->data(), src.data(), src.size());
      ASSERT_TRUE(
          gpu->CopyBlocksQueued(stage->data(), dev->data(), count, block, src_pitch, dst_pitch)
              .ok());
      gpu->RecordFence(0);
      gpu->WaitFence(0);
      std::memset(stage->data(), 0x11, src.size());  // the copy has run: its source may change
    } else {
      ASSERT_TRUE(
          gpu->CopyBlocks(src.data(), dev->data(), count, block, src_pitch, dst_pitch).ok());
    }
    std::vector<uint8_t> got(dst_bytes);
    ASSERT_TRUE(gpu->CopyBlocks(dev->data(), got.data(), 1, dst_bytes, dst_bytes, dst_bytes).ok());
    gpu->Synchronize();
    EXPECT_EQ(got, want);
    // Device to host with a third pitch: block i back at i * back_pitch, the gaps untouched.
    std::vector<uint8_t> back(count * back_pitch, 0x5A);
    ASSERT_TRUE(
        gpu->CopyBlocks(dev->data(), back.data(), count, block, dst_pitch, back_pitch).ok());
    gpu->Synchronize();
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(0, std::memcmp(back.data() + i * back_pitch, src.data() + i * src_pitch, block))
          << "block " << i;
      for (int64_t b = block; b < back_pitch; ++b) ASSERT_EQ(back[i * back_pitch + b], 0x5A);
    }
  }
}

TEST_F(CudaOps, PrepareWeightDequantizesToBf16AndKeepsNormsF32) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  const int64_t m = 40, k = 256;
  const auto w = testing::RandomVector(rng, m * k);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_1, DType::kQ4_K,
                   DType::kQ6_K}) {
    Tensor host = testing::HostTensor(dt, {m, k});
    for (int64_t r = 0; r < m; ++r) QuantizeRow(dt, w.data() + r * k, host.row(r), k);
    std::vector<float> deq(m * k);
    for (int64_t r = 0; r < m; ++r) DequantizeRow(dt, host.row(r), deq.data() + r * k, k);
    auto prepared = gpu->PrepareWeight(host);
    ASSERT_TRUE(prepared.ok()) << prepared.status().message();
    EXPECT_EQ(prepared->dtype(), DType::kBF16);
    const std::vector<float> got = ToHostF32(*gpu, *prepared);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], Bf16ToF32(F32ToBf16(deq[i]))) << DTypeName(dt) << " element " << i;
    }
  }
  Tensor norm = F32Tensor(testing::RandomVector(rng, 64), {64});
  auto pn = gpu->PrepareWeight(norm);
  ASSERT_TRUE(pn.ok());
  EXPECT_EQ(pn->dtype(), DType::kF32);
  EXPECT_EQ(ToHostF32(*gpu, *pn), testing::ToVector(norm));
}

TEST_F(CudaOps, GraphReplaysReadCurrentDeviceInputs) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  const int64_t n = 4096;
  Tensor a = ToDevice(*gpu, std::vector<float>(n, 1.0f), DType::kF32, {n});
  Tensor x = ToDevice(*gpu, std::vector<float>(n, 0.0f), DType::kF32, {n});
  int calls = 0;
  auto body = [&] {
    ++calls;
    gpu->Add(a, x);
    return Status::Ok();
  };
  for (int step = 0; step < 5; ++step) {
    // Change the input between steps (a copy outside the graph, as step inputs are).
    Tensor host = F32Tensor(std::vector<float>(n, static_cast<float>(step + 1)), {n});
    ASSERT_TRUE(gpu->Copy(host, a).ok());
    ASSERT_TRUE(gpu->RunGraph(42, body).ok());
  }
  // Steps add 1 + 2 + 3 + 4 + 5; the body ran eagerly once and once under capture.
  const std::vector<float> got = ToHostF32(*gpu, x);
  EXPECT_EQ(got.front(), 15.0f);
  EXPECT_EQ(got.back(), 15.0f);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace icecache
