// Insertion routes computed by device-side selection (--kv-route device), on the CPU backend,
// whose reference op is what the CUDA kernel is compared with (backend_cuda/key_route_test.cc):
// - Backend::RouteKeys sends each key to the entry of its list range with the nearest Q8_0 mean
//   key, by the documented arithmetic, ties to the lower entry, -1 for an empty range;
// - through the engine, icecache with routes from the "device" places most decode-time
//   insertions where the routes say, loses no token (every position once per list, no page
//   leaked), both with index updates beside the next step and after each step;
// - the option's misuse is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "backend/backend.h"
#include "core/quant.h"
#include "engine/engine_impl.h"
#include "kv/key_mean.h"
#include "testing/kv_checks.h"
#include "testing/paths.h"
#include "testing/tiny_model.h"

namespace icecache {
namespace {

TEST(KeyRouteTest, NearestMeanKeyWithTiesToTheLowerEntry) {
  auto backend = MakeCpuBackend({.threads = 1});
  ASSERT_NE(backend, nullptr);
  constexpr int kPage = 4, kDim = 64, kPages = 48, kStride = 40;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> k(kPages * kPage * kDim), v(k.size());
  std::vector<int32_t> pos(kPages * kPage, 0);
  for (float& x : k) x = u(rng);
  const KvPoolView pool{k.data(), v.data(), pos.data(), DType::kF32, kPages, kPage, kDim};
  // Mean keys of every page, summary row = page id.
  std::vector<int32_t> ids(kPages), lens(kPages, kPage);
  for (int i = 0; i < kPages; ++i) ids[i] = i;
  const int64_t row_bytes = RowBytes(kMeanKeyDType, kDim);
  std::vector<uint8_t> bounds(kPages * row_bytes);
  std::vector<float> spread(kPages);
  PageBoundsArgs b{pool, Tensor(ids.data(), DType::kI32, {kPages}),
                   Tensor(lens.data(), DType::kI32, {kPages}),
                   Tensor(ids.data(), DType::kI32, {kPages}),
                   Tensor(bounds.data(), kMeanKeyDType, {kPages, 1, kDim})};
  b.spread = Tensor(spread.data(), DType::kF32, {kPages});
  backend->PageBounds(b);
  // Two lists: row 0 entry e holds page e; row 1 holds pages in another order, and entries 10
  // and 11 (then 20 and 30) share a page, so their distances tie.
  std::vector<int32_t> list_rows(2 * kStride);
  for (int e = 0; e < kStride; ++e) {
    list_rows[e] = e;
    list_rows[kStride + e] = (e * 7 + 3) % kPages;
  }
  list_rows[kStride + 11] = list_rows[kStride + 10];
  list_rows[kStride + 30] = list_rows[kStride + 20];
  // Keys: every row of pages 40..47, and a copy of the mean key's page rows at the ties.
  std::vector<int32_t> slots, ranges;
  for (int s = 40 * kPage; s < kPages * kPage; ++s) {
    const int32_t row = s % 2, first = static_cast<int32_t>(rng() % 12);
    slots.push_back(s);
    ranges.insert(ranges.end(), {row, first, first + 1 + static_cast<int32_t>(rng() % 28)});
  }
  for (int s : {list_rows[kStride + 10] * kPage, list_rows[kStride + 20] * kPage}) {
    slots.push_back(s);
    ranges.insert(ranges.end(), {1, 0, kStride});
  }
  slots.push_back(0);
  ranges.insert(ranges.end(), {0, 5, 5});  // an empty range
  const int64_t n = static_cast<int64_t>(slots.size());
  std::vector<int32_t> out(n, -7);
  KeyRouteArgs r;
  r.pool = pool;
  r.slots = Tensor(slots.data(), DType::kI32, {n});
  r.ranges = Tensor(ranges.data(), DType::kI32, {n, 3});
  r.list_rows = Tensor(list_rows.data(), DType::kI32, {2, kStride});
  r.bounds = Tensor(bounds.data(), kMeanKeyDType, {kPages, 1, kDim});
  r.out = Tensor(out.data(), DType::kI32, {n});
  backend->RouteKeys(r);

  std::vector<float> mean(kDim);
  auto dist = [&](int32_t slot, int32_t summary) {
    DequantizeRow(kMeanKeyDType, bounds.data() + summary * row_bytes, mean.data(), kDim);
    float s = 0;
    for (int j = 0; j < kDim; ++j) {
      const float x = k[static_cast<size_t>(slot) * kDim + j] - mean[j];
      s = std::fma(x, x, s);
    }
    return s;
  };
  int ties = 0;
  for (int64_t i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    const int32_t row = ranges[3 * i], first = ranges[3 * i + 1], end = ranges[3 * i + 2];
    if (first == end) {
      EXPECT_EQ(out[i], -1);
      continue;
    }
    ASSERT_GE(out[i], first);
    ASSERT_LT(out[i], end);
    const float got = dist(slots[i], list_rows[row * kStride + out[i]]);
    for (int32_t e = first; e < end; ++e) {
      const float d = dist(slots[i], list_rows[row * kStride + e]);
      EXPECT_GE(d, got) << "entry " << e << " is nearer than " << out[i];
      if (d == got && e != out[i]) {
        EXPECT_GT(e, out[i]) << "a tie goes to the lower entry";
        ++ties;
      }
    }
  }
  EXPECT_GE(ties, 2);  // the shared pages tie
}

class DeviceRoutesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const testing::TinyModelSpec spec = testing::TinyLlamaSpec();
    dir_ = new std::string(testing::MakeTempDir("devroute"));
    ASSERT_TRUE(testing::WriteTinyHfModel(spec, *dir_, testing::TinyTokenizerPath(spec)).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  static EngineOptions Options(const std::string& route, const std::string& update) {
    EngineOptions o{.model = *dir_, .context_size = 1024, .prefill_chunk = 64};
    o.threads = 2;
    o.kv.policy = "icecache";
    o.kv.rank = "centroid";
    o.kv.budget = 64;
    o.kv.page_size = 8;
    o.kv_select = "device";
    o.kv_prefetch = "off";
    o.kv_route = route;
    o.index_update = update;
    return o;
  }
  static std::string* dir_;
};
std::string* DeviceRoutesTest::dir_ = nullptr;

TEST_F(DeviceRoutesTest, InsertionsFollowTheRoutesAndLoseNoToken) {
  for (const char* mode : {"beside", "after"}) {
    SCOPED_TRACE(mode);
    auto made = Engine::Create(Options("device", mode));
    ASSERT_TRUE(made.ok()) << made.status().message();
    auto* engine = static_cast<EngineImpl*>(made->get());
    auto state = engine->NewState(nullptr);
    ASSERT_TRUE(state.ok()) << state.status().message();
    GenerateRequest r;
    for (int t = 0; t < 300; ++t) r.prompt_tokens.push_back((t * 53 + t * t) % 1000 + 3);
    r.max_tokens = 64;  // several pages of 8 leave the window of every list
    r.ignore_eos = true;
    auto res = engine->RunOn(**state, r, {});
    ASSERT_TRUE(res.ok()) << res.status().message();
    const KvStats& st = res->stats.kv;
    std::printf("[ tiny ] %s: %lld tokens inserted at device routes, %lld by the tree\n", mode,
                static_cast<long long>(st.tokens_routed_device),
                static_cast<long long>(st.tokens_routed_host));
    EXPECT_GT(st.tokens_routed_device, 0);
    EXPECT_GT(st.tokens_routed_device, 3 * st.tokens_routed_host);
    const KvSequence& seq = (*state)->seq;
    std::set<int32_t> pages;
    int64_t absorbed = 0;
    ASSERT_NO_FATAL_FAILURE(testing::ExpectEveryPositionOnce(seq, &pages, &absorbed));
    EXPECT_GT(absorbed, 0);
    EXPECT_FALSE(seq.pool().holding());
    EXPECT_EQ(seq.pool().used(), static_cast<int64_t>(pages.size()));
  }
  // Host routing (the default) routes nothing on the device.
  auto host = Engine::Create(Options("host", "after"));
  ASSERT_TRUE(host.ok());
  GenerateRequest r;
  for (int t = 0; t < 300; ++t) r.prompt_tokens.push_back((t * 31 + 7) % 1000 + 3);
  r.max_tokens = 40;
  r.ignore_eos = true;
  auto res = (*host)->Generate(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->stats.kv.tokens_routed_device, 0);
  EXPECT_GT(res->stats.kv.tokens_routed_host, 0);
}

TEST_F(DeviceRoutesTest, MisuseIsAClearError) {
  EngineOptions bad = Options("gpu", "after");
  auto e = Engine::Create(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--kv-route"), std::string::npos);
  // Routes come from device-side selection: a host-selecting icecache session cannot have them.
  EngineOptions host = Options("device", "after");
  host.kv_select = "host";
  auto h = Engine::Create(host);
  ASSERT_TRUE(h.ok());
  GenerateRequest r;
  r.prompt_tokens = {5, 6, 7};
  r.max_tokens = 2;
  auto res = (*h)->Generate(r);
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("--kv-route device"), std::string::npos);
}

}  // namespace
}  // namespace icecache
