// --kv-recall: the attention-mass recall of what each decode step attends. AttentionRecall is
// checked against a brute-force softmax; through the engine, full attention and selections that
// cover the context give exactly 1, small budgets give values in [0, 1] and measuring never
// changes the decode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "engine/attention_recall.h"
#include "engine/engine_impl.h"
#include "kv/kv_sequence.h"
#include "kv/page_pool.h"
#include "testing/paths.h"
#include "testing/tiny_model.h"

namespace icecache {
namespace {

// A sequence of `n` tokens with deterministic keys in one layer and two KV heads.
class SmallSequence {
 public:
  explicit SmallSequence(int64_t n) {
    layout_ = KvLayout{1, 2, 8, 4, DType::kF32};
    backend_ = MakeCpuBackend({.threads = 1});
    auto pool = PagePool::Create(*backend_, layout_, layout_.PagesForTokens(n));
    EXPECT_TRUE(pool.ok());
    pool_ = std::move(pool).value();
    seq_ = std::make_unique<KvSequence>(pool_.get());
    EXPECT_TRUE(seq_->Grow(n).ok());
    std::vector<int32_t> slots(static_cast<size_t>(n) * 2);
    seq_->Slots(0, 0, n, slots.data());
    const KvPoolView v = pool_->view();
    for (int64_t t = 0; t < n; ++t) {
      for (int h = 0; h < 2; ++h) {
        float* k = static_cast<float*>(v.k) + static_cast<int64_t>(slots[t * 2 + h]) * 8;
        for (int j = 0; j < 8; ++j) k[j] = std::sin(0.7f * t + 1.3f * j + 2.1f * h);
        v.positions[slots[t * 2 + h]] = static_cast<int32_t>(t);
      }
    }
  }
  const KvSequence& seq() const { return *seq_; }
  const float* Key(int h, int64_t i) const {
    const PageRef& p = seq_->pages(0, h)[i / 4];
    return static_cast<const float*>(pool_->view().k) + (p.id * 4 + i % 4) * 8;
  }

 private:
  KvLayout layout_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<KvSequence> seq_;
};

// Recall by the definition, in double.
double BruteForce(const SmallSequence& s, int h, const float* q, float scale,
                  const std::vector<bool>& chosen) {
  std::vector<double> e;
  double m = -1e300;
  for (size_t i = 0; i < chosen.size(); ++i) {
    double dot = 0;
    for (int j = 0; j < 8; ++j) dot += static_cast<double>(q[j]) * s.Key(h, i)[j];
    e.push_back(scale * dot);
    m = std::max(m, e.back());
  }
  double total = 0, in = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    total += std::exp(e[i] - m);
    if (chosen[i]) in += std::exp(e[i] - m);
  }
  return in / total;
}

TEST(AttentionRecallTest, MatchesBruteForceSoftmaxMass) {
  const int64_t n = 37;  // 10 pages of 4, the last one partly filled
  SmallSequence s(n);
  // Two query heads per KV head (GQA group 2), four query heads in all.
  std::vector<float> q(4 * 8);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 2.0f * std::cos(0.9f * static_cast<float>(i));
  const float scale = 0.5f;
  AttentionRecall recall;
  for (int h = 0; h < 2; ++h) {
    SCOPED_TRACE(h);
    const std::vector<PageRef>& pages = s.seq().pages(0, h);
    // Pages 1, 4 and the tail page, and only the first 2 tokens of page 6.
    std::vector<PageRef> chosen_pages = {pages[1], pages[4], {pages[6].id, 2}, pages[9]};
    std::vector<bool> chosen(n, false);
    for (int i : {4, 5, 6, 7, 16, 17, 18, 19, 24, 25, 36}) chosen[i] = true;
    RecallTally tally;
    recall.AddPages(s.seq(), 0, h, q.data(), 2, scale, chosen_pages, &tally);
    ASSERT_EQ(tally.samples(), 2);
    const double want = BruteForce(s, h, q.data() + (h * 2) * 8, scale, chosen) +
                        BruteForce(s, h, q.data() + (h * 2 + 1) * 8, scale, chosen);
    EXPECT_NEAR(tally.Mean() * 2, want, 1e-5);
    EXPECT_GT(tally.min(), 0.0);
    EXPECT_LT(tally.min(), 1.0);

    // The same tokens as slots give the same samples.
    std::vector<int32_t> slots;
    for (const PageRef& p : chosen_pages) {
      for (int t = 0; t < p.len; ++t) slots.push_back(p.id * 4 + t);
    }
    RecallTally by_slots;
    recall.AddSlots(s.seq(), 0, h, q.data(), 2, scale, slots, &by_slots);
    EXPECT_EQ(by_slots.Mean(), tally.Mean());

    // Everything: exactly 1. Nothing: exactly 0. Marks do not leak between calls.
    RecallTally all, none;
    recall.AddPages(s.seq(), 0, h, q.data(), 2, scale, pages, &all);
    recall.AddPages(s.seq(), 0, h, q.data(), 2, scale, {}, &none);
    EXPECT_EQ(all.Mean(), 1.0);
    EXPECT_EQ(all.min(), 1.0);
    EXPECT_EQ(none.Mean(), 0.0);
  }
}

TEST(AttentionRecallTest, TallyPercentiles) {
  RecallTally t;
  EXPECT_EQ(t.samples(), 0);
  EXPECT_EQ(t.Percentile(0.1), 0.0);
  for (int i = 0; i < 100; ++i) t.Add(i / 100.0);
  EXPECT_EQ(t.samples(), 100);
  EXPECT_NEAR(t.Mean(), 0.495, 1e-12);
  EXPECT_EQ(t.min(), 0.0);
  EXPECT_NEAR(t.Percentile(0.1), 0.10, 0.0011);
  t.Add(1.0);
  EXPECT_EQ(t.Percentile(1.0), 1.0);
}

class RecallEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const testing::TinyModelSpec spec = testing::TinyLlamaSpec();
    dir_ = new std::string(testing::MakeTempDir("recall"));
    ASSERT_TRUE(testing::WriteTinyHfModel(spec, *dir_, testing::TinyTokenizerPath(spec)).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static Result<ScoreResult> Score(const KvConfig& kv) {
    EngineOptions o{.model = *dir_, .context_size = 1024, .prefill_chunk = 64};
    o.kv = kv;
    ICECACHE_ASSIGN_OR_RETURN(auto engine, Engine::Create(o));
    std::vector<int32_t> context, continuation;
    for (int i = 0; i < 300; ++i) context.push_back((i * 53 + 97 + i * i) % 1000 + 3);
    for (int i = 0; i < 12; ++i) continuation.push_back((i * 31 + 7) % 1000 + 3);
    return engine->Score({context, continuation, true});
  }
  static KvConfig Policy(const std::string& name, int budget, bool recall) {
    KvConfig kv;
    kv.policy = name;
    kv.budget = budget;
    kv.page_size = 8;
    kv.recall = recall;
    return kv;
  }
  static void ExpectSameLogits(const ScoreResult& a, const ScoreResult& b) {
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t i = 0; i < a.logprobs.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(a.logprobs[i].data(), b.logprobs[i].data(),
                               a.logprobs[i].size() * sizeof(float)))
          << "step " << i;
    }
  }
  static constexpr int kSteps = 11, kLayers = 3, kHeads = 4;
  static std::string* dir_;
};
std::string* RecallEngineTest::dir_ = nullptr;

TEST_F(RecallEngineTest, FullAttentionHasRecallExactlyOne) {
  auto plain = Score(Policy("full", 256, false));
  auto measured = Score(Policy("full", 256, true));
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_TRUE(measured.ok()) << measured.status().message();
  EXPECT_EQ(plain->kv.recall_samples, 0);
  EXPECT_EQ(measured->kv.recall_samples, kSteps * kLayers * kHeads);
  EXPECT_EQ(measured->kv.recall_mean, 1.0);
  EXPECT_EQ(measured->kv.recall_min, 1.0);
  EXPECT_EQ(measured->kv.recall_p10, 1.0);
  // Accounting is the same as on the dense path: every token, every layer, once.
  EXPECT_EQ(measured->kv.tokens_attended_dense, plain->kv.tokens_attended_dense);
  EXPECT_EQ(measured->kv.dense_layers, kLayers);
  ExpectSameLogits(*plain, *measured);
}

TEST_F(RecallEngineTest, SelectionsCoveringTheContextHaveRecallExactlyOne) {
  for (const char* unit : {"page", "token"}) {
    SCOPED_TRACE(unit);
    KvConfig kv = Policy("oracle", 512, true);
    kv.oracle_unit = unit;
    auto r = Score(kv);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->kv.recall_samples, kSteps * kLayers * kHeads);
    EXPECT_EQ(r->kv.recall_mean, 1.0);
    EXPECT_EQ(r->kv.recall_min, 1.0);
  }
}

TEST_F(RecallEngineTest, SmallBudgetsGiveRecallInRangeWithoutChangingTheDecode) {
  for (const char* name : {"streaming", "quest", "oracle", "lychee", "icecache"}) {
    SCOPED_TRACE(name);
    auto plain = Score(Policy(name, 64, false));
    auto measured = Score(Policy(name, 64, true));
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    ASSERT_TRUE(measured.ok()) << measured.status().message();
    EXPECT_EQ(measured->kv.recall_samples, kSteps * kLayers * kHeads);
    EXPECT_GE(measured->kv.recall_min, 0.0);
    EXPECT_LE(measured->kv.recall_min, measured->kv.recall_p10);
    EXPECT_LE(measured->kv.recall_p10, 1.0);
    EXPECT_LE(measured->kv.recall_mean, 1.0);
    // 64 of ~300 tokens: some mass is missed somewhere.
    EXPECT_LT(measured->kv.recall_min, 1.0);
    ExpectSameLogits(*plain, *measured);
  }
}

}  // namespace
}  // namespace icecache
