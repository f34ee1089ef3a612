// Device-side selection (--kv-select device) on the CPU backend, whose reference ops run the
// same path the GPU runs (PageBounds, SelectPages, MapPages, attention over the returned table):
// - for the same keys and queries SelectPages lists exactly QuestIndex::Select's pages, in
//   QuestIndex's order;
// - through the engine, quest selecting on the "device" gives bit for bit the logits of quest
//   selecting on the host (same pages, same order), and a covering budget gives full attention;
// - icecache with rank centroid selecting on the "device" (its lists re-arranged into leaf pages
//   by bulk builds, insertions and splits between steps) gives bit for bit the logits and tokens
//   attended of icecache rank centroid on the host; "auto" on a device resolves to rank centroid;
//   the same for lychee with rank centroid (lists re-arranged into chunk pages);
// - MapPages keeps the working set's slots equal to the selected host pages over random steps,
//   counts a repeated selection as all hits, and evicts only unselected pages; its prefetch mode
//   places pages without a table and leaves the pending page alone;
// - PageBounds writes mean keys in Q8_0 to the summary rows its caller names, and SelectPages
//   reads each entry's summary through its row;
// - prefetching from early query estimates changes no logit;
// - fetch behind defers the selected pages that are not resident and copies them in for the next
//   step (a covering budget still gives full attention);
// - running a batch's layers in two halves (ICECACHE_BATCH_HALVES) changes no token;
// - unsupported combinations are clear errors.
#include <gtest/gtest.h>

#include <cstdlib>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "backend/backend.h"
#include "engine/engine_impl.h"
#include "engine/sparse_attention.h"
#include "index/policy.h"
#include "index/regions.h"
#include "kv/key_mean.h"
#include "testing/kv_checks.h"
#include "testing/paths.h"
#include "testing/tiny_model.h"

namespace icecache {
namespace {

class DeviceSelectionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const testing::TinyModelSpec spec = testing::TinyLlamaSpec();
    dir_ = new std::string(testing::MakeTempDir("devsel"));
    ASSERT_TRUE(testing::WriteTinyHfModel(spec, *dir_, testing::TinyTokenizerPath(spec)).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static Result<std::unique_ptr<Engine>> Make(const KvConfig& kv, const std::string& where,
                                              bool prefetch = true, int context = 1024) {
    EngineOptions o{.model = *dir_, .context_size = context, .prefill_chunk = 64};
    o.kv = kv;
    o.kv_select = where;
    o.kv_prefetch = prefetch ? "on" : "off";
    return Engine::Create(o);
  }
  static KvConfig Quest(int budget) {
    KvConfig kv;
    kv.policy = "quest";
    kv.budget = budget;
    kv.page_size = 8;
    return kv;
  }
  // `policy` (quest, icecache or lychee) with rank centroid and pages of 8.
  static KvConfig Centroid(const std::string& policy, int budget) {
    KvConfig kv = Quest(budget);
    kv.policy = policy;
    kv.rank = "centroid";
    return kv;
  }
  static std::vector<int32_t> Tokens(int n, int salt) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 53 + salt * 97 + i * i) % 1000 + 3);
    return t;
  }
  static void ExpectSameLogits(const ScoreResult& a, const ScoreResult& b) {
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    EXPECT_EQ(a.top1, b.top1);
    for (size_t i = 0; i < a.logprobs.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(a.logprobs[i].data(), b.logprobs[i].data(),
                               a.logprobs[i].size() * sizeof(float)))
          << "step " << i << " differs";
    }
  }
  // Scores `r` with engines `a` and `b`, which must attend the same tokens: expects the same
  // logits and tokens attended, and returns both results (default ones after a failure).
  static std::pair<ScoreResult, ScoreResult> ScoreAlike(Result<std::unique_ptr<Engine>> a,
                                                        Result<std::unique_ptr<Engine>> b,
                                                        const ScoreRequest& r) {
    ScoreResult want, got;
    if (!ScoreBoth(a, b, r, &want, &got)) return {};
    ExpectSameAttention(got, want);
    return {want, got};
  }
  // Scores `r` with engines `a` (into `want`) and `b` (into `got`); false, with a failed
  // expectation, unless both engines were made and both scored.
  static bool ScoreBoth(const Result<std::unique_ptr<Engine>>& a,
                        const Result<std::unique_ptr<Engine>>& b, const ScoreRequest& r,
                        ScoreResult* want, ScoreResult* got) {
    EXPECT_TRUE(a.ok() && b.ok());
    if (!a.ok() || !b.ok()) return false;
    auto w = (*a)->Score(r);
    auto g = (*b)->Score(r);
    EXPECT_TRUE(w.ok() && g.ok()) << g.status().message();
    if (!w.ok() || !g.ok()) return false;
    *want = *std::move(w);
    *got = *std::move(g);
    return true;
  }
  // The same logits bit for bit and the same tokens attended.
  static void ExpectSameAttention(const ScoreResult& got, const ScoreResult& want) {
    ExpectSameLogits(got, want);
    EXPECT_DOUBLE_EQ(got.kv.tokens_attended, want.kv.tokens_attended);
  }
  // Scores `first`, then `second` in one session of a host-selecting and one of a
  // device-selecting engine; expects the same logits for `second` and returns its device result.
  static ScoreResult SecondContextsAgree(const KvConfig& kv, const ScoreRequest& first,
                                         const ScoreRequest& second, int context = 1024) {
    auto host = Make(kv, "host", true, context);
    auto device = Make(kv, "device", true, context);
    EXPECT_TRUE(host.ok() && device.ok());
    if (!host.ok() || !device.ok()) return {};
    auto hs = (*host)->NewSession();
    auto ds = (*device)->NewSession();
    EXPECT_TRUE(hs.ok() && ds.ok());
    if (!hs.ok() || !ds.ok()) return {};
    EXPECT_TRUE((*hs)->Score(first).ok() && (*ds)->Score(first).ok());
    auto want = (*hs)->Score(second);
    auto got = (*ds)->Score(second);
    EXPECT_TRUE(want.ok() && got.ok()) << got.status().message();
    if (!want.ok() || !got.ok()) return {};
    ExpectSameAttention(*got, *want);
    return *got;
  }
  static std::string* dir_;
};
std::string* DeviceSelectionTest::dir_ = nullptr;

TEST_F(DeviceSelectionTest, QuestOnTheDeviceEqualsQuestOnTheHostBitForBit) {
  const ScoreRequest r{Tokens(400, 3), Tokens(24, 4), true};
  for (int budget : {32, 64, 128}) {
    SCOPED_TRACE(budget);
    auto host = Make(Quest(budget), "host");
    auto device = Make(Quest(budget), "device");
    ASSERT_TRUE(host.ok() && device.ok());
    auto want = (*host)->Score(r);
    auto got = (*device)->Score(r);
    ASSERT_TRUE(want.ok() && got.ok()) << got.status().message();
    ExpectSameLogits(*got, *want);
    EXPECT_FALSE(want->kv.device_select);
    EXPECT_TRUE(got->kv.device_select);
    // The page summaries take a row per listed page (min | max keys, f32 on the CPU), counted as
    // allocated: at least the 53 pages per list of these 424 tokens, and less than a row for each
    // of the 128 pages per list that the pool holds for the engine's 1024-token context.
    const ModelInfo& info = (*device)->info();
    const int64_t lists = int64_t{info.n_layers} * info.n_kv_heads;
    const int64_t row_bytes = 2 * info.head_dim * static_cast<int64_t>(sizeof(float));
    EXPECT_GE(got->kv.device_index_bytes, 424 / 8 * lists * row_bytes);
    EXPECT_LT(got->kv.device_index_bytes, 1024 / 8 * lists * row_bytes);
    // Every selectable page is full here, so the planned count is what was attended.
    EXPECT_DOUBLE_EQ(got->kv.tokens_attended, want->kv.tokens_attended);
    EXPECT_DOUBLE_EQ(got->kv.nodes_visited, want->kv.nodes_visited);
    EXPECT_GT(got->kv.pages_fetched, 0.0);
    EXPECT_GT(got->kv.hit_rate, 0.0);
    EXPECT_LE(got->kv.hit_rate, 1.0);
  }
}

TEST_F(DeviceSelectionTest, CentroidRankOnTheDeviceEqualsTheHostBitForBit) {
  const ScoreRequest r{Tokens(420, 5), Tokens(40, 6), true};
  for (const char* policy : {"icecache", "lychee"}) {
    for (int budget : {32, 64, 128}) {
      SCOPED_TRACE(std::string(policy) + " " + std::to_string(budget));
      KvConfig ice = Quest(budget);
      ice.policy = policy;
      ice.rank = "centroid";
      auto host = Make(ice, "host");
      // icecache's "auto" becomes centroid where the selection runs on the device; lychee's stays
      // its bound search, so centroid is asked for.
      if (ice.policy == "icecache") ice.rank = "auto";
      auto device = Make(ice, "device");
      ASSERT_TRUE(host.ok() && device.ok());
      auto want = (*host)->Score(r);
      auto got = (*device)->Score(r);
      ASSERT_TRUE(want.ok() && got.ok()) << got.status().message();
      ExpectSameLogits(*got, *want);
      EXPECT_TRUE(got->kv.device_select);
      EXPECT_NE(got->kv.policy.find("rank centroid"), std::string::npos) << got->kv.policy;
      EXPECT_DOUBLE_EQ(got->kv.tokens_attended, want->kv.tokens_attended);
      EXPECT_LE(got->kv.tokens_attended, budget);
      EXPECT_DOUBLE_EQ(got->kv.nodes_visited, want->kv.nodes_visited);
      EXPECT_GT(got->kv.pages_fetched, 0.0);
      EXPECT_GT(got->kv.hit_rate, 0.0);
    }
  }
}

// A step's upload (limits, changed list entries, pages to summarize) is sized for the first
// context a session scores (at least 16384 i32). The session's second context, 8000 tokens, is
// re-arranged into leaf pages at the prompt's end (about 2000 entries in each of the 6 lists:
// over 40000 i32), so the upload grows there and the views into it move to the new buffer: the
// logits stay bit for bit those of the host's selection.
TEST_F(DeviceSelectionTest, AGrownUploadSelectsWhatTheHostSelects) {
  KvConfig ice = Quest(64);
  ice.policy = "icecache";
  ice.page_size = 4;
  ice.rank = "centroid";
  const ScoreResult got = SecondContextsAgree(ice, {Tokens(300, 7), Tokens(8, 8), true},
                                              {Tokens(8000, 9), Tokens(24, 10), true}, 8192);
  EXPECT_TRUE(got.kv.device_select);
}

// A session scores a second, different context: its pages are freed and handed out again (same
// ids, same token counts, new contents), which the residency map must not take for hits.
TEST_F(DeviceSelectionTest, ASessionsNextContextNeverHitsStaleCopies) {
  for (const char* policy : {"icecache", "lychee", "quest"}) {
    SCOPED_TRACE(policy);
    KvConfig kv = Centroid(policy, 64);
    SecondContextsAgree(kv, {Tokens(400, 11), Tokens(24, 12), true},
                        {Tokens(500, 13), Tokens(24, 14), true});
  }
}

// Prefetching the next layer's pages from an early query estimate (on by default, so every test
// above compares a prefetching device selection with the host's) moves pages earlier; it must
// not change what is selected or attended.
TEST_F(DeviceSelectionTest, PrefetchMovesPagesEarlierAndChangesNothingAttended) {
  const ScoreRequest r{Tokens(420, 21), Tokens(40, 22), true};
  for (const char* policy : {"quest", "icecache", "lychee"}) {
    SCOPED_TRACE(policy);
    KvConfig kv = Centroid(policy, 64);
    auto on = Make(kv, "device", true);
    ASSERT_TRUE(on.ok());
    const int64_t page_bytes = int64_t{2} * 8 * (*on)->info().head_dim * sizeof(float);
    const auto [want, got] = ScoreAlike(Make(kv, "device", false), std::move(on), r);
    EXPECT_EQ(want.kv.pages_prefetched, 0.0);
    EXPECT_GT(got.kv.pages_prefetched, 0.0);
    // Every page that crossed is counted once, fetched for a selection or prefetched.
    EXPECT_NEAR(got.kv.bytes_fetched, (got.kv.pages_fetched + got.kv.pages_prefetched) * page_bytes,
                1e-6);
    EXPECT_NEAR(want.kv.bytes_fetched, want.kv.pages_fetched * page_bytes, 1e-6);
  }
}

// The prefetch's A/B switches, read when the engine is made: ICECACHE_PREFETCH_EARLY=1 queues a
// layer's prefetch before the layer before it attends, with its own selection and copy list, and
// its copies after that attention (MapStage::kPlace, then kCopy), its estimate from the kept
// attention output of the last step;
// ICECACHE_PREFETCH_PERCENT=30 brings in only the best-ranked 30% of the budget's pages. Neither
// may change what is selected or attended; the partial one prefetches fewer pages.
TEST_F(DeviceSelectionTest, EarlyOrPartialPrefetchChangesNothingAttended) {
  const ScoreRequest r{Tokens(420, 23), Tokens(40, 24), true};
  KvConfig kv = Quest(64);
  kv.policy = "icecache";
  kv.rank = "centroid";
  auto off = Make(kv, "device", false);
  auto whole = Make(kv, "device", true);
  ASSERT_TRUE(off.ok() && whole.ok());
  auto want = (*off)->Score(r);
  auto all = (*whole)->Score(r);
  ASSERT_TRUE(want.ok() && all.ok());
  // An engine with the prefetch on, made while `vars` are set.
  auto make_with = [&](std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) setenv(name, value, 1);
    auto on = Make(kv, "device", true);
    for (const auto& v : vars) unsetenv(v.first);
    return on;
  };
  for (const char* early : {"0", "1"}) {
    for (const char* percent : {"100", "30"}) {
      SCOPED_TRACE(std::string("early ") + early + ", percent " + percent);
      auto on =
          make_with({{"ICECACHE_PREFETCH_EARLY", early}, {"ICECACHE_PREFETCH_PERCENT", percent}});
      ASSERT_TRUE(on.ok());
      auto got = (*on)->Score(r);
      ASSERT_TRUE(got.ok()) << got.status().message();
      ExpectSameLogits(*got, *want);
      EXPECT_DOUBLE_EQ(got->kv.tokens_attended, want->kv.tokens_attended);
      EXPECT_GT(got->kv.pages_prefetched, 0.0);
      if (std::string(percent) == "30") {
        EXPECT_LT(got->kv.pages_prefetched, all->kv.pages_prefetched);
      }
    }
  }
  // An estimate of one query row per KV group (the model has two heads a group): the first
  // head's, or the group's mean.
  for (const char* heads : {"1", "2"}) {
    SCOPED_TRACE(std::string("early, heads ") + heads);
    auto on = make_with({{"ICECACHE_PREFETCH_EARLY", "1"}, {"ICECACHE_PREFETCH_HEADS", heads}});
    ASSERT_TRUE(on.ok());
    auto got = (*on)->Score(r);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ExpectSameLogits(*got, *want);
    EXPECT_GT(got->kv.pages_prefetched, 0.0);
  }
}

// Which decode steps prefetch: on, every step with a device-selecting sequence; auto
// (--kv-prefetch auto on a GPU), only steps with exactly one (a batch's prefetches would queue one
// after another), and then as its tuner says (a fresh one first times steps with the prefetch);
// off, none. Layers kept dense select nothing, so they never prefetch.
TEST_F(DeviceSelectionTest, PrefetchModesChooseTheStepsThatPrefetch) {
  KvConfig kv = Quest(64);
  kv.dense_layers = 1;
  auto made = Make(kv, "device");
  ASSERT_TRUE(made.ok()) << made.status().message();
  auto* engine = static_cast<EngineImpl*>(made->get());
  std::vector<std::unique_ptr<SequenceState>> owned;
  for (int i = 0; i < 2; ++i) {
    auto st = engine->NewState(&kv);
    ASSERT_TRUE(st.ok()) << st.status().message();
    ASSERT_NE((*st)->device_select, nullptr);
    owned.push_back(std::move(st).value());
  }
  KvConfig none = kv;  // the engine's page size and dtype
  none.policy = "full";
  auto dense = engine->NewState(&none);
  ASSERT_TRUE(dense.ok()) << dense.status().message();
  SequenceState* one[] = {owned[0].get(), dense->get()};
  SequenceState* two[] = {owned[0].get(), owned[1].get()};
  const auto backend = MakeCpuBackend({});
  SparseAttention sa(backend.get(), ModelConfig{});
  using Mode = SparseAttention::PrefetchMode;
  struct Case {
    Mode mode;
    bool one_selecting, two_selecting;
  };
  for (const Case c : {Case{Mode::kOn, true, true}, Case{Mode::kAuto, true, false},
                       Case{Mode::kOff, false, false}}) {
    SCOPED_TRACE(static_cast<int>(c.mode));
    sa.set_prefetch(c.mode);
    sa.SetBatch(one);
    EXPECT_EQ(sa.WantsPrefetch(1), c.one_selecting);
    EXPECT_FALSE(sa.WantsPrefetch(0));  // dense layer
    sa.SetBatch(two);
    EXPECT_EQ(sa.WantsPrefetch(1), c.two_selecting);
  }
}

TEST_F(DeviceSelectionTest, CentroidCoveringBudgetEqualsFullAttention) {
  const ScoreRequest r{Tokens(150, 7), Tokens(40, 8), true};
  KvConfig full;
  full.page_size = 8;
  auto dense = Make(full, "auto");
  ASSERT_TRUE(dense.ok());
  auto want = (*dense)->Score(r);
  ASSERT_TRUE(want.ok());
  for (const char* policy : {"icecache", "lychee"}) {
    SCOPED_TRACE(policy);
    KvConfig kv = Quest(512);
    kv.policy = policy;
    kv.rank = "centroid";
    auto device = Make(kv, "device");
    ASSERT_TRUE(device.ok());
    auto got = (*device)->Score(r);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(got->kv.device_select);
    ExpectSameLogits(*got, *want);
  }
}

// --index-update beside (the CPU's reference ops stand in for the device): every decode step
// after the first runs the step before's index updates (insertions and leaf splits) on a host
// thread beside its own work, their time is reported apart, and the host tier keeps every token:
// forked into full attention, the session scores a continuation as a fresh full engine does over
// the same tokens (up to the order in which pages are summed). "after" runs none beside.
TEST_F(DeviceSelectionTest, IndexUpdatesBesideTheNextStepLoseNoToken) {
  KvConfig kv = Quest(64);
  kv.policy = "icecache";
  kv.rank = "centroid";
  for (const char* mode : {"beside", "after"}) {
    SCOPED_TRACE(mode);
    EngineOptions o{.model = *dir_, .context_size = 1024, .prefill_chunk = 64};
    o.threads = 2;
    o.kv = kv;
    o.kv_select = "device";
    o.kv_prefetch = "off";
    o.index_update = mode;
    auto made = Engine::Create(o);
    ASSERT_TRUE(made.ok()) << made.status().message();
    auto* engine = static_cast<EngineImpl*>(made->get());
    auto state = engine->NewState(nullptr);
    ASSERT_TRUE(state.ok());
    GenerateRequest r;
    r.prompt_tokens = Tokens(300, 5);
    r.max_tokens = 48;  // six pages of 8 leave the window
    r.ignore_eos = true;
    auto res = engine->RunOn(**state, r, {});
    ASSERT_TRUE(res.ok()) << res.status().message();
    const KvStats& st = res->stats.kv;
    ASSERT_GT(st.decode_steps, 40);
    if (std::string(mode) == "beside") {
      EXPECT_EQ(engine->beside_index_updates(), st.decode_steps - 1);
      EXPECT_GT(st.update_beside_seconds, 0.0);
    } else {
      EXPECT_EQ(engine->beside_index_updates(), 0);
      EXPECT_EQ(st.update_beside_seconds, 0.0);
      EXPECT_GT(st.update_seconds, 0.0);
    }
    // Every list holds every position once, in pages of its own; the pool holds nothing back and
    // lists every page it hands out (no page leaked by the held frees).
    const KvSequence& seq = (*state)->seq;
    std::set<int32_t> pages;
    int64_t absorbed = 0;
    ASSERT_NO_FATAL_FAILURE(testing::ExpectEveryPositionOnce(seq, &pages, &absorbed));
    EXPECT_GT(absorbed, 0);
    EXPECT_FALSE(seq.pool().holding());
    EXPECT_EQ(seq.pool().used(), static_cast<int64_t>(pages.size()));
  }
}

// A batch of icecache sequences (rank centroid) selecting in backend memory, generated with the
// environment `env` (name, value) set while the engine is made; `alone` (if given) gets each
// request generated on its own by the same engine. `dense_layers`: --kv-dense-layers.
std::vector<GenerateResult> GenerateThree(const std::string& dir,
                                          std::vector<std::pair<const char*, const char*>> env,
                                          std::vector<GenerateResult>* alone = nullptr,
                                          int dense_layers = 0) {
  KvConfig kv;
  kv.policy = "icecache";
  kv.rank = "centroid";
  kv.budget = 64;
  kv.page_size = 8;
  kv.dense_layers = dense_layers;
  std::vector<GenerateRequest> reqs(3);
  for (int i = 0; i < 3; ++i) {
    for (int t = 0; t < 200 + 40 * i; ++t)
      reqs[i].prompt_tokens.push_back((t * 53 + i * 97) % 997 + 3);
    reqs[i].max_tokens = 24;
    reqs[i].ignore_eos = true;
  }
  for (const auto& [name, value] : env) setenv(name, value, 1);
  EngineOptions o{.model = dir, .context_size = 1024, .prefill_chunk = 64};
  o.kv = kv;
  o.kv_select = "device";
  o.max_sequences = 3;
  auto made = Engine::Create(o);
  for (const auto& [name, value] : env) unsetenv(name);
  EXPECT_TRUE(made.ok()) << made.status().message();
  if (!made.ok()) return {};
  auto batch = (*made)->GenerateBatch(reqs);
  EXPECT_TRUE(batch.ok()) << batch.status().message();
  if (!batch.ok()) return {};
  for (const GenerateResult& r : *batch) {
    EXPECT_TRUE(r.stats.kv.device_select);
    EXPECT_GT(r.stats.kv.hit_rate, 0.0);
    EXPECT_GT(r.stats.kv.prepare_seconds, 0.0);  // timed on the host, part of the step
    EXPECT_LE(r.stats.kv.prepare_seconds, r.stats.kv.other_seconds);
  }
  for (int i = 0; alone != nullptr && i < 3; ++i) {
    auto one = (*made)->Generate(reqs[i]);
    EXPECT_TRUE(one.ok()) << one.status().message();
    if (one.ok()) alone->push_back(std::move(one).value());
  }
  return std::move(batch).value();
}

void ExpectSameRuns(const std::vector<GenerateResult>& a, const std::vector<GenerateResult>& b) {
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_DOUBLE_EQ(a[i].stats.kv.tokens_attended, b[i].stats.kv.tokens_attended);
    EXPECT_DOUBLE_EQ(a[i].stats.kv.hit_rate, b[i].stats.kv.hit_rate);
  }
}

// A batch of sequences that select in backend memory runs its selections, maps and attention as
// batched ops (one call each per layer); ICECACHE_DEVICE_BATCH=0 runs them one sequence after
// another (one lane each on a GPU). With the CPU's reference ops both give the same tokens and
// attend the same pages, and each sequence generates what it generates alone.
TEST_F(DeviceSelectionTest, BatchedOpsGenerateWhatOneSequenceAtATimeGenerates) {
  std::vector<GenerateResult> alone;
  const auto batched = GenerateThree(*dir_, {}, &alone);
  ASSERT_EQ(alone.size(), 3u);
  for (int i = 0; i < 3 && i < static_cast<int>(batched.size()); ++i) {
    EXPECT_EQ(batched[i].tokens, alone[i].tokens) << "request " << i;
  }
  ExpectSameRuns(batched, GenerateThree(*dir_, {{"ICECACHE_DEVICE_BATCH", "0"}}));
}

// With ICECACHE_QUEUED_UPLOADS=1 each step's list changes, limits and pages to summarize reach
// the backend by queued copies from staging memory; the selections are those of the default
// blocking copies.
TEST_F(DeviceSelectionTest, QueuedUploadsSelectWhatBlockingUploadsSelect) {
  ExpectSameRuns(GenerateThree(*dir_, {}),
                 GenerateThree(*dir_, {{"ICECACHE_QUEUED_UPLOADS", "1"}}));
}

// The host phase of a batch's prepare runs on the index workers, one sequence per range; with
// ICECACHE_PARALLEL_PREPARE=0 on the calling thread. The uploads, and so the selections, are the
// same.
TEST_F(DeviceSelectionTest, ParallelPrepareSelectsWhatOneThreadSelects) {
  ExpectSameRuns(GenerateThree(*dir_, {}),
                 GenerateThree(*dir_, {{"ICECACHE_PARALLEL_PREPARE", "0"}}));
}

// ICECACHE_BATCH_HALVES=1: every layer runs for the first half of the batch (one sequence here),
// then for the second half (two) as side work, which the CPU runs in order; the tokens, the
// tokens attended and the hits are those of the whole batch, with batched ops and without. With a
// dense first layer, that layer runs for the whole batch (its attention reads page tables the
// host builds) and the others in halves.
TEST_F(DeviceSelectionTest, BatchHalvesGenerateWhatTheWholeBatchGenerates) {
  const auto whole = GenerateThree(*dir_, {});
  ExpectSameRuns(whole, GenerateThree(*dir_, {{"ICECACHE_BATCH_HALVES", "1"}}));
  ExpectSameRuns(whole, GenerateThree(*dir_, {{"ICECACHE_BATCH_HALVES", "1"},
                                              {"ICECACHE_DEVICE_BATCH", "0"}}));
  ExpectSameRuns(GenerateThree(*dir_, {}, nullptr, 1),
                 GenerateThree(*dir_, {{"ICECACHE_BATCH_HALVES", "1"}}, nullptr, 1));
}

TEST_F(DeviceSelectionTest, CoveringBudgetEqualsFullAttention) {
  const ScoreRequest r{Tokens(150, 1), Tokens(40, 2), true};
  KvConfig full;
  full.page_size = 8;
  auto dense = Make(full, "auto");
  auto device = Make(Quest(512), "device");
  ASSERT_TRUE(dense.ok() && device.ok());
  auto want = (*dense)->Score(r);
  auto got = (*device)->Score(r);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().message();
  ExpectSameLogits(*got, *want);
}

// --kv-fetch behind with a covering budget: the first decode step after the prompt fetches now,
// and from then on every selected page is resident when its layer attends (the pages that leave
// the window were attended in it), so nothing is deferred and the logits are full attention's.
TEST_F(DeviceSelectionTest, FetchBehindWithACoveringBudgetEqualsFullAttention) {
  const ScoreRequest r{Tokens(150, 3), Tokens(40, 4), true};
  KvConfig full;
  full.page_size = 8;
  KvConfig kv = Quest(512);
  kv.fetch = "behind";
  ScoreResult want, got;
  ASSERT_TRUE(ScoreBoth(Make(full, "auto"), Make(kv, "device", false), r, &want, &got));
  ExpectSameLogits(got, want);
  EXPECT_EQ(got.kv.pages_deferred, 0.0);
  EXPECT_NE(got.kv.policy.find("fetch behind"), std::string::npos) << got.kv.policy;
}

// --kv-fetch behind with a small budget: the step after the prompt attends what fetching now
// attends; later steps defer the selected pages that are not resident (attending fewer tokens)
// and copy every one of them in behind the step, which then counts them in its bytes.
TEST_F(DeviceSelectionTest, FetchBehindDefersMissingPagesAndCopiesThemForTheNextStep) {
  const ScoreRequest r{Tokens(420, 25), Tokens(40, 26), true};
  for (const char* policy : {"quest", "icecache"}) {
    SCOPED_TRACE(policy);
    KvConfig kv = Centroid(policy, 64);
    auto now = Make(kv, "device", false);
    kv.fetch = "behind";
    auto behind = Make(kv, "device", false);
    ScoreResult want, got;
    ASSERT_TRUE(ScoreBoth(now, behind, r, &want, &got));
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(got.logprobs[i], want.logprobs[i]) << "the prompt and the step after it";
    }
    EXPECT_NE(got.logprobs, want.logprobs);
    EXPECT_EQ(want.kv.pages_deferred, 0.0);
    EXPECT_GT(got.kv.pages_deferred, 0.0);
    EXPECT_DOUBLE_EQ(got.kv.pages_prefetched, got.kv.pages_deferred);
    EXPECT_LT(got.kv.tokens_attended, want.kv.tokens_attended);
    EXPECT_LT(got.kv.pages_fetched, want.kv.pages_fetched);
    const int64_t page_bytes = int64_t{2} * 8 * (*behind)->info().head_dim * sizeof(float);
    EXPECT_NEAR(got.kv.bytes_fetched, (got.kv.pages_fetched + got.kv.pages_prefetched) * page_bytes,
                1e-6);
    EXPECT_GT(got.kv.hit_rate, 0.0);
    EXPECT_LT(got.kv.hit_rate, 1.0);
    // ICECACHE_FETCH_NOW_PERCENT=100 maps the pages the budget leaves between sink and window
    // now: with quest's whole pages that is every selected page, so nothing is deferred and the
    // logits are those of fetching now (icecache's partly filled leaves may number more). Read
    // when a session's device selection is made.
    if (std::string(policy) != "quest") continue;
    setenv("ICECACHE_FETCH_NOW_PERCENT", "100", 1);
    auto all_now = Make(kv, "device", false);
    ASSERT_TRUE(all_now.ok());
    auto same = (*all_now)->Score(r);
    unsetenv("ICECACHE_FETCH_NOW_PERCENT");
    ASSERT_TRUE(same.ok()) << same.status().message();
    ExpectSameLogits(*same, want);
    EXPECT_EQ(same->kv.pages_deferred, 0.0);
  }
}

// --kv-working-set: spare slots keep the pages a step stops selecting, so a session that selects
// the same pages as with the default working set (what it attends does not depend on the slots)
// fetches fewer of them.
TEST_F(DeviceSelectionTest, ALargerWorkingSetFetchesLessAndAttendsTheSame) {
  const ScoreRequest r{Tokens(420, 27), Tokens(40, 28), true};
  for (const char* policy : {"quest", "icecache"}) {
    SCOPED_TRACE(policy);
    KvConfig kv = Centroid(policy, 64);
    auto small = Make(kv, "device", false);
    kv.working_set = 1024;  // every token of the 460
    const auto [want, got] = ScoreAlike(std::move(small), Make(kv, "device", false), r);
    EXPECT_LT(got.kv.pages_fetched, want.kv.pages_fetched);
    EXPECT_GT(got.kv.hit_rate, want.kv.hit_rate);
    EXPECT_GT(got.kv.working_set_bytes, want.kv.working_set_bytes);
    EXPECT_NE(got.kv.policy.find("working set 1024 tokens"), std::string::npos) << got.kv.policy;
  }
}

TEST_F(DeviceSelectionTest, UnsupportedCombinationsAreClearErrors) {
  {
    KvConfig kv = Quest(64);
    kv.fetch = "behind";
    auto engine = Make(kv, "host");
    ASSERT_TRUE(engine.ok());
    auto session = (*engine)->NewSession();
    ASSERT_FALSE(session.ok());
    EXPECT_NE(session.status().message().find("--kv-fetch behind"), std::string::npos);
    kv.fetch = "later";
    EXPECT_FALSE(Make(kv, "device").ok());
  }
  for (const char* what : {"lychee", "exact", "soft"}) {
    SCOPED_TRACE(what);
    KvConfig kv = Quest(64);
    kv.policy = std::string(what) == "lychee" ? "lychee" : "icecache";
    kv.exact = std::string(what) == "exact";
    if (std::string(what) == "soft") kv.rank = "soft";
    auto engine = Make(kv, "device");
    ASSERT_TRUE(engine.ok());
    auto session = (*engine)->NewSession();
    ASSERT_FALSE(session.ok());
    EXPECT_NE(session.status().message().find("--kv-select device"), std::string::npos);
  }
  auto bad = Make(Quest(64), "gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv-select"), std::string::npos);
  KvConfig wide = Quest(64);
  wide.budget = 8 * (kMaxSelectPicks + 8);
  auto too_many = Make(wide, "device");
  ASSERT_TRUE(too_many.ok());
  auto s2 = (*too_many)->NewSession();
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("at most"), std::string::npos);
  KvConfig huge = Quest(64);
  huge.working_set = 8 * kMaxMapSlots;
  auto slots = Make(huge, "device");
  ASSERT_TRUE(slots.ok());
  auto s3 = (*slots)->NewSession();
  ASSERT_FALSE(s3.ok());
  EXPECT_NE(s3.status().message().find("--kv-working-set"), std::string::npos);
  huge.working_set = -1;
  auto negative = Make(huge, "device");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("--kv-working-set"), std::string::npos);
}

// The backend op against QuestIndex on a real sequence's keys.
TEST_F(DeviceSelectionTest, SelectPagesListsQuestIndexPages) {
  KvConfig full;
  full.page_size = 8;
  auto engine = Make(full, "auto");
  ASSERT_TRUE(engine.ok());
  auto* impl = static_cast<EngineImpl*>(engine->get());
  auto st = impl->NewState(nullptr);
  ASSERT_TRUE(st.ok());
  GenerateRequest req;
  req.prompt_tokens = Tokens(300, 5);
  req.max_tokens = 1;
  ASSERT_TRUE(impl->RunOn(**st, req, {}).ok());
  const KvSequence& seq = (*st)->seq;
  const KvLayout& layout = seq.layout();
  const int heads = impl->info().n_heads, kvh = layout.n_kv_heads, d = layout.head_dim;
  auto backend = MakeCpuBackend({.threads = 1});

  for (int budget : {24, 48, 96}) {
    SCOPED_TRACE(budget);
    const KvConfig kv = Quest(budget);
    const SelectionLimits lim = LimitsFor(kv);
    auto index = MakeSequenceIndex({kv, layout, heads, lim, nullptr});
    ASSERT_TRUE(index.ok());
    // Bounds of every page of the sequence.
    std::vector<int32_t> ids, lens;
    for (int l = 0; l < layout.n_layers; ++l) {
      for (int h = 0; h < kvh; ++h) {
        for (const PageRef& p : seq.pages(l, h)) {
          ids.push_back(p.id);
          lens.push_back(p.len);
        }
      }
    }
    const int64_t pages = seq.pool().capacity();
    Tensor bounds = Tensor::Host(layout.dtype, {pages, 2, d}).value();
    // Summary row = page id here (the engine hands out compact rows; the ops take any).
    const Tensor id_tensor(ids.data(), DType::kI32, {static_cast<int64_t>(ids.size())});
    PageBoundsArgs b{seq.pool().view(), id_tensor,
                     Tensor(lens.data(), DType::kI32, {static_cast<int64_t>(lens.size())}),
                     id_tensor, bounds};
    backend->PageBounds(b);
    std::mt19937 rng(budget);
    std::normal_distribution<float> normal;
    for (int l = 0; l < layout.n_layers; ++l) {
      std::vector<float> q(static_cast<size_t>(heads) * d);
      for (float& x : q) x = normal(rng);
      std::vector<std::vector<PageRef>> want(kvh);
      SelectionStats stats;
      (*index)->Select(seq, l, q.data(), want, &stats);
      const int64_t stride = static_cast<int64_t>(seq.pages(l, 0).size());
      std::vector<int32_t> list_ids, list_lens, limits;
      for (int h = 0; h < kvh; ++h) {
        for (const PageRef& p : seq.pages(l, h)) {
          list_ids.push_back(p.id);
          list_lens.push_back(p.len);
        }
        const ListRegions reg = RegionsOf(seq, l, h, lim);
        limits.insert(limits.end(), {reg.end, reg.sink_end, reg.window_begin,
                                     lim.budget - reg.sink_tokens - reg.window_tokens,
                                     lim.max_pages - reg.sink_end - (reg.end - reg.window_begin)});
      }
      Tensor scores = Tensor::Host(DType::kF32, {kvh, stride}).value();
      Tensor out_ids = Tensor::Host(DType::kI32, {kvh, lim.max_pages}).value();
      Tensor out_lens = Tensor::Host(DType::kI32, {kvh, lim.max_pages}).value();
      Tensor out_count = Tensor::Host(DType::kI32, {kvh}).value();
      PageSelectArgs s;
      s.q = Tensor(q.data(), DType::kF32, {static_cast<int64_t>(q.size())});
      s.list_ids = Tensor(list_ids.data(), DType::kI32, {kvh, stride});
      s.list_lens = Tensor(list_lens.data(), DType::kI32, {kvh, stride});
      s.list_rows = s.list_ids;
      s.limits = Tensor(limits.data(), DType::kI32, {kvh, 5});
      s.bounds = bounds;
      s.scores = scores;
      s.out_ids = out_ids;
      s.out_lens = out_lens;
      s.out_count = out_count;
      s.n_heads = heads;
      backend->SelectPages(s);
      for (int h = 0; h < kvh; ++h) {
        const int n = out_count.data_as<int32_t>()[h];
        ASSERT_EQ(n, static_cast<int>(want[h].size())) << "layer " << l << " head " << h;
        for (int i = 0; i < n; ++i) {
          EXPECT_EQ(out_ids.data_as<int32_t>()[h * lim.max_pages + i], want[h][i].id);
          EXPECT_EQ(out_lens.data_as<int32_t>()[h * lim.max_pages + i], want[h][i].len);
        }
      }
    }
  }
}

// Mean keys go to the summary row the caller names, in Q8_0 (StoredKeyMean's bytes), with the
// keys' spread (mean squared distance from the mean, per dimension); SelectPages finds each
// entry's summary through its list row, not its page id, and scores q.c + |q|^2 spread / (2 sqrt
// d).
TEST(PageBoundsTest, MeanKeysAreStoredInQ8_0AtTheCallersRows) {
  auto backend = MakeCpuBackend({.threads = 1});
  const int page = 4, dim = 64, host_pages = 8;
  std::vector<float> hk(size_t{host_pages} * page * dim), hv(hk.size());
  std::vector<int32_t> hpos(size_t{host_pages} * page, 0);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (float& x : hk) x = normal(rng);
  const KvPoolView host{hk.data(), hv.data(), hpos.data(), DType::kF32, host_pages, page, dim};
  const int64_t row_bytes = RowBytes(kMeanKeyDType, dim);
  std::vector<uint8_t> bounds(3 * row_bytes, 0);
  std::vector<float> spread(3, -1.0f);
  std::vector<int32_t> ids = {5, 2}, lens = {4, 3}, rows = {1, 0};
  PageBoundsArgs b{host, Tensor(ids.data(), DType::kI32, {2}),
                   Tensor(lens.data(), DType::kI32, {2}), Tensor(rows.data(), DType::kI32, {2}),
                   Tensor(bounds.data(), kMeanKeyDType, {3, 1, dim})};
  b.spread = Tensor(spread.data(), DType::kF32, {3});
  backend->PageBounds(b);
  std::vector<float> means[2];
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t> want(row_bytes);
    means[i].resize(dim);
    const float* keys = &hk[static_cast<size_t>(ids[i]) * page * dim];
    const float want_spread =
        StoredKeyMean(keys, lens[i], dim, DType::kF32, want.data(), means[i].data());
    EXPECT_EQ(0, std::memcmp(&bounds[rows[i] * row_bytes], want.data(), row_bytes)) << i;
    EXPECT_EQ(spread[rows[i]], want_spread);
    // The spread in double precision: mean squared distance from the mean, per dimension.
    double total = 0;
    for (int j = 0; j < dim; ++j) {
      double m = 0;
      for (int t = 0; t < lens[i]; ++t) m += keys[t * dim + j];
      m /= lens[i];
      for (int t = 0; t < lens[i]; ++t) total += (keys[t * dim + j] - m) * (keys[t * dim + j] - m);
    }
    EXPECT_NEAR(spread[rows[i]], total / (lens[i] * dim), 1e-5 * total / (lens[i] * dim));
  }
  EXPECT_EQ(std::vector<uint8_t>(row_bytes, 0),
            std::vector<uint8_t>(bounds.begin() + 2 * row_bytes, bounds.end()))
      << "row 2 untouched";
  EXPECT_EQ(spread[2], -1.0f);

  // One KV head, one query head, one page to pick between the two.
  std::vector<float> q(dim);
  for (int trial = 0; trial < 8; ++trial) {
    for (float& x : q) x = normal(rng);
    std::vector<int32_t> limits = {2, 0, 2, 8, 1};
    std::vector<float> scores(2);
    std::vector<int32_t> out_ids(2, -1), out_lens(2), out_count(1);
    PageSelectArgs s;
    s.q = Tensor(q.data(), DType::kF32, {dim});
    s.list_ids = Tensor(ids.data(), DType::kI32, {1, 2});
    s.list_lens = Tensor(lens.data(), DType::kI32, {1, 2});
    s.list_rows = Tensor(rows.data(), DType::kI32, {1, 2});
    s.limits = Tensor(limits.data(), DType::kI32, {1, 5});
    s.bounds = Tensor(bounds.data(), kMeanKeyDType, {3, 1, dim});
    s.spread = Tensor(spread.data(), DType::kF32, {3});
    s.scores = Tensor(scores.data(), DType::kF32, {1, 2});
    s.out_ids = Tensor(out_ids.data(), DType::kI32, {1, 2});
    s.out_lens = Tensor(out_lens.data(), DType::kI32, {1, 2});
    s.out_count = Tensor(out_count.data(), DType::kI32, {1});
    s.n_heads = 1;
    backend->SelectPages(s);
    float q_sq = 0;
    QuerySquares(q.data(), 1, dim, &q_sq);
    const float s0 = CentroidScore(q.data(), &q_sq, 1, dim, means[0].data(), spread[rows[0]]);
    const float s1 = CentroidScore(q.data(), &q_sq, 1, dim, means[1].data(), spread[rows[1]]);
    EXPECT_EQ(scores[0], s0);
    EXPECT_EQ(scores[1], s1);
    double dot = 0, qq = 0;
    for (int j = 0; j < dim; ++j) {
      dot += q[j] * means[0][j];
      qq += q[j] * q[j];
    }
    EXPECT_NEAR(s0, dot + qq * spread[rows[0]] / (2 * std::sqrt(dim)), 1e-4 * (1 + std::abs(s0)));
    ASSERT_EQ(out_count[0], 1);
    EXPECT_EQ(out_ids[0], s0 >= s1 ? 5 : 2) << trial;
  }
}

// A host tier of f32 pages whose keys are numbered by element (values negated) and whose
// positions are numbered by row, so that every page's contents differ.
struct NumberedHostTier {
  NumberedHostTier(int pages, int page_size, int head_dim)
      : k(static_cast<size_t>(pages) * page_size * head_dim),
        v(k.size()),
        pos(static_cast<size_t>(pages) * page_size),
        pages(pages),
        page_size(page_size),
        head_dim(head_dim) {
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = static_cast<float>(i);
      v[i] = -static_cast<float>(i);
    }
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  }
  KvPoolView View() {
    return KvPoolView{k.data(), v.data(), pos.data(), DType::kF32, pages, page_size, head_dim};
  }
  std::vector<float> k, v;
  std::vector<int32_t> pos;
  int pages, page_size, head_dim;
};

// Row r of a random selection for MapPages: 1 to `stride` distinct pages of [first, first +
// span), ascending, each holding 1 or `page` tokens, written at ids/lens + r * stride. Returns
// how many.
int RandomRow(std::mt19937& rng, int r, int stride, int first, int span, int page,
              std::vector<int32_t>& ids, std::vector<int32_t>& lens) {
  std::set<int32_t> chosen;
  const int n = 1 + static_cast<int>(rng() % stride);
  while (static_cast<int>(chosen.size()) < n) chosen.insert(first + rng() % span);
  int i = 0;
  for (int32_t id : chosen) {
    ids[r * stride + i] = id;
    lens[r * stride + i++] = 1 + static_cast<int>(rng() % 2) * (page - 1);
  }
  return n;
}

// The arrays of MapPages calls over `host` (an f32 pool): selections of `rows` rows of `stride`
// entries, and a working set whose rows are groups [first_group, first_group + rows) of `cap`
// slots each (slot pages for every group up to there), with its residency, table, copy list and
// counters.
struct MapState {
  MapState(const KvPoolView& host, int rows, int cap, int stride, int first_group = 0)
      : host(host),
        rows(rows),
        cap(cap),
        stride(stride),
        first_group(first_group),
        slot_pages((first_group + rows) * cap),
        sk(int64_t{slot_pages} * host.page_size * host.head_dim),
        sv(sk.size()),
        spos(int64_t{slot_pages} * host.page_size),
        resident(host.num_pages, -1),
        slot_page(slot_pages, -1),
        slot_len(slot_pages, 0),
        slot_used(slot_pages, -1),
        table(rows + 1 + 2 * rows * stride),
        fetch(rows * (1 + 2 * cap)),
        sel_ids(rows * stride),
        sel_lens(rows * stride),
        sel_count(rows) {}
  KvPoolView Slots() {
    return {sk.data(),  sv.data(),      spos.data(),  DType::kF32,
            slot_pages, host.page_size, host.head_dim};
  }
  // A normal map of the current selection; with `clock` > 0 it passes slot_used and that clock.
  PageMapArgs Args(int32_t clock = 0) {
    PageMapArgs m;
    m.sel_ids = Tensor(sel_ids.data(), DType::kI32, {rows, stride});
    m.sel_lens = Tensor(sel_lens.data(), DType::kI32, {rows, stride});
    m.sel_count = Tensor(sel_count.data(), DType::kI32, {rows});
    m.host = host;
    m.slots = Slots();
    m.first_group = first_group;
    m.capacity = cap;
    m.resident = Tensor(resident.data(), DType::kI32, {host.num_pages});
    m.slot_page = Tensor(slot_page.data(), DType::kI32, {slot_pages});
    m.slot_len = Tensor(slot_len.data(), DType::kI32, {slot_pages});
    if (clock > 0) {
      m.slot_used = Tensor(slot_used.data(), DType::kI32, {slot_pages});
      m.clock = clock;
    }
    m.table = Tensor(table.data(), DType::kI32, {static_cast<int64_t>(table.size())});
    m.fetch = Tensor(fetch.data(), DType::kI32, {static_cast<int64_t>(fetch.size())});
    m.counters = Tensor(counters, DType::kI32, {10});
    return m;
  }
  const int64_t* c() const { return reinterpret_cast<const int64_t*>(counters); }

  KvPoolView host;
  int rows, cap, stride, first_group, slot_pages;
  std::vector<float> sk, sv;
  std::vector<int32_t> spos, resident, slot_page, slot_len, slot_used, table, fetch;
  std::vector<int32_t> sel_ids, sel_lens, sel_count;
  alignas(8) int32_t counters[10] = {};
};

// MapPages over random selections: slots always hold the selected host pages.
TEST(MapPagesTest, SlotsHoldTheSelectedPagesAndRepeatsAreHits) {
  auto backend = MakeCpuBackend({.threads = 1});
  const int page = 4, dim = 8, host_pages = 64, rows = 2, cap = 6, stride = 5;
  const int64_t page_elems = page * dim;
  NumberedHostTier tier(host_pages, page, dim);
  std::vector<float>&hk = tier.k, &hv = tier.v;
  std::vector<int32_t>& hpos = tier.pos;
  const KvPoolView host = tier.View();
  MapState w(host, rows, cap, stride, /*first_group=*/1);  // groups 1 and 2
  const int slot_pages = w.slot_pages;
  const std::vector<float>&sk = w.sk, &sv = w.sv;
  const std::vector<int32_t>&spos = w.spos, &table = w.table;
  std::vector<int32_t>&resident = w.resident, &slot_page = w.slot_page, &slot_len = w.slot_len;
  std::vector<int32_t>&sel_ids = w.sel_ids, &sel_lens = w.sel_lens, &sel_count = w.sel_count;
  auto map = [&] { backend->MapPages(w.Args()); };
  const int64_t* c = w.c();
  std::mt19937 rng(7);
  int64_t lookups = 0;
  for (int step = 0; step < 40; ++step) {
    // Row r selects distinct pages of its own half of the host pool.
    for (int r = 0; r < rows; ++r) {
      const int n = RandomRow(rng, r, stride, r * 32, 10, page, sel_ids, sel_lens);
      sel_count[r] = n;
      lookups += n;
    }
    const int64_t fetched_before = c[1];
    map();
    for (int r = 0; r < rows; ++r) {
      ASSERT_EQ(table[r + 1] - table[r], sel_count[r]);
      for (int i = 0; i < sel_count[r]; ++i) {
        const int32_t s = table[rows + 1 + table[r] + i];
        const int32_t id = sel_ids[r * stride + i];
        ASSERT_GE(s, (1 + r) * cap);
        ASSERT_LT(s, (2 + r) * cap);
        EXPECT_EQ(table[rows + 1 + rows * stride + table[r] + i], sel_lens[r * stride + i]);
        // The listed rows (a slot's rows past its count are unspecified).
        const int64_t bytes = int64_t{sel_lens[r * stride + i]} * dim * 4;
        EXPECT_EQ(0, std::memcmp(&sk[s * page_elems], &hk[id * page_elems], bytes));
        EXPECT_EQ(0, std::memcmp(&sv[s * page_elems], &hv[id * page_elems], bytes));
        EXPECT_EQ(spos[s * page], hpos[id * page]);
      }
    }
    EXPECT_EQ(c[0] + c[1], lookups) << "every lookup is a hit or a fetch";
    // The same selection again: all hits.
    const int64_t hits = c[0];
    map();
    lookups += sel_count[0] + sel_count[1];
    EXPECT_EQ(c[0] - hits, sel_count[0] + sel_count[1]);
    EXPECT_GE(c[1], fetched_before);
    // A selected page gets new contents (same token count): summarizing it with the residency
    // map marks its copy stale, so the next map copies it again instead of counting a hit.
    const int32_t changed = sel_ids[0];
    for (int64_t e = 0; e < page_elems; ++e) hk[changed * page_elems + e] += 1000.0f;
    // Its min | max bounds go to summary row 2 of 3: the rows are the caller's, not page ids.
    std::vector<float> bounds(size_t{3} * 2 * dim, -1.0f);
    int32_t id_arg = changed, len_arg = sel_lens[0], row_arg = 2;
    PageBoundsArgs b{host,
                     Tensor(&id_arg, DType::kI32, {1}),
                     Tensor(&len_arg, DType::kI32, {1}),
                     Tensor(&row_arg, DType::kI32, {1}),
                     Tensor(bounds.data(), DType::kF32, {3, 2, dim}),
                     Tensor(resident.data(), DType::kI32, {host_pages}),
                     Tensor(slot_page.data(), DType::kI32, {slot_pages}),
                     Tensor(slot_len.data(), DType::kI32, {slot_pages})};
    backend->PageBounds(b);
    EXPECT_EQ(slot_len[resident[changed]], -1);
    // Keys grow with their index: the first row is the minimum, row len - 1 the maximum.
    for (int j = 0; j < dim; ++j) {
      EXPECT_EQ(bounds[4 * dim + j], hk[changed * page_elems + j]);
      EXPECT_EQ(bounds[5 * dim + j], hk[changed * page_elems + (len_arg - 1) * dim + j]);
      EXPECT_EQ(bounds[j], -1.0f) << "row 0 untouched";
    }
    const int64_t fetched = c[1];
    map();
    lookups += sel_count[0] + sel_count[1];
    EXPECT_EQ(c[1] - fetched, 1);
    const int32_t s = table[rows + 1];
    EXPECT_EQ(0, std::memcmp(&sk[s * page_elems], &hk[changed * page_elems],
                             int64_t{sel_lens[0]} * dim * 4));
  }
}

// Prefetch mode: the selected pages move into free slots like a normal map, except the pending
// page; no table is written, the copies count as prefetched, and a normal map of the same pages
// then finds them resident.
TEST(MapPagesTest, PrefetchPlacesPagesButNotThePendingOneAndWritesNoTable) {
  auto backend = MakeCpuBackend({.threads = 1});
  const int page = 4, dim = 8, host_pages = 16, cap = 6, stride = 4;
  const int64_t page_elems = page * dim;
  NumberedHostTier tier(host_pages, page, dim);
  const std::vector<float>&hk = tier.k, &hv = tier.v;
  std::vector<float> sk(cap * page_elems), sv(sk.size());
  std::vector<int32_t> spos(cap * page);
  const KvPoolView host = tier.View();
  KvPoolView slots{sk.data(), sv.data(), spos.data(), DType::kF32, cap, page, dim};
  std::vector<int32_t> resident(host_pages, -1), slot_page(cap, -1), slot_len(cap, 0);
  std::vector<int32_t> table(1 + 1 + 2 * stride, -7), fetch(1 + 2 * cap);
  alignas(8) int32_t counters[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<int32_t> sel_ids = {3, 5, 7, 9}, sel_lens = {4, 4, 2, 4}, sel_count = {4};
  int32_t pending = 7;
  PageMapArgs m;
  m.sel_ids = Tensor(sel_ids.data(), DType::kI32, {1, stride});
  m.sel_lens = Tensor(sel_lens.data(), DType::kI32, {1, stride});
  m.sel_count = Tensor(sel_count.data(), DType::kI32, {1});
  m.host = host;
  m.slots = slots;
  m.capacity = cap;
  m.resident = Tensor(resident.data(), DType::kI32, {host_pages});
  m.slot_page = Tensor(slot_page.data(), DType::kI32, {cap});
  m.slot_len = Tensor(slot_len.data(), DType::kI32, {cap});
  m.table = Tensor(table.data(), DType::kI32, {static_cast<int64_t>(table.size())});
  m.fetch = Tensor(fetch.data(), DType::kI32, {static_cast<int64_t>(fetch.size())});
  m.counters = Tensor(counters, DType::kI32, {8});
  PageMapArgs pm = m;
  pm.pending = Tensor(&pending, DType::kI32, {1});
  backend->MapPages(pm);
  const int64_t* c = reinterpret_cast<const int64_t*>(counters);
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], 0);
  EXPECT_EQ(c[2], 0);
  EXPECT_EQ(c[3], 3);
  EXPECT_EQ(resident[7], -1) << "the pending page stays out";
  for (int32_t id : {3, 5, 9}) {
    const int32_t s = resident[id];
    ASSERT_GE(s, 0);
    EXPECT_EQ(slot_page[s], id);
    EXPECT_EQ(0, std::memcmp(&sk[s * page_elems], &hk[id * page_elems], page_elems * 4));
    EXPECT_EQ(0, std::memcmp(&sv[s * page_elems], &hv[id * page_elems], page_elems * 4));
  }
  EXPECT_EQ(table, std::vector<int32_t>(table.size(), -7)) << "no table in prefetch mode";
  // The real map: three hits, the pending page fetched.
  backend->MapPages(m);
  EXPECT_EQ(c[0], 3);
  EXPECT_EQ(c[1], 1);
  EXPECT_EQ(c[3], 3);
  EXPECT_EQ(table[1], 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(slot_page[table[2 + i]], sel_ids[i]);

  // A prefetch limited to each row's first two entries places only those.
  std::vector<int32_t> next_ids = {11, 12, 13, 14};
  m.sel_ids = Tensor(next_ids.data(), DType::kI32, {1, stride});
  pm.sel_ids = m.sel_ids;
  pm.prefetch_pages = 2;
  backend->MapPages(pm);
  EXPECT_EQ(c[3], 5);
  EXPECT_GE(resident[11], 0);
  EXPECT_GE(resident[12], 0);
  EXPECT_EQ(resident[13], -1) << "past the prefetch's limit";
  EXPECT_EQ(resident[14], -1);
  EXPECT_EQ(0, std::memcmp(&sk[resident[12] * page_elems], &hk[12 * page_elems], page_elems * 4));
}

// Fetch behind (defer_limits): a map lists every selected entry but gives the ones between a
// row's sink and window that are not current in a slot 0 tokens, without a slot or a copy; the
// sink and window entries (and the first defer_after after the sink) are mapped as usual. A
// prefetch-mode map of the same selection (no pending page) then brings the deferred pages in,
// and the next map finds them all current.
TEST(MapPagesTest, DeferredPagesAreListedEmptyAndCopiedBehind) {
  auto backend = MakeCpuBackend({.threads = 1});
  const int page = 4, dim = 8, host_pages = 48, rows = 2, cap = 6, stride = 6;
  const int64_t page_elems = page * dim;
  NumberedHostTier tier(host_pages, page, dim);
  const std::vector<float>& hk = tier.k;
  MapState w(tier.View(), rows, cap, stride);
  const std::vector<float>& sk = w.sk;
  const std::vector<int32_t>&resident = w.resident, &slot_page = w.slot_page,
        &slot_len = w.slot_len, &table = w.table;
  std::vector<int32_t>&sel_ids = w.sel_ids, &sel_lens = w.sel_lens, &sel_count = w.sel_count;
  std::vector<int32_t> limits(rows * 5), none(rows, -1);
  int32_t clock = 1;
  auto args = [&] { return w.Args(clock); };
  const int64_t* c = w.c();
  auto current = [&](int r, int i) {
    const int32_t id = sel_ids[r * stride + i], s = resident[id];
    return s >= r * cap && s < (r + 1) * cap && slot_page[s] == id &&
           slot_len[s] == sel_lens[r * stride + i];
  };
  std::mt19937 rng(5);
  int64_t deferred_total = 0;
  for (int step = 0; step < 50; ++step, ++clock) {
    // Every third step maps the first entry after the sink now too (defer_after 1).
    const int after = step % 3 == 2 ? 1 : 0;
    std::vector<std::vector<bool>> defer(rows);
    int64_t deferred = 0, tokens = 0, listed = 0;
    for (int r = 0; r < rows; ++r) {
      const int n = RandomRow(rng, r, stride, r * 24, 14, page, sel_ids, sel_lens);
      sel_count[r] = n;
      listed += n;
      // One sink entry, then (with two or more) one window entry at the end: limits count 100,
      // sink_end 1, window_begin 99.
      const int window = n >= 2 ? 1 : 0;
      limits[r * 5 + 0] = 100;
      limits[r * 5 + 1] = 1;
      limits[r * 5 + 2] = 100 - window;
      for (int i = 0; i < n; ++i) {
        const bool middle = i >= 1 + after && i < n - window;
        defer[r].push_back(middle && !current(r, i));
        deferred += defer[r].back() ? 1 : 0;
        tokens += defer[r].back() ? 0 : sel_lens[r * stride + i];
      }
    }
    const int64_t before[5] = {c[0], c[1], c[2], c[3], c[4]};
    PageMapArgs m = args();
    m.defer_limits = Tensor(limits.data(), DType::kI32, {rows, 5});
    m.defer_after = after;
    backend->MapPages(m);
    EXPECT_EQ(c[4] - before[4], deferred) << "step " << step;
    EXPECT_EQ(c[2] - before[2], tokens) << "deferred entries list no tokens";
    EXPECT_EQ(c[0] + c[1] + c[4] - before[0] - before[1] - before[4], listed);
    for (int r = 0; r < rows; ++r) {
      ASSERT_EQ(table[r + 1] - table[r], sel_count[r]) << "every entry keeps its place";
      for (int i = 0; i < sel_count[r]; ++i) {
        const int32_t s = table[rows + 1 + table[r] + i];
        const int32_t len = table[rows + 1 + rows * stride + table[r] + i];
        const int32_t id = sel_ids[r * stride + i];
        ASSERT_GE(s, r * cap);
        ASSERT_LT(s, (r + 1) * cap);
        if (defer[r][i]) {
          EXPECT_EQ(len, 0);
          EXPECT_FALSE(current(r, i)) << "a deferred page is not copied";
        } else {
          EXPECT_EQ(len, sel_lens[r * stride + i]);
          EXPECT_EQ(slot_page[s], id);
          EXPECT_EQ(0,
                    std::memcmp(&sk[s * page_elems], &hk[id * page_elems], int64_t{len} * dim * 4));
        }
      }
    }
    // The copies behind: every selected page current afterwards, the deferred ones counted as
    // copied ahead of their next listing.
    PageMapArgs behind = args();
    behind.pending = Tensor(none.data(), DType::kI32, {rows});
    backend->MapPages(behind);
    EXPECT_EQ(c[3] - before[3], deferred);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < sel_count[r]; ++i) {
        EXPECT_TRUE(current(r, i)) << "step " << step << " row " << r << " entry " << i;
        const int32_t id = sel_ids[r * stride + i];
        EXPECT_EQ(0, std::memcmp(&sk[resident[id] * page_elems], &hk[id * page_elems],
                                 int64_t{sel_lens[r * stride + i]} * dim * 4));
      }
    }
    deferred_total += deferred;
    // Every other step, the same selection again: all hits, nothing deferred.
    if (step % 2 == 1) {
      const int64_t hits = c[0], deferred_before = c[4];
      ++clock;
      PageMapArgs again = args();
      again.defer_limits = m.defer_limits;
      backend->MapPages(again);
      EXPECT_EQ(c[0] - hits, listed);
      EXPECT_EQ(c[4], deferred_before);
    }
  }
  EXPECT_GT(deferred_total, 0) << "random selections defer pages";
}

// A map in two calls (MapStage::kPlace, then kCopy with the same arguments) ends where one call
// ends, normal maps and prefetches alike; between the calls the slots' contents are untouched.
TEST(MapPagesTest, PlaceThenCopyEqualsOneMap) {
  auto backend = MakeCpuBackend({.threads = 1});
  const int page = 4, dim = 8, host_pages = 40, rows = 2, cap = 6, stride = 5;
  NumberedHostTier tier(host_pages, page, dim);
  // One working set per way of mapping, fed the same selections (drawn into one's, copied to
  // two's).
  MapState one(tier.View(), rows, cap, stride), two(tier.View(), rows, cap, stride);
  std::vector<int32_t>&sel_ids = one.sel_ids, &sel_lens = one.sel_lens, &sel_count = one.sel_count;
  std::vector<int32_t> pending(rows);
  auto args = [&](MapState& w, bool prefetch) {
    PageMapArgs m = w.Args();
    if (prefetch) {
      m.pending = Tensor(pending.data(), DType::kI32, {rows});
      m.prefetch_pages = 3;
    }
    return m;
  };
  std::mt19937 rng(11);
  for (int step = 0; step < 60; ++step) {
    for (int r = 0; r < rows; ++r) {
      const int n = RandomRow(rng, r, stride, r * 20, 12, page, sel_ids, sel_lens);
      sel_count[r] = n;
      pending[r] = sel_ids[r * stride + rng() % n];
    }
    two.sel_ids = sel_ids;
    two.sel_lens = sel_lens;
    two.sel_count = sel_count;
    const bool prefetch = step % 2 == 0;
    backend->MapPages(args(one, prefetch));
    PageMapArgs m = args(two, prefetch);
    m.stage = MapStage::kPlace;
    const std::vector<float> k_before = two.sk, v_before = two.sv;
    backend->MapPages(m);
    ASSERT_EQ(two.sk, k_before) << "placing copies nothing, step " << step;
    ASSERT_EQ(two.sv, v_before);
    m.stage = MapStage::kCopy;
    backend->MapPages(m);
    ASSERT_EQ(two.sk, one.sk) << "step " << step;
    ASSERT_EQ(two.sv, one.sv);
    ASSERT_EQ(two.spos, one.spos);
    ASSERT_EQ(two.resident, one.resident);
    ASSERT_EQ(two.slot_page, one.slot_page);
    ASSERT_EQ(two.slot_len, one.slot_len);
    ASSERT_EQ(two.table, one.table);
    ASSERT_EQ(std::vector<int32_t>(two.counters, two.counters + 8),
              std::vector<int32_t>(one.counters, one.counters + 8));
  }
  const int64_t* c = reinterpret_cast<const int64_t*>(one.counters);
  EXPECT_GT(c[1], 0) << "pages were fetched";
  EXPECT_GT(c[3], 0) << "and prefetched";
}

// With slot_used, a page the last step listed outlives older ones: the free slots that the
// last normal map did not list are taken first.
// Free slots are taken empty ones first, then those not listed at the last clock, then the rest.
TEST(MapPagesTest, EmptySlotsFirstAndRecentlyListedPagesLast) {
  auto backend = MakeCpuBackend({.threads = 1});
  const int page = 2, dim = 4, host_pages = 8, cap = 4;
  std::vector<float> hk(host_pages * page * dim, 1.0f), hv(hk.size(), 2.0f), sk(cap * page * dim),
      sv(sk.size());
  std::vector<int32_t> hpos(host_pages * page, 0), spos(cap * page);
  std::vector<int32_t> resident(host_pages, -1), slot_page(cap, -1), slot_len(cap, 0),
      slot_used(cap, -1), table(2 + 2 * cap), fetch(1 + 2 * cap);
  alignas(8) int32_t counters[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  auto map = [&](std::vector<int32_t> ids, int32_t clock) {
    std::vector<int32_t> lens(ids.size(), page), count = {static_cast<int32_t>(ids.size())};
    const int64_t n = static_cast<int64_t>(ids.size());
    PageMapArgs m;
    m.sel_ids = Tensor(ids.data(), DType::kI32, {1, n});
    m.sel_lens = Tensor(lens.data(), DType::kI32, {1, n});
    m.sel_count = Tensor(count.data(), DType::kI32, {1});
    m.host = {hk.data(), hv.data(), hpos.data(), DType::kF32, host_pages, page, dim};
    m.slots = {sk.data(), sv.data(), spos.data(), DType::kF32, cap, page, dim};
    m.capacity = cap;
    m.resident = Tensor(resident.data(), DType::kI32, {host_pages});
    m.slot_page = Tensor(slot_page.data(), DType::kI32, {cap});
    m.slot_len = Tensor(slot_len.data(), DType::kI32, {cap});
    m.slot_used = Tensor(slot_used.data(), DType::kI32, {cap});
    m.clock = clock;
    m.table = Tensor(table.data(), DType::kI32, {static_cast<int64_t>(table.size())});
    m.fetch = Tensor(fetch.data(), DType::kI32, {static_cast<int64_t>(fetch.size())});
    m.counters = Tensor(counters, DType::kI32, {8});
    backend->MapPages(m);
  };
  const int64_t* c = reinterpret_cast<const int64_t*>(counters);
  map({1, 2}, 1);  // slots 0 and 1
  map({3}, 2);     // slot 2, empty
  EXPECT_EQ(resident[3], 2);
  EXPECT_EQ(resident[1], 0);
  map({1, 4}, 3);  // page 1 is still resident; page 4 takes slot 3, the last empty one
  EXPECT_EQ(c[0], 1);
  EXPECT_EQ(resident[4], 3);
  EXPECT_EQ(resident[2], 1) << "spare slots keep what they hold while empty ones remain";
  EXPECT_EQ(slot_used, (std::vector<int32_t>{3, 1, 2, 3}));
  // No empty slot: page 5 takes slot 1 (listed at clock 1), not slot 0 (lowest, but listed at
  // the last clock).
  map({5}, 4);
  EXPECT_EQ(resident[5], 1);
  EXPECT_EQ(resident[2], -1);
  EXPECT_EQ(resident[1], 0);
  // Slot 1 was listed at the last clock; of slots 0, 2 and 3, none listed since clock 3, the
  // lowest go first.
  map({2, 6}, 5);
  EXPECT_EQ(resident[2], 0);
  EXPECT_EQ(resident[6], 2);
  EXPECT_EQ(resident[5], 1);
  EXPECT_EQ(resident[4], 3);
  EXPECT_EQ(resident[1], -1);
  EXPECT_EQ(resident[3], -1);
  EXPECT_EQ(c[0], 1);
}

}  // namespace
}  // namespace icecache
