// icecache through the real engine: a budget covering the context reproduces full attention bit
// for bit (tiny random llama and, when downloaded, SmolLM2-135M); small budgets attend within
// the budget after the index re-arranged the pages (also with layers reusing selections); sampling
// is deterministic for a seed; a long SmolLM2 prompt decodes within the budget with the
// best-first search and in exact mode.
#include <gtest/gtest.h>

#include <cstring>

#include "icecache/engine.h"
#include "testing/paths.h"
#include "testing/tiny_model.h"

namespace icecache {
namespace {

KvConfig IcePolicy(int budget, bool exact, int page = 8) {
  KvConfig kv;
  kv.policy = "icecache";
  kv.budget = budget;
  kv.page_size = page;
  kv.exact = exact;
  return kv;
}

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 53 + salt * 97 + i * i) % 1000 + 3);
  return t;
}

void ExpectSameLogprobs(const ScoreResult& got, const ScoreResult& want) {
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  EXPECT_EQ(got.top1, want.top1);
  for (size_t i = 0; i < want.logprobs.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(got.logprobs[i].data(), want.logprobs[i].data(),
                             want.logprobs[i].size() * sizeof(float)))
        << "step " << i << " differs";
  }
}

class IceCacheEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const testing::TinyModelSpec spec = testing::TinyLlamaSpec();
    dir_ = new std::string(testing::MakeTempDir("icecache_engine"));
    ASSERT_TRUE(testing::WriteTinyHfModel(spec, *dir_, testing::TinyTokenizerPath(spec)).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::unique_ptr<Engine> MakeEngine(const std::string& model, const KvConfig& kv,
                                            int ctx = 1024) {
    EngineOptions o{.model = model, .context_size = ctx, .prefill_chunk = 64, .max_sequences = 2};
    o.kv = kv;
    auto e = Engine::Create(o);
    EXPECT_TRUE(e.ok()) << e.status().message();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  static std::string* dir_;
};
std::string* IceCacheEngineTest::dir_ = nullptr;

// Dense attention (policy full) and the sparse path with every page selected must agree.
TEST_F(IceCacheEngineTest, BudgetCoveringContextEqualsFullBitForBit) {
  const std::vector<int32_t> context = Tokens(150, 1), continuation = Tokens(40, 2);
  KvConfig full_kv;
  full_kv.page_size = 8;
  auto want = MakeEngine(*dir_, full_kv)->Score({context, continuation, true});
  ASSERT_TRUE(want.ok());
  for (bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact" : "best-first");
    auto got = MakeEngine(*dir_, IcePolicy(512, exact))->Score({context, continuation, true});
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectSameLogprobs(*got, *want);
    EXPECT_EQ(got->kv.sparse_layers, 3);
    EXPECT_GT(got->kv.tokens_attended, 150);
  }
}

// The same through the sparse path only: icecache with a covering budget selects every page in
// order, exactly as quest does then.
TEST_F(IceCacheEngineTest, BudgetCoveringContextEqualsQuestBitForBit) {
  const std::vector<int32_t> context = Tokens(150, 1), continuation = Tokens(40, 2);
  KvConfig quest_kv = IcePolicy(512, false);
  quest_kv.policy = "quest";
  auto want = MakeEngine(*dir_, quest_kv)->Score({context, continuation, true});
  ASSERT_TRUE(want.ok());
  auto got = MakeEngine(*dir_, IcePolicy(512, true))->Score({context, continuation, true});
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectSameLogprobs(*got, *want);
}

TEST_F(IceCacheEngineTest, SmallBudgetsAttendWithinBudgetAndSampleDeterministically) {
  const std::vector<int32_t> context = Tokens(400, 3), continuation = Tokens(24, 4);
  for (int mode = 0; mode < 4; ++mode) {
    SCOPED_TRACE(mode == 0   ? "best-first"
                 : mode == 1 ? "exact"
                 : mode == 2 ? "best-first, reuse_layers 2"
                             : "best-first by mass, 100 candidate leaves");
    KvConfig kv = IcePolicy(64, mode == 1);
    if (mode == 2) kv.reuse_layers = 2;
    if (mode == 3) {
      kv.search_score = "mass";
      kv.search_leaves = 100;
    }
    auto engine = MakeEngine(*dir_, kv);
    auto got = engine->Score({context, continuation, false});
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_LE(got->kv.tokens_attended, 64.0);
    EXPECT_GT(got->kv.tokens_attended, 40.0);
    EXPECT_GT(got->kv.context_tokens, 400.0);
    EXPECT_GT(got->kv.nodes_visited, 0.0);
    EXPECT_EQ(got->kv.decode_steps, static_cast<int64_t>(continuation.size()) - 1);
    GenerateRequest r;
    r.prompt_tokens = Tokens(300, 6);
    r.max_tokens = 40;
    r.ignore_eos = true;
    r.sampling.temperature = 0.9f;
    r.sampling.seed = 1234;
    auto a = engine->Generate(r);
    auto b = engine->Generate(r);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->tokens, b->tokens);
  }
}

TEST_F(IceCacheEngineTest, SmolLM2BudgetCoveringContextEqualsFull) {
  const std::string model = testing::DefaultModelPath();
  if (model.empty()) GTEST_SKIP() << "default model not downloaded (scripts/fetch_model.sh)";
  const std::vector<int32_t> context = Tokens(200, 5), continuation = Tokens(8, 6);
  KvConfig full_kv;
  auto want = MakeEngine(model, full_kv)->Score({context, continuation, true});
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto got = MakeEngine(model, IcePolicy(256, false, 16))->Score({context, continuation, true});
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectSameLogprobs(*got, *want);
}

TEST_F(IceCacheEngineTest, SmolLM2LongPromptDecodesWithinBudget) {
  const std::string model = testing::DefaultModelPath();
  if (model.empty()) GTEST_SKIP() << "default model not downloaded (scripts/fetch_model.sh)";
  std::string text;
  for (int i = 0; i < 40; ++i) {
    text += "Section " + std::to_string(i) +
            ". The archive keeps letters, maps and ledgers of the old harbour town. ";
    if (i == 17) text += "The keeper's code word is LANTERN. ";
  }
  text += "What is the keeper's code word? The code word is";
  GenerateRequest r;
  r.prompt = text;
  r.max_tokens = 6;
  r.ignore_eos = true;
  std::vector<std::vector<int32_t>> outputs;
  for (bool exact : {false, true}) {
    auto engine = MakeEngine(model, IcePolicy(192, exact, 16), 2048);
    auto got = engine->Generate(r);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_LE(got->stats.kv.tokens_attended, 192.0);
    EXPECT_GT(got->stats.kv.context_tokens, 500.0);
    std::printf("%s: '%s' (%.1f nodes visited per list and step)\n", exact ? "exact" : "best-first",
                got->text.c_str(), got->stats.kv.nodes_visited);
    outputs.push_back(got->tokens);
  }
  EXPECT_EQ(outputs[0].size(), 6u);
}

}  // namespace
}  // namespace icecache
