// Insertion routes on the GPU (--kv-route device): the RouteKeys kernel against the CPU
// reference op on the same bf16 keys and Q8_0 mean keys (both compute the same f32 operations
// in the same order, so the routes agree exactly, ties and empty ranges included); then through
// the engine, a batch of icecache sequences routing on the device with index updates beside the
// device's work: most insertions follow the device's routes, every list holds every position
// once, no page leaks, and a second engine generates the same tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "cuda_test_util.h"
#include "engine/engine_impl.h"
#include "icecache/engine.h"
#include "kv/key_mean.h"
#include "testing/kv_checks.h"

namespace icecache {
namespace {

using testing::I32ToDevice;
using testing::I32ToHost;

TEST(CudaKeyRoute, RoutesMatchTheCpuReference) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  auto cpu = MakeCpuBackend({.threads = 1});
  constexpr int kPage = 16, kDim = 128, kPages = 512, kRows = 4, kStride = 3000;
  std::mt19937 rng(11);
  const int64_t n_keys = int64_t{kPages} * kPage * kDim;
  const std::vector<float> kf = testing::Bf16Exact(rng, n_keys, -2.0f, 2.0f);
  std::vector<uint16_t> k(n_keys), v(n_keys, 0);
  for (int64_t i = 0; i < n_keys; ++i) k[i] = F32ToBf16(kf[i]);
  std::vector<int32_t> pos(kPages * kPage, 0);
  const KvPoolView host{k.data(), v.data(), pos.data(), DType::kBF16, kPages, kPage, kDim};
  Tensor dk = testing::ToDevice(*gpu, kf, DType::kBF16, {n_keys});
  const KvPoolView dev{dk.data(), nullptr, nullptr, DType::kBF16, kPages, kPage, kDim};
  // Mean keys of every page (partly filled ones too) at summary row = page id, on the CPU, and
  // the same bytes on the GPU.
  std::vector<int32_t> ids(kPages), lens(kPages);
  for (int i = 0; i < kPages; ++i) {
    ids[i] = i;
    lens[i] = 1 + static_cast<int>(rng() % kPage);
  }
  const int64_t row_bytes = RowBytes(kMeanKeyDType, kDim);
  std::vector<uint8_t> bounds(kPages * row_bytes);
  std::vector<float> spread(kPages);
  PageBoundsArgs b{host, testing::I32Tensor(ids, {kPages}), testing::I32Tensor(lens, {kPages}),
                   testing::I32Tensor(ids, {kPages}),
                   Tensor(bounds.data(), kMeanKeyDType, {kPages, 1, kDim})};
  b.spread = Tensor(spread.data(), DType::kF32, {kPages});
  cpu->PageBounds(b);
  auto gb = gpu->Allocate(kMeanKeyDType, {kPages, 1, kDim});
  ASSERT_TRUE(gb.ok());
  ASSERT_TRUE(gpu->Copy(Tensor(bounds.data(), kMeanKeyDType, {kPages, 1, kDim}), *gb).ok());
  // Lists whose entries name summary rows at random (repeats tie), and keys with ranges of every
  // length: empty, one entry, short, and whole rows.
  std::vector<int32_t> list_rows(kRows * kStride);
  for (int32_t& r : list_rows) r = static_cast<int32_t>(rng() % kPages);
  std::vector<int32_t> slots, ranges;
  for (int i = 0; i < 3000; ++i) {
    const int32_t row = static_cast<int32_t>(rng() % kRows);
    const int32_t first = static_cast<int32_t>(rng() % kStride);
    const int kind = i % 4;
    const int32_t end = kind == 0   ? first
                        : kind == 1 ? first + 1
                        : kind == 2 ? std::min<int32_t>(kStride, first + 1 + rng() % 64)
                                    : kStride;
    slots.push_back(static_cast<int32_t>(rng() % (kPages * kPage)));
    ranges.insert(ranges.end(), {row, kind == 3 ? 0 : first, end});
  }
  const int64_t n = static_cast<int64_t>(slots.size());
  std::vector<int32_t> want(n, -7);
  KeyRouteArgs c;
  c.pool = host;
  c.slots = testing::I32Tensor(slots, {n});
  c.ranges = testing::I32Tensor(ranges, {n, 3});
  c.list_rows = testing::I32Tensor(list_rows, {kRows, kStride});
  c.bounds = Tensor(bounds.data(), kMeanKeyDType, {kPages, 1, kDim});
  c.out = Tensor(want.data(), DType::kI32, {n});
  cpu->RouteKeys(c);
  auto out = gpu->Allocate(DType::kI32, {n});
  ASSERT_TRUE(out.ok());
  KeyRouteArgs g;
  g.pool = dev;
  g.slots = I32ToDevice(*gpu, slots, {n});
  g.ranges = I32ToDevice(*gpu, ranges, {n, 3});
  g.list_rows = I32ToDevice(*gpu, list_rows, {kRows, kStride});
  g.bounds = *gb;
  g.out = *out;
  gpu->RouteKeys(g);
  const std::vector<int32_t> got = I32ToHost(*gpu, *out);
  int empty = 0, differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    empty += want[i] == -1;
    differ += got[i] != want[i];
  }
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(got, want);
  EXPECT_EQ(empty, static_cast<int>(n / 4));  // exactly the empty ranges
}

TEST(CudaKeyRoute, BatchRoutedOnTheDeviceKeepsEveryToken) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  gpu.reset();
  EngineOptions o{.device = "cuda", .context_size = 1024, .synthetic = "tiny"};
  o.max_sequences = 4;
  o.kv_offload = "on";
  o.kv_select = "device";
  o.kv_route = "device";
  o.kv.policy = "icecache";
  o.kv.budget = 64;
  std::vector<GenerateRequest> requests(4);
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < 700; ++i)
      requests[r].prompt_tokens.push_back((i * 31 + 5 + r * 13) % 97 + 3);
    requests[r].max_tokens = 64;
    requests[r].ignore_eos = true;
  }
  auto a = Engine::Create(o);
  auto b = Engine::Create(o);
  ASSERT_TRUE(a.ok() && b.ok()) << (a.ok() ? b.status().message() : a.status().message());
  auto* engine = static_cast<EngineImpl*>(a->get());
  std::vector<std::unique_ptr<SequenceState>> owned;
  std::vector<SequenceState*> states;
  for (int r = 0; r < 4; ++r) {
    auto s = engine->NewState(nullptr);
    ASSERT_TRUE(s.ok()) << s.status().message();
    states.push_back(s->get());
    owned.push_back(std::move(s).value());
  }
  auto got = engine->RunBatch(states, requests, nullptr);
  ASSERT_TRUE(got.ok()) << got.status().message();
  std::set<int32_t> pages;
  for (size_t r = 0; r < states.size(); ++r) {
    const KvStats& st = (*got)[r].stats.kv;
    EXPECT_GT(st.tokens_routed_device, 3 * st.tokens_routed_host) << "request " << r;
    int64_t absorbed = 0;
    ASSERT_NO_FATAL_FAILURE(testing::ExpectEveryPositionOnce(states[r]->seq, &pages, &absorbed));
    EXPECT_GT(absorbed, 0);
  }
  const PagePool& pool = states[0]->seq.pool();
  EXPECT_FALSE(pool.holding());
  EXPECT_EQ(pool.used(), static_cast<int64_t>(pages.size()));
  auto want = (*b)->GenerateBatch(requests);
  ASSERT_TRUE(want.ok()) << want.status().message();
  for (size_t r = 0; r < requests.size(); ++r) {
    EXPECT_EQ((*got)[r].tokens, (*want)[r].tokens) << "request " << r;
  }
  const KvStats& st = (*got)[0].stats.kv;
  std::printf(
      "[ tiny ] icecache batch 4, routes on the device: %lld tokens at device routes, "
      "%lld by the tree\n",
      static_cast<long long>(st.tokens_routed_device),
      static_cast<long long>(st.tokens_routed_host));
}

}  // namespace
}  // namespace icecache
