// The runners on the real default model: a reply through prefill + fork equals a plain
// generation of the same prompt, a full-KV fidelity run matches its reference exactly, and a
// KV policy the engine lacks is reported, not faked.
#include <gtest/gtest.h>

#include "eval/fidelity.h"
#include "eval/generation_runner.h"
#include "eval/haystack.h"
#include "eval/needle_task.h"
#include "eval/result_store.h"
#include "testing/paths.h"

namespace icecache::eval {
namespace {

class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (icecache::testing::DefaultModelPath().empty()) {
      GTEST_SKIP() << "default model not downloaded (scripts/fetch_model.sh)";
    }
    auto e = Engine::Create(
        {.model = icecache::testing::DefaultModelPath(), .context_size = 512, .max_sequences = 2});
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_ = std::move(*e);
    codec_ = MakeEngineCodec(*engine_);
    auto store = ResultStore::Open(icecache::testing::MakeTempDir("runner") + "/r.jsonl");
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(*store);
  }
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<TextCodec> codec_;
  std::unique_ptr<ResultStore> store_;
};

TEST_F(RunnerTest, ForkedReplyEqualsPlainGeneration) {
  auto hay = Haystack::Filler(1);
  NeedleTaskOptions o;
  o.samples = 2;
  auto samples = MakeNeedleSamples(*codec_, *hay, 384, o);
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  auto prepared = PrepareSamples(*codec_, std::move(*samples), 384);
  ASSERT_TRUE(prepared.ok()) << prepared.status().message();
  EvalContext ctx(*engine_, *store_, {"needle", "m", 0, 8192, -1},
                  ExpandPolicies({"full"}, {64}, KvConfig{}));
  ProgressMeter progress(2, 1, ProgressMeter::Mode::kNever);
  ASSERT_TRUE(RunGeneration(ctx, *prepared, progress).ok());
  ASSERT_EQ(store_->records().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    GenerateRequest req;
    req.prompt_tokens = (*prepared)[i].prompt.tokens;
    req.max_tokens = (*prepared)[i].sample.max_new_tokens;
    auto plain = engine_->Generate(req);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    EXPECT_EQ(store_->records()[i].reply, plain->text);
    EXPECT_EQ(store_->records()[i].prompt_tokens,
              static_cast<int64_t>((*prepared)[i].prompt.tokens.size()));
  }
  // Everything is recorded: a second pass has nothing to do.
  EXPECT_EQ(CountPending(ctx, *prepared).runs, 0);
}

TEST_F(RunnerTest, FullAgainstItselfHasNoDivergence) {
  std::vector<FidelityDocument> docs = FillerFidelityDocuments(1, 600, 2);
  FidelityOptions o{16, 8, 1};
  int skipped = 0;
  auto items = SelectFidelityItems(*codec_, docs, {256}, o, &skipped);
  ASSERT_TRUE(items.ok()) << items.status().message();
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].tokens.size(), 256u);
  EvalContext ctx(*engine_, *store_, {"fidelity", "m", 0, 8192, -1},
                  ExpandPolicies({"full"}, {64}, KvConfig{}));
  ProgressMeter progress(1, 1, ProgressMeter::Mode::kNever);
  ASSERT_TRUE(RunFidelity(ctx, *items, o, progress).ok());
  ASSERT_EQ(store_->records().size(), 1u);
  const EvalRecord& r = store_->records()[0];
  EXPECT_EQ(r.metrics.at("kl_mean"), 0.0);
  EXPECT_EQ(r.metrics.at("top1_agreement"), 1.0);
  EXPECT_EQ(r.metrics.at("first_divergence"), 8.0);
  EXPECT_EQ(r.metrics.at("ppl"), r.metrics.at("ppl_full"));
  // Filler prose is predictable, but not perfectly: a sane perplexity.
  EXPECT_GT(r.metrics.at("ppl"), 1.0);
  EXPECT_LT(r.metrics.at("ppl"), 100.0);
}

TEST_F(RunnerTest, MissingPolicyIsReportedNotRun) {
  const std::vector<PolicyRun> runs = ExpandPolicies({"full", "icecache"}, {64, 128}, KvConfig{});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].Label(), "full");
  EXPECT_EQ(runs[2].Label(), "icecache/128");
  auto avail = ProbePolicies(*engine_, runs);
  ASSERT_TRUE(avail.ok()) << avail.status().message();
  // Whatever the engine implements today: each configuration is either runnable or reported
  // with the engine's own reason.
  EXPECT_EQ(avail->available.size() + avail->unavailable.size(), 3u);
  EXPECT_EQ(avail->available.front().policy, "full");
  for (const auto& [run, reason] : avail->unavailable) EXPECT_FALSE(reason.empty());
  auto bad = ProbePolicies(*engine_, ExpandPolicies({"nonsense"}, {64}, KvConfig{}));
  EXPECT_FALSE(bad.ok());
}

TEST_F(RunnerTest, PolicyWithARankRunsThatRanking) {
  const std::vector<PolicyRun> runs =
      ExpandPolicies({"lychee:centroid", "lychee", "icecache:soft"}, {64}, KvConfig{});
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[1].Label(), "lychee:centroid/64");
  EXPECT_EQ(runs[1].kv.policy, "lychee");
  EXPECT_EQ(runs[1].kv.rank, "centroid");
  EXPECT_EQ(runs[2].kv.policy, "lychee");
  EXPECT_EQ(runs[2].kv.rank, "auto");
  EXPECT_EQ(runs[3].kv.rank, "soft");
  auto avail = ProbePolicies(*engine_, runs);
  ASSERT_TRUE(avail.ok()) << avail.status().message();
  EXPECT_EQ(avail->available.size(), 4u);
  // A rank the policy does not have is a clear error, not a silent fallback.
  auto bad = ProbePolicies(*engine_, ExpandPolicies({"lychee:soft"}, {64}, KvConfig{}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("lychee:soft/64"), std::string::npos);
}

}  // namespace
}  // namespace icecache::eval
