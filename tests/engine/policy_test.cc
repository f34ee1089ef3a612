// KV selection policies through the real engine on a tiny random llama model: budgets that cover
// the context reproduce full attention bit for bit; oracle selections are the exact best pages
// and tokens; quest bounds hold; the host tier keeps every token's K/V through generation;
// sampling with a policy is deterministic for a seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "engine/attention_recall.h"
#include "engine/engine_impl.h"
#include "index/key_reader.h"
#include "index/policy.h"
#include "index/regions.h"
#include "testing/paths.h"
#include "testing/tiny_model.h"

namespace icecache {
namespace {

class PolicyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const testing::TinyModelSpec spec = testing::TinyLlamaSpec();
    dir_ = new std::string(testing::MakeTempDir("policy"));
    ASSERT_TRUE(testing::WriteTinyHfModel(spec, *dir_, testing::TinyTokenizerPath(spec)).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::unique_ptr<Engine> MakeEngine(const KvConfig& kv, int ctx = 1024) {
    EngineOptions o{.model = *dir_, .context_size = ctx, .prefill_chunk = 64, .max_sequences = 3};
    o.kv = kv;
    auto e = Engine::Create(o);
    EXPECT_TRUE(e.ok()) << e.status().message();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  static KvConfig Policy(const std::string& name, int budget) {
    KvConfig kv;
    kv.policy = name;
    kv.budget = budget;
    kv.page_size = 8;
    return kv;
  }
  static std::vector<int32_t> Tokens(int n, int salt) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 53 + salt * 97 + i * i) % 1000 + 3);
    return t;
  }
  static std::string* dir_;
};
std::string* PolicyTest::dir_ = nullptr;

// Every policy whose budget covers the context gives exactly the full-attention result.
TEST_F(PolicyTest, BudgetCoveringContextEqualsFullBitForBit) {
  const std::vector<int32_t> context = Tokens(150, 1), continuation = Tokens(40, 2);
  auto full = MakeEngine(Policy("full", 256));
  auto want = full->Score({context, continuation, true});
  ASSERT_TRUE(want.ok());
  for (const char* name : {"streaming", "quest", "oracle", "icecache"}) {
    SCOPED_TRACE(name);
    KvConfig kv = Policy(name, 512);
    if (std::string(name) == "streaming") kv.window = 512 - 8;
    auto engine = MakeEngine(kv);
    auto got = engine->Score({context, continuation, true});
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->top1, want->top1);
    for (size_t i = 0; i < continuation.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(got->logprobs[i].data(), want->logprobs[i].data(),
                               want->logprobs[i].size() * sizeof(float)))
          << "step " << i << " differs";
    }
    EXPECT_GT(got->kv.tokens_attended, 0);
    EXPECT_EQ(got->kv.sparse_layers, 3);
  }
}

TEST_F(PolicyTest, SparsePoliciesAttendWithinBudget) {
  const std::vector<int32_t> context = Tokens(400, 3), continuation = Tokens(24, 4);
  for (const char* name : {"streaming", "quest", "oracle", "icecache"}) {
    SCOPED_TRACE(name);
    auto engine = MakeEngine(Policy(name, 64));
    auto got = engine->Score({context, continuation, false});
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_LE(got->kv.tokens_attended, 64.0);
    EXPECT_GT(got->kv.tokens_attended, 32.0);
    EXPECT_GT(got->kv.context_tokens, 400.0);
    EXPECT_GT(got->kv.pages_fetched, 0.0);
    EXPECT_EQ(got->kv.decode_steps, static_cast<int64_t>(continuation.size()) - 1);
  }
}

// Direct checks of one Select call against brute force on a real sequence's keys.
class SelectTest : public PolicyTest {
 protected:
  void SetUp() override {
    engine_ = MakeEngine(Policy("full", 256));
    auto* impl = static_cast<EngineImpl*>(engine_.get());
    auto st = impl->NewState(nullptr);
    ASSERT_TRUE(st.ok());
    state_ = std::move(st).value();
    GenerateRequest r;
    r.prompt_tokens = Tokens(300, 5);
    r.max_tokens = 1;
    ASSERT_TRUE(impl->RunOn(*state_, r, {}).ok());
  }
  const KvSequence& Seq() const { return state_->seq; }
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<SequenceState> state_;
};

TEST_F(SelectTest, OracleSelectsTheExactBestPagesAndTokens) {
  const KvSequence& seq = Seq();
  const KvLayout& layout = seq.layout();
  const int heads = 4, kv_heads = layout.n_kv_heads, d = layout.head_dim;
  const KvConfig kv = Policy("oracle", 64);
  IndexContext ctx{kv, layout, heads, LimitsFor(kv), nullptr};
  auto index = MakeSequenceIndex(ctx);
  ASSERT_TRUE(index.ok());
  std::vector<float> q(static_cast<size_t>(heads) * d);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * static_cast<float>(i) + 1.0f);
  std::vector<std::vector<PageRef>> out(kv_heads);
  SelectionStats stats;
  (*index)->Select(seq, 1, q.data(), out, &stats);
  KeyReader keys(seq.pool().view());
  const int group = heads / kv_heads;
  for (int h = 0; h < kv_heads; ++h) {
    const ListRegions r = RegionsOf(seq, 1, h, ctx.limits);
    // Brute force: best score of each selectable page.
    std::vector<std::pair<float, int32_t>> page_scores;
    const auto& pages = seq.pages(1, h);
    for (int32_t i = r.sink_end; i < r.window_begin; ++i) {
      const float* k = keys.Keys(pages[i].id, pages[i].len);
      float best = -1e30f;
      for (int t = 0; t < pages[i].len; ++t) {
        for (int g = 0; g < group; ++g) {
          best = std::max(best, Dot(q.data() + (h * group + g) * d, k + t * d, d));
        }
      }
      page_scores.emplace_back(best, pages[i].id);
    }
    std::sort(page_scores.begin(), page_scores.end(), std::greater<>());
    const int chosen = static_cast<int>(out[h].size()) - r.sink_end - (r.end - r.window_begin);
    ASSERT_GT(chosen, 0);
    // The chosen pages are exactly the best `chosen` pages (recall 1 for oracle).
    for (int i = 0; i < chosen; ++i) EXPECT_EQ(out[h][r.sink_end + i].id, page_scores[i].second);
    int tokens = 0;
    for (const PageRef& p : out[h]) tokens += p.len;
    EXPECT_LE(tokens, 64);
  }
  // Token unit: the non-sink, non-window tokens chosen are the exact top tokens.
  KvConfig kt = kv;
  kt.oracle_unit = "token";
  IndexContext ctx_t{kt, layout, heads, LimitsFor(kt), nullptr};
  auto tindex = MakeSequenceIndex(ctx_t);
  ASSERT_TRUE(tindex.ok());
  ASSERT_TRUE((*tindex)->token_level());
  std::vector<std::vector<int32_t>> slots(kv_heads);
  (*tindex)->SelectTokens(seq, 1, q.data(), slots, &stats);
  for (int h = 0; h < kv_heads; ++h) {
    EXPECT_LE(slots[h].size(), 64u);
    std::vector<std::pair<float, int32_t>> all;
    for (const PageRef& p : seq.pages(1, h)) {
      const float* k = keys.Keys(p.id, p.len);
      const int32_t* pos = keys.Positions(p.id);
      for (int t = 0; t < p.len; ++t) {
        if (pos[t] < ctx_t.limits.sink || pos[t] >= seq.length() - ctx_t.limits.window) continue;
        float best = -1e30f;
        for (int g = 0; g < group; ++g) {
          best = std::max(best, Dot(q.data() + (h * group + g) * d, k + t * d, d));
        }
        all.emplace_back(best, p.id * layout.page_size + t);
      }
    }
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    std::vector<int32_t> want;
    const size_t fixed = static_cast<size_t>(ctx_t.limits.sink + ctx_t.limits.window);
    for (size_t i = 0; i < all.size() && want.size() + fixed < 64; ++i)
      want.push_back(all[i].second);
    std::vector<int32_t> got(slots[h].end() - static_cast<std::ptrdiff_t>(want.size()),
                             slots[h].end());
    EXPECT_EQ(got, want) << "head " << h;
  }
}

// --kv-oracle-score mass: the token oracle takes the candidates of greatest attention mass summed
// over the group's query heads, so the mass it attends (what --kv-recall measures) is at least
// that of the oracle by max q.k, for every query and KV head, and of any other choice of as many
// candidates.
TEST_F(SelectTest, MassScoredTokenOracleAttendsTheMostAttentionMass) {
  const KvSequence& seq = Seq();
  const KvLayout& layout = seq.layout();
  const int heads = 4, kv_heads = layout.n_kv_heads, d = layout.head_dim;
  const int group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  KvConfig by_logit = Policy("oracle", 64);
  by_logit.oracle_unit = "token";
  KvConfig by_mass = by_logit;
  by_mass.oracle_score = "mass";
  auto logit_index = MakeSequenceIndex({by_logit, layout, heads, LimitsFor(by_logit), nullptr});
  auto mass_index = MakeSequenceIndex({by_mass, layout, heads, LimitsFor(by_mass), nullptr});
  ASSERT_TRUE(logit_index.ok() && mass_index.ok());
  AttentionRecall meter;
  int better = 0;
  for (int trial = 0; trial < 8; ++trial) {
    // Query heads of different scales, so that the heads' logits run at different heights.
    std::vector<float> q(static_cast<size_t>(heads) * d);
    for (size_t i = 0; i < q.size(); ++i) {
      const float head_scale = 1.0f + 2.0f * static_cast<float>((i / d + trial) % heads);
      q[i] = head_scale * std::sin(0.37f * static_cast<float>(i) + 0.9f * trial);
    }
    for (int layer : {1, 2}) {
      std::vector<std::vector<int32_t>> logit_slots(kv_heads), mass_slots(kv_heads);
      SelectionStats stats;
      (*logit_index)->SelectTokens(seq, layer, q.data(), logit_slots, &stats);
      (*mass_index)->SelectTokens(seq, layer, q.data(), mass_slots, &stats);
      for (int h = 0; h < kv_heads; ++h) {
        ASSERT_EQ(mass_slots[h].size(), logit_slots[h].size());
        // Beyond the sink and window some candidates were chosen; the last slot is one of them.
        const SelectionLimits lim = LimitsFor(by_mass);
        ASSERT_GT(mass_slots[h].size(), static_cast<size_t>(lim.sink + lim.window));
        RecallTally logit_mass, mass_mass;
        meter.AddSlots(seq, layer, h, q.data(), group, scale, logit_slots[h], &logit_mass);
        meter.AddSlots(seq, layer, h, q.data(), group, scale, mass_slots[h], &mass_mass);
        EXPECT_GE(mass_mass.Mean(), logit_mass.Mean() - 1e-6)
            << "trial " << trial << " layer " << layer << " head " << h;
        if (mass_mass.Mean() > logit_mass.Mean() + 1e-4) ++better;
        // Any other candidate in place of the last one chosen attends no more mass.
        std::vector<int32_t> swapped = mass_slots[h];
        for (const PageRef& p : seq.pages(layer, h)) {
          const int32_t slot = p.id * layout.page_size;  // a page's first token
          if (std::find(swapped.begin(), swapped.end(), slot) != swapped.end()) continue;
          swapped.back() = slot;
          RecallTally other;
          meter.AddSlots(seq, layer, h, q.data(), group, scale, swapped, &other);
          EXPECT_LE(other.Mean(), mass_mass.Mean() + 1e-6);
          swapped.back() = mass_slots[h].back();
        }
      }
    }
  }
  // The two scores pick differently on these keys: the check above is not vacuous.
  EXPECT_GT(better, 0);
}

TEST_F(SelectTest, QuestBoundHoldsForEveryKey) {
  const KvSequence& seq = Seq();
  const KvLayout& layout = seq.layout();
  const int heads = 4, d = layout.head_dim;
  const KvConfig kv = Policy("quest", 64);
  IndexContext ctx{kv, layout, heads, LimitsFor(kv), nullptr};
  auto index = MakeSequenceIndex(ctx);
  ASSERT_TRUE(index.ok());
  // The bound: sum_d max(q_d min_d, q_d max_d) >= q.k for each key of the page.
  KeyReader keys(seq.pool().view());
  for (const PageRef& p : seq.pages(2, 1)) {
    const float* k = keys.Keys(p.id, p.len);
    std::vector<float> lo(d, 1e30f), hi(d, -1e30f);
    for (int t = 0; t < p.len; ++t) {
      for (int j = 0; j < d; ++j) {
        lo[j] = std::min(lo[j], k[t * d + j]);
        hi[j] = std::max(hi[j], k[t * d + j]);
      }
    }
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<float> q(d);
      for (int j = 0; j < d; ++j) q[j] = std::cos(1.3f * j + trial);
      float bound = 0;
      for (int j = 0; j < d; ++j) bound += std::max(q[j] * lo[j], q[j] * hi[j]);
      for (int t = 0; t < p.len; ++t) EXPECT_GE(bound + 1e-4f, Dot(q.data(), k + t * d, d));
    }
  }
  // And quest's selection only uses pages of the right list.
  std::vector<float> q(static_cast<size_t>(heads) * d, 0.1f);
  std::vector<std::vector<PageRef>> out(layout.n_kv_heads);
  SelectionStats stats;
  (*index)->Select(seq, 2, q.data(), out, &stats);
  EXPECT_GT(stats.nodes_visited, 0);
  for (int h = 0; h < layout.n_kv_heads; ++h) {
    std::map<int32_t, int> ids;
    for (const PageRef& p : seq.pages(2, h)) ids[p.id] = p.len;
    for (const PageRef& p : out[h]) {
      ASSERT_TRUE(ids.count(p.id)) << "page from another list";
      EXPECT_EQ(ids[p.id], p.len);
    }
  }
}

TEST_F(PolicyTest, SamplingWithPolicyIsDeterministicForASeed) {
  for (const char* name : {"quest", "oracle", "streaming", "icecache"}) {
    auto engine = MakeEngine(Policy(name, 64));
    GenerateRequest r;
    r.prompt_tokens = Tokens(200, 6);
    r.max_tokens = 20;
    r.ignore_eos = true;
    r.sampling.temperature = 0.9f;
    r.sampling.seed = 1234;
    auto a = engine->Generate(r);
    auto b = engine->Generate(r);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->tokens, b->tokens) << name;
  }
}

// A decode step updates its sequences' indexes side by side (each on an index worker) when their
// page needs fit the pool together. Icecache's insertions and leaf splits, and lychee's chunk
// layouts, then run for three sequences at once; each must end as it does alone: the batch
// generates what each request generates by itself (whose updates run one at a time).
TEST_F(PolicyTest, IndexesOfABatchUpdateSideBySideAsAlone) {
  for (const char* name : {"icecache", "lychee"}) {
    SCOPED_TRACE(name);
    EngineOptions o{.model = *dir_, .context_size = 1024, .prefill_chunk = 64, .max_sequences = 3};
    o.threads = 2;  // two index workers, whatever this machine has
    o.kv = Policy(name, 64);
    auto made = Engine::Create(o);
    ASSERT_TRUE(made.ok()) << made.status().message();
    Engine& api = **made;
    auto* engine = static_cast<EngineImpl*>(&api);
    std::vector<GenerateRequest> reqs(3);
    for (int i = 0; i < 3; ++i) {
      reqs[i].prompt_tokens = Tokens(300 + 50 * i, 7 + i);
      reqs[i].max_tokens = 40;  // 40 tokens leave the window: five pages of 8 absorbed
      reqs[i].ignore_eos = true;
    }
    auto batch = api.GenerateBatch(reqs);
    ASSERT_TRUE(batch.ok()) << batch.status().message();
    EXPECT_GT(engine->parallel_index_updates(), 30);
    const int64_t batched = engine->parallel_index_updates();
    for (int i = 0; i < 3; ++i) {
      auto single = api.Generate(reqs[i]);
      ASSERT_TRUE(single.ok()) << single.status().message();
      EXPECT_EQ((*batch)[i].tokens, single->tokens) << "request " << i;
      EXPECT_GT((*batch)[i].stats.kv.update_seconds, 0.0);
    }
    EXPECT_EQ(engine->parallel_index_updates(), batched);  // a single sequence updates alone
  }
}

TEST_F(PolicyTest, UnimplementedOrInvalidPolicyConfigsAreErrors) {
  KvConfig kv = Policy("quest", 16);  // no room for a page after sink and window
  kv.window = 8;
  EngineOptions o{.model = *dir_};
  o.kv = kv;
  auto e = Engine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--kv-budget"), std::string::npos);
}

}  // namespace
}  // namespace icecache
