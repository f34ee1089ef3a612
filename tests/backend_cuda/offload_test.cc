// The offloaded KV on the GPU: the host tier in pinned host memory (--kv-offload on), policies
// selecting on the host, the device working set filled by a gather kernel that reads the mapped
// host tier, and the multi-segment decode kernel over the working set. Checked through the
// public Engine API with teacher-forced scoring (the same tokens for every policy):
// - full attention reading the host tier gives exactly the logits of the device-resident KV;
// - every policy with a budget that covers the context gives exactly full attention's logits;
// - small budgets attend at most the budget, fetch pages and account their time; on SmolLM2
//   their top-1 tokens over real text agree with the same policy on the CPU backend at most
//   steps;
// - index updates beside the next step's device work keep every token and race with nothing;
// - a batch's layers run in two halves on two streams (ICECACHE_BATCH_HALVES) change no token;
// - --kv-fetch behind's copies beside the step change no logit against waiting for them;
// - sparse policies on a device-resident KV are a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "engine/engine_impl.h"
#include "icecache/engine.h"
#include "testing/kv_checks.h"
#include "testing/paths.h"

namespace icecache {
namespace {

constexpr int kContext = 600;
constexpr int kSteps = 24;
const char* const kPolicies[] = {"streaming", "quest", "oracle", "icecache", "lychee"};

class CudaOffload : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (testing::TryCudaBackend(&why) == nullptr) GTEST_SKIP() << "no CUDA backend here: " << why;
  }
};

std::unique_ptr<Engine> MakeEngine(EngineOptions o, const std::string& device,
                                   const std::string& offload) {
  o.device = device;
  o.kv_offload = offload;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << device << "/" << offload << ": " << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

ScoreRequest Request(int vocab) {
  ScoreRequest r;
  for (int i = 0; i < kContext; ++i) r.context.push_back((i * 53 + 11) % vocab);
  for (int i = 0; i < kSteps; ++i) r.continuation.push_back((i * 97 + 5) % vocab);
  r.full_logprobs = true;
  return r;
}

Result<ScoreResult> ScoreWith(Engine& engine, const ScoreRequest& r, const KvConfig* kv) {
  ICECACHE_ASSIGN_OR_RETURN(auto session, engine.NewSession(kv));
  return session->Score(r);
}

// Largest |a - b| over every step's log-softmax.
double MaxDiff(const ScoreResult& a, const ScoreResult& b) {
  double worst = 0;
  for (size_t s = 0; s < a.logprobs.size() && s < b.logprobs.size(); ++s) {
    for (size_t v = 0; v < a.logprobs[s].size(); ++v) {
      worst = std::max(worst, std::abs(static_cast<double>(a.logprobs[s][v]) - b.logprobs[s][v]));
    }
  }
  return worst;
}

// First step whose log-softmax differs at all (-1: none).
int FirstDifference(const ScoreResult& a, const ScoreResult& b) {
  for (size_t s = 0; s < a.logprobs.size() && s < b.logprobs.size(); ++s) {
    if (a.logprobs[s] != b.logprobs[s]) return static_cast<int>(s);
  }
  return -1;
}

void CheckExactness(const EngineOptions& base, const std::string& name) {
  auto device = MakeEngine(base, "cuda", "off");
  auto host = MakeEngine(base, "cuda", "on");
  auto cpu = MakeEngine(base, "cpu", "auto");
  ASSERT_TRUE(device && host && cpu);
  EXPECT_FALSE(device->info().kv_offloaded);
  EXPECT_TRUE(host->info().kv_offloaded);
  const ScoreRequest r = Request(device->info().vocab);
  auto ref = ScoreWith(*device, r, nullptr);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  ASSERT_EQ(ref->logprobs.size(), static_cast<size_t>(kSteps));
  auto on_cpu = ScoreWith(*cpu, r, nullptr);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().message();

  auto offloaded = ScoreWith(*host, r, nullptr);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status().message();
  std::printf(
      "[ %s ] full, host tier vs device KV: max |diff| %.3g (first differing step %d); against "
      "the CPU backend: device KV %.3g, host tier %.3g\n",
      name.c_str(), MaxDiff(*ref, *offloaded), FirstDifference(*ref, *offloaded),
      MaxDiff(*ref, *on_cpu), MaxDiff(*offloaded, *on_cpu));
  EXPECT_EQ(offloaded->logprobs, ref->logprobs) << "full attention over the host tier";

  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    KvConfig kv;
    kv.policy = policy;
    kv.budget = 1024;  // covers the 624 tokens
    auto s = ScoreWith(*host, r, &kv);
    ASSERT_TRUE(s.ok()) << s.status().message();
    std::printf("[ %s ] %s covering budget vs full: max |diff| %.3g, tokens attended %.1f\n",
                name.c_str(), policy, MaxDiff(*ref, *s), s->kv.tokens_attended);
    EXPECT_EQ(s->top1, ref->top1);
    EXPECT_EQ(s->logprobs, ref->logprobs);
    EXPECT_GT(s->kv.pages_fetched, 0.0);
  }
}

TEST_F(CudaOffload, SyntheticTinyCoveringBudgetsAreExact) {
  CheckExactness({.context_size = 1024, .prefill_chunk = 256, .synthetic = "tiny"}, "tiny");
}

TEST_F(CudaOffload, SmolLM2CoveringBudgetsAreExact) {
  const std::string model = testing::DefaultModelPath();
  if (model.empty()) GTEST_SKIP() << "default model not present (.cache/models); skipping";
  CheckExactness({.model = model, .context_size = 1024, .prefill_chunk = 256}, "smollm2");
}

// Real text: the first kContext + kSteps tokens of the long reference prompt (tokenized by
// transformers; tests/data/reference/smollm2.json).
ScoreRequest RealTextRequest() {
  const nlohmann::json fx = testing::ReadDataJson("reference/smollm2.json");
  ScoreRequest r;
  for (const nlohmann::json& p : fx["prompts"]) {
    if (p["name"] != "long") continue;
    const auto ids = p["input_ids"].get<std::vector<int32_t>>();
    if (ids.size() < static_cast<size_t>(kContext + kSteps)) break;
    r.context.assign(ids.begin(), ids.begin() + kContext);
    r.continuation.assign(ids.begin() + kContext, ids.begin() + kContext + kSteps);
  }
  r.full_logprobs = true;
  return r;
}

// Teacher-forced over real text (on a sequence of arbitrary token ids the model's predictions
// are nearly flat, and the two backends' rounding alone flips top-1 tokens): each policy's
// top-1 tokens on the GPU against the same policy on the CPU, next to full attention's.
TEST_F(CudaOffload, SmallBudgetsAttendTheBudgetAndAgreeWithTheCpu) {
  const std::string model = testing::DefaultModelPath();
  if (model.empty()) GTEST_SKIP() << "default model not present (.cache/models); skipping";
  EngineOptions base{.model = model, .context_size = 1024, .prefill_chunk = 256};
  base.kv_timing = true;  // split device-side selection's time too
  auto gpu = MakeEngine(base, "cuda", "on");
  auto cpu = MakeEngine(base, "cpu", "auto");
  ASSERT_TRUE(gpu && cpu);
  const ScoreRequest r = RealTextRequest();
  ASSERT_EQ(r.context.size(), static_cast<size_t>(kContext)) << "the long reference prompt";
  {
    auto g = ScoreWith(*gpu, r, nullptr);
    auto c = ScoreWith(*cpu, r, nullptr);
    ASSERT_TRUE(g.ok() && c.ok());
    int agree = 0;
    for (int i = 0; i < kSteps; ++i) agree += g->top1[i] == c->top1[i];
    std::printf("[ smollm2 ] full: top-1 equal to the CPU's at %d of %d steps\n", agree, kSteps);
  }
  // Every policy, with icecache and lychee ranking by centroid (their device selection), and
  // lychee's bound search (host selection) too.
  std::vector<std::pair<std::string, std::string>> runs;
  for (const char* policy : kPolicies) runs.push_back({policy, "centroid"});
  runs.push_back({"lychee", "auto"});
  for (const auto& [policy, rank] : runs) {
    SCOPED_TRACE(policy + " " + rank);
    KvConfig kv;
    kv.policy = policy;
    kv.budget = 128;
    kv.rank = rank;
    auto g = ScoreWith(*gpu, r, &kv);
    auto c = ScoreWith(*cpu, r, &kv);
    ASSERT_TRUE(g.ok()) << g.status().message();
    ASSERT_TRUE(c.ok()) << c.status().message();
    const KvStats& st = g->kv;
    EXPECT_EQ(st.decode_steps, kSteps - 1);
    EXPECT_LE(st.tokens_attended, 128.0);
    EXPECT_GT(st.tokens_attended, 64.0);
    EXPECT_GT(st.pages_fetched, 0.0);
    EXPECT_GE(st.hit_rate, 0.0);
    EXPECT_LE(st.hit_rate, 1.0);
    EXPECT_GT(st.select_seconds, 0.0);
    EXPECT_GT(st.attend_seconds, 0.0);
    int agree = 0;
    for (int i = 0; i < kSteps; ++i) agree += g->top1[i] == c->top1[i];
    std::printf(
        "[ smollm2 ] %s (rank %s) budget 128: top-1 equal to the CPU's at %d of %d steps; "
        "%.1f pages and %.0f bytes fetched per step, hit rate %.2f\n",
        policy.c_str(), rank.c_str(), agree, kSteps, st.pages_fetched, st.bytes_fetched,
        st.hit_rate);
    EXPECT_GE(agree, kSteps * 3 / 4);
  }
}

// The synthetic tiny model selecting with `policy` at budget 64 of its 624 tokens (most pages
// left out, the selection varying), prefetch off.
EngineOptions TinyBudget64(const char* policy) {
  EngineOptions o{.context_size = 1024, .synthetic = "tiny"};
  o.kv.policy = policy;
  o.kv.budget = 64;
  o.kv_prefetch = "off";
  return o;
}

// The prefetch runs on a side stream while the layer's MLP runs: the logits must not change
// (a race on the working set or the selection scratch would show here), and pages must move
// early. Budget 64 of 624 tokens, so that most pages are left out and the selection varies.
TEST_F(CudaOffload, PrefetchOnTheSideStreamChangesNoLogit) {
  for (const char* policy : {"quest", "icecache"}) {
    SCOPED_TRACE(policy);
    EngineOptions o = TinyBudget64(policy);
    auto off = MakeEngine(o, "cuda", "on");
    o.kv_prefetch = "on";
    auto on = MakeEngine(o, "cuda", "on");
    ASSERT_TRUE(off && on);
    const ScoreRequest r = Request(on->info().vocab);
    auto want = ScoreWith(*off, r, nullptr);
    auto got = ScoreWith(*on, r, nullptr);
    ASSERT_TRUE(want.ok() && got.ok()) << got.status().message();
    EXPECT_TRUE(got->kv.device_select);
    EXPECT_EQ(got->logprobs, want->logprobs);
    EXPECT_EQ(want->kv.pages_prefetched, 0.0);
    EXPECT_GT(got->kv.pages_prefetched, 0.0);
    std::printf(
        "[ %s ] prefetch off: %.1f pages fetched per step, hit rate %.3f; on: %.1f "
        "fetched, %.1f prefetched, hit rate %.3f\n",
        policy, want->kv.pages_fetched, want->kv.hit_rate, got->kv.pages_fetched,
        got->kv.pages_prefetched, got->kv.hit_rate);
  }
}

// --kv-fetch behind: the deferred pages' copies run on the side stream beside the rest of the
// step, into slots the step's tables do not list. The logits must equal those of the same
// engine with --kv-timing, which waits for the device (the side stream included) between
// phases; pages must be deferred and every deferred page copied. Quest and icecache selecting
// on the device, one sequence.
TEST_F(CudaOffload, FetchBehindOnTheSideStreamChangesNoLogit) {
  for (const char* policy : {"quest", "icecache"}) {
    SCOPED_TRACE(policy);
    EngineOptions o = TinyBudget64(policy);
    auto now = MakeEngine(o, "cuda", "on");
    o.kv.fetch = "behind";
    auto behind = MakeEngine(o, "cuda", "on");
    o.kv_timing = true;
    auto waits = MakeEngine(o, "cuda", "on");
    ASSERT_TRUE(now && behind && waits);
    const ScoreRequest r = Request(behind->info().vocab);
    auto want = ScoreWith(*waits, r, nullptr);
    auto got = ScoreWith(*behind, r, nullptr);
    auto fetched_now = ScoreWith(*now, r, nullptr);
    ASSERT_TRUE(want.ok() && got.ok() && fetched_now.ok()) << got.status().message();
    EXPECT_TRUE(got->kv.device_select);
    EXPECT_EQ(got->logprobs, want->logprobs);
    EXPECT_GT(got->kv.pages_deferred, 0.0);
    EXPECT_DOUBLE_EQ(got->kv.pages_prefetched, got->kv.pages_deferred);
    EXPECT_LT(got->kv.tokens_attended, fetched_now->kv.tokens_attended);
    EXPECT_LT(got->kv.pages_fetched, fetched_now->kv.pages_fetched) << "deferred pages wait";
    std::printf(
        "[ %s ] fetch now: %.1f pages fetched per step, %.1f tokens attended; behind: %.1f "
        "fetched, %.1f deferred, %.1f tokens attended, top-1 equal to now's at %d of %d steps\n",
        policy, fetched_now->kv.pages_fetched, fetched_now->kv.tokens_attended,
        got->kv.pages_fetched, got->kv.pages_deferred, got->kv.tokens_attended,
        [&] {
          int same = 0;
          for (size_t i = 0; i < got->top1.size(); ++i)
            same += got->top1[i] == fetched_now->top1[i];
          return same;
        }(),
        static_cast<int>(got->top1.size()));
  }
}

using Env = std::vector<std::pair<const char*, const char*>>;

// Four greedy requests with different prompts (kContext tokens) generated as one batch by two
// engines on the synthetic tiny model, selecting on the device at budget 64 (quest and
// icecache), each made with its environment (`env_a`, `env_b`) set. Both generate the same
// tokens and attend the same number of tokens.
void ExpectSameBatch(const Env& env_a, const Env& env_b, int max_tokens,
                     const std::string& prefetch = "auto") {
  EngineOptions o{.context_size = 1024, .synthetic = "tiny"};
  o.max_sequences = 4;
  o.kv_prefetch = prefetch;
  o.kv_select = "device";
  std::vector<GenerateRequest> requests(4);
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < kContext; ++i)
      requests[r].prompt_tokens.push_back((i * 53 + 11 + r * 7) % 97 + 3);
    requests[r].max_tokens = max_tokens;
    requests[r].ignore_eos = true;
    requests[r].sampling.temperature = 0;
  }
  auto make = [&](const Env& env) {
    for (const auto& [name, value] : env) setenv(name, value, 1);
    auto e = MakeEngine(o, "cuda", "on");
    for (const auto& [name, value] : env) unsetenv(name);
    return e;
  };
  for (const char* policy : {"quest", "icecache"}) {
    SCOPED_TRACE(policy);
    o.kv.policy = policy;
    o.kv.budget = 64;
    auto a = make(env_a);
    auto b = make(env_b);
    ASSERT_TRUE(a && b);
    auto want = a->GenerateBatch(requests);
    auto got = b->GenerateBatch(requests);
    ASSERT_TRUE(want.ok()) << want.status().message();
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->size(), requests.size());
    for (size_t r = 0; r < requests.size(); ++r) {
      EXPECT_TRUE((*got)[r].stats.kv.device_select);
      EXPECT_TRUE((*got)[r].stats.kv.kv_offloaded);
      EXPECT_FALSE((*got)[r].stats.kv.kv_on_device);
      EXPECT_EQ((*got)[r].tokens.size(), static_cast<size_t>(max_tokens));
      EXPECT_EQ((*got)[r].tokens, (*want)[r].tokens) << "request " << r;
      EXPECT_DOUBLE_EQ((*got)[r].stats.kv.tokens_attended, (*want)[r].stats.kv.tokens_attended);
    }
    // Different prompts, different continuations: the batch is not one sequence four times.
    EXPECT_NE((*got)[0].tokens, (*got)[1].tokens);
  }
}

// A batch whose sequences select on the device runs their selection, map and attention in lanes
// (one stream each, Backend::BeginLanes) when batched ops are off. Lanes change when kernels
// run, never what they compute: the same batch with lanes turned off (ICECACHE_CUDA_LANES=0, read
// when the backend is made) generates exactly the same tokens.
TEST_F(CudaOffload, LanesChangeNoToken) {
  ExpectSameBatch({{"ICECACHE_DEVICE_BATCH", "0"}},
                  {{"ICECACHE_DEVICE_BATCH", "0"}, {"ICECACHE_CUDA_LANES", "0"}}, kSteps);
}

// ICECACHE_BATCH_HALVES=1 (read when the transformer is made): every layer of a decode step runs
// for the first two sequences on the compute stream and for the other two as side work, queued
// once the first half's attention is, with its own decode and GEMM workspaces. The matrix
// products of a half take the GEMV path, which computes each row as the whole batch's does, and
// with batched ops off each sequence attends with one call's splits in either case (a batched
// attention launch splits by its number of sequences, which halves change), so the tokens are
// exactly the whole batch's; a race between the halves (shared scratch, an early join) would
// show as a difference. 40 steps: icecache's lists take in pages and re-arrange meanwhile.
TEST_F(CudaOffload, BatchHalvesChangeNoToken) {
  ExpectSameBatch({{"ICECACHE_DEVICE_BATCH", "0"}},
                  {{"ICECACHE_DEVICE_BATCH", "0"}, {"ICECACHE_BATCH_HALVES", "1"}}, 40);
}

// ICECACHE_PREFETCH_EARLY=1 (read when the transformer is made) queues each layer's prefetch
// before the layer before it attends, so that the prefetch's selection and map run as side work
// beside the main stream's selection, map and attention of another layer (its copies queued
// after that attention), from an estimate that adds the layer's kept attention output of the
// last step; with ICECACHE_PREFETCH_PERCENT=30 it also brings in only the best-ranked 30% of
// the pages. A race on shared scratch (selection output, copy lists, kept rows) would show as a
// difference from the late, whole prefetch.
TEST_F(CudaOffload, EarlyPartialPrefetchChangesNoToken) {
  ExpectSameBatch({}, {{"ICECACHE_PREFETCH_EARLY", "1"}, {"ICECACHE_PREFETCH_PERCENT", "30"}},
                  kSteps, "on");
}

// ICECACHE_PREFETCH_HEADS=1|2: the early estimate as one query row per KV group (the group's
// first head, or its mean: a group of one in the selection kernels, weights of their own on the
// side stream). It changes which pages come early, never a token.
TEST_F(CudaOffload, OneRowPerGroupPrefetchChangesNoToken) {
  for (const char* heads : {"1", "2"}) {
    SCOPED_TRACE(std::string("heads ") + heads);
    ExpectSameBatch({}, {{"ICECACHE_PREFETCH_EARLY", "1"}, {"ICECACHE_PREFETCH_HEADS", heads}},
                    kSteps, "on");
  }
}

// On a GPU a batch's index updates run beside the next step's device work (--index-update auto):
// the device reads pages the lists showed while a host thread re-arranges them (insertions and
// leaf splits of icecache). Every list must still hold every position once with no page leaked
// or held back, and a second engine must generate the same tokens (a race between the device's
// reads and the host's writes would show as a difference).
TEST_F(CudaOffload, IndexUpdatesBesideTheDeviceKeepEveryToken) {
  EngineOptions o{.context_size = 1024, .synthetic = "tiny"};
  o.max_sequences = 4;
  o.kv_select = "device";
  o.kv.policy = "icecache";
  o.kv.budget = 64;
  std::vector<GenerateRequest> requests(4);
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < kContext; ++i)
      requests[r].prompt_tokens.push_back((i * 31 + 5 + r * 13) % 97 + 3);
    requests[r].max_tokens = 64;  // 8 pages of 8 leave the window in every list
    requests[r].ignore_eos = true;
  }
  auto a = MakeEngine(o, "cuda", "on");
  auto b = MakeEngine(o, "cuda", "on");
  ASSERT_TRUE(a && b);
  auto* engine = static_cast<EngineImpl*>(a.get());
  std::vector<std::unique_ptr<SequenceState>> owned;
  std::vector<SequenceState*> states;
  for (int r = 0; r < 4; ++r) {
    auto s = engine->NewState(nullptr);
    ASSERT_TRUE(s.ok());
    states.push_back(s->get());
    owned.push_back(std::move(s).value());
  }
  auto got = engine->RunBatch(states, requests, nullptr);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const KvStats& st = (*got)[0].stats.kv;
  EXPECT_EQ(engine->beside_index_updates(), st.decode_steps - 1);
  EXPECT_GT(st.update_beside_seconds, 0.0);
  std::set<int32_t> pages;
  for (SequenceState* s : states) {
    int64_t absorbed = 0;
    ASSERT_NO_FATAL_FAILURE(testing::ExpectEveryPositionOnce(s->seq, &pages, &absorbed));
    EXPECT_GT(absorbed, 0);
  }
  const PagePool& pool = states[0]->seq.pool();
  EXPECT_FALSE(pool.holding());
  EXPECT_EQ(pool.used(), static_cast<int64_t>(pages.size()));
  auto want = b->GenerateBatch(requests);
  ASSERT_TRUE(want.ok()) << want.status().message();
  for (size_t r = 0; r < requests.size(); ++r) {
    EXPECT_EQ((*got)[r].tokens, (*want)[r].tokens) << "request " << r;
  }
  std::printf("[ tiny ] icecache batch 4: index update %.3f ms per step beside the device's work\n",
              1e3 * st.update_beside_seconds);
}

TEST_F(CudaOffload, SparsePoliciesNeedTheHostTier) {
  const EngineOptions base{.context_size = 1024, .synthetic = "tiny"};
  EngineOptions o = base;
  o.device = "cuda";
  o.kv.policy = "quest";
  o.kv_offload = "off";
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("--kv-offload"), std::string::npos);

  // auto: a sparse engine policy offloads; full keeps the KV on the device, and a sparse
  // session there is refused with the fix in the message.
  o.kv_offload = "auto";
  auto sparse = Engine::Create(o);
  ASSERT_TRUE(sparse.ok()) << sparse.status().message();
  EXPECT_TRUE((*sparse)->info().kv_offloaded);
  auto dense = MakeEngine(base, "cuda", "auto");
  ASSERT_TRUE(dense);
  EXPECT_FALSE(dense->info().kv_offloaded);
  // Its KV stats say where the KV lives (--kv-stats: "device KV").
  GenerateRequest g;
  g.prompt_tokens = {5, 17, 42, 8};
  g.max_tokens = 2;
  const std::vector<GenerateRequest> one{g};
  auto out = dense->GenerateBatch(one);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_TRUE((*out)[0].stats.kv.kv_on_device);
  EXPECT_FALSE((*out)[0].stats.kv.kv_offloaded);
  KvConfig kv;
  kv.policy = "icecache";
  auto session = dense->NewSession(&kv);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(session.status().message().find("--kv-offload on"), std::string::npos);
}

}  // namespace
}  // namespace icecache
