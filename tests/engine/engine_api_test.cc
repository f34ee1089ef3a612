// Engine API behaviour on a tiny random llama model: batched decoding equals single-sequence
// decoding, teacher-forced Score equals prefill logits, sessions reuse and fork their KV.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "icecache/engine.h"
#include "testing/paths.h"
#include "testing/tiny_model.h"

namespace icecache {
namespace {

class EngineApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const testing::TinyModelSpec spec = testing::TinyLlamaSpec();
    dir_ = new std::string(testing::MakeTempDir("engine-api"));
    ASSERT_TRUE(testing::WriteTinyHfModel(spec, *dir_, testing::TinyTokenizerPath(spec)).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  std::unique_ptr<Engine> MakeEngine(int max_sequences = 4) {
    auto e = Engine::Create({.model = *dir_,
                             .context_size = 1024,
                             .prefill_chunk = 64,
                             .max_sequences = max_sequences});
    EXPECT_TRUE(e.ok()) << e.status().message();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  static std::vector<int32_t> Tokens(int n, int salt) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 37 + salt * 101) % 900 + 5);
    return t;
  }
  static std::string* dir_;
};
std::string* EngineApiTest::dir_ = nullptr;

TEST_F(EngineApiTest, BatchedGreedyEqualsSingle) {
  auto engine = MakeEngine();
  std::vector<GenerateRequest> reqs(3);
  for (int i = 0; i < 3; ++i) {
    reqs[i].prompt_tokens = Tokens(20 + 30 * i, i);
    reqs[i].max_tokens = 12 + 4 * i;  // different lengths: sequences leave the batch early
    reqs[i].ignore_eos = true;
  }
  auto batch = engine->GenerateBatch(reqs);
  ASSERT_TRUE(batch.ok()) << batch.status().message();
  ASSERT_EQ(batch->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    auto single = engine->Generate(reqs[i]);
    ASSERT_TRUE(single.ok());
    EXPECT_EQ((*batch)[i].tokens, single->tokens) << "request " << i;
    EXPECT_EQ((*batch)[i].tokens.size(), static_cast<size_t>(reqs[i].max_tokens));
  }
}

TEST_F(EngineApiTest, BatchLargerThanMaxSequencesIsAnError) {
  auto engine = MakeEngine(2);
  std::vector<GenerateRequest> reqs(3);
  for (auto& r : reqs) r.prompt_tokens = Tokens(8, 1);
  auto batch = engine->GenerateBatch(reqs);
  EXPECT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find("max_sequences"), std::string::npos);
}

TEST_F(EngineApiTest, ScoreMatchesPrefillLogits) {
  auto engine = MakeEngine();
  const std::vector<int32_t> context = Tokens(70, 3), continuation = Tokens(10, 4);
  auto scored = engine->Score({context, continuation, /*full_logprobs=*/true});
  ASSERT_TRUE(scored.ok()) << scored.status().message();
  ASSERT_EQ(scored->token_logprobs.size(), continuation.size());
  std::vector<int32_t> all = context;
  all.insert(all.end(), continuation.begin(), continuation.end());
  std::vector<int64_t> positions;
  for (size_t i = 0; i < continuation.size(); ++i) positions.push_back(context.size() - 1 + i);
  auto logits = engine->Logits(all, positions);
  ASSERT_TRUE(logits.ok());
  for (size_t i = 0; i < continuation.size(); ++i) {
    const std::vector<float>& l = (*logits)[i];
    double m = l[0], sum = 0;
    for (float v : l) m = std::max(m, static_cast<double>(v));
    for (float v : l) sum += std::exp(v - m);
    const double want = l[continuation[i]] - m - std::log(sum);
    EXPECT_NEAR(scored->token_logprobs[i], want, 1e-4) << "step " << i;
    EXPECT_NEAR(scored->logprobs[i][continuation[i]], want, 1e-4);
  }
}

TEST_F(EngineApiTest, SessionReusesPrefixAndForkCopiesKv) {
  auto engine = MakeEngine();
  auto session = engine->NewSession();
  ASSERT_TRUE(session.ok());
  GenerateRequest first;
  first.prompt_tokens = Tokens(50, 7);
  first.max_tokens = 5;
  first.ignore_eos = true;
  auto a = (*session)->Generate(first);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->stats.cached_tokens, 0);

  // Extend the conversation: the whole history is reused.
  GenerateRequest second = first;
  second.prompt_tokens = (*session)->history();
  for (int32_t t : Tokens(6, 9)) second.prompt_tokens.push_back(t);
  auto fork = (*session)->Fork(KvConfig{});
  ASSERT_TRUE(fork.ok()) << fork.status().message();
  auto b = (*session)->Generate(second);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->stats.cached_tokens, static_cast<int64_t>(first.prompt_tokens.size() + 4));
  // The fork holds the same KV, so it continues identically; a fresh engine agrees too.
  auto c = (*fork)->Generate(second);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tokens, b->tokens);
  EXPECT_EQ(c->stats.cached_tokens, b->stats.cached_tokens);
  auto fresh = engine->Generate(second);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->tokens, b->tokens);
}

TEST_F(EngineApiTest, UnknownPolicyIsAnError) {
  EngineOptions o{.model = *dir_};
  o.kv.policy = "magic";
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("magic"), std::string::npos);
}

TEST_F(EngineApiTest, SearchRadiusOutsideZeroToOneIsAnError) {
  EngineOptions o{.model = *dir_};
  o.kv.policy = "icecache";
  for (float w : {-0.1f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    o.kv.search_radius = w;
    auto e = Engine::Create(o);
    ASSERT_FALSE(e.ok()) << w;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("--kv-search-radius"), std::string::npos);
  }
  o.kv.search_radius = 1.0f;
  EXPECT_TRUE(Engine::Create(o).ok());
}

TEST_F(EngineApiTest, OracleScoreIsChecked) {
  EngineOptions o{.model = *dir_};
  o.kv.policy = "oracle";
  o.kv.oracle_unit = "token";
  o.kv.oracle_score = "loudest";
  auto bad = Engine::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--kv-oracle-score"), std::string::npos);
  // Policies other than the token oracle ignore it, as they ignore --kv-oracle-unit: the
  // fidelity and needle evals run full attention beside the oracle with the same options.
  for (const char* policy : {"oracle", "full", "icecache"}) {
    for (const char* score : {"logit", "mass"}) {
      o.kv.policy = policy;
      o.kv.oracle_score = score;
      EXPECT_TRUE(Engine::Create(o).ok()) << policy << " " << score;
    }
  }
}

TEST_F(EngineApiTest, SearchScoreIsChecked) {
  EngineOptions o{.model = *dir_};
  o.kv.policy = "icecache";
  o.kv.search_score = "loudest";
  auto bad = Engine::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-search-score"), std::string::npos);
  o.kv.search_score = "mass";
  o.kv.rank = "centroid";
  bad = Engine::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("excludes --kv-rank centroid"), std::string::npos);
  o.kv.rank = "auto";
  o.kv.search_leaves = -1;
  bad = Engine::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-search-leaves"), std::string::npos);
  o.kv.search_leaves = 100;
  EXPECT_TRUE(Engine::Create(o).ok());
}

TEST_F(EngineApiTest, KvOffloadOptionIsChecked) {
  EngineOptions o{.model = *dir_};
  o.kv_offload = "sometimes";
  auto bad = Engine::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--kv-offload"), std::string::npos);
  // On the CPU all KV is host memory already: every value works and nothing is offloaded.
  for (const char* v : {"auto", "on", "off"}) {
    o.kv_offload = v;
    o.kv.policy = "quest";
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << v << ": " << e.status().message();
    EXPECT_FALSE((*e)->info().kv_offloaded);
  }
}

}  // namespace
}  // namespace icecache
