// Property tests of the lychee index on a KV sequence driven directly: under random insertions
// every token stays in exactly one page per head with its K/V unchanged, pages hold whole
// chunks, every radius bounds its members, every node bound is >= the true max q.k below it,
// the pruned search picks exactly what exhaustive scoring picks, and re-clustering triggers on
// drift.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "index/lychee/lychee_index.h"
#include "index/lychee/vec_math.h"
#include "index/regions.h"
#include "lychee_harness.h"
#include "testing/tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace icecache::lychee {
namespace {

constexpr int kLayers = 2, kKvHeads = 2, kHeads = 4, kDim = 16, kPage = 8;

class LycheeIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const testing::TinyModelSpec spec = testing::TinyLlamaSpec();
    const std::string path = testing::TinyTokenizerPath(spec);
    auto t = Tokenizer::FromHfFiles(path, testing::TokenizerConfigPathFor(path));
    ASSERT_TRUE(t.ok());
    tok_ = std::move(t).value();
    const std::string text =
        "The index sits beside the pages. It never owns them, it only reads keys.\n"
        "for (int i = 0; i < n; ++i) { sum += a[i]; }\n"
        "Chunks end where text ends: a full stop, a comma, a brace; or a newline.\n";
    while (text_ids_.size() < 20000) {
      const std::vector<int32_t> ids = tok_->Encode(text, false, false);
      text_ids_.insert(text_ids_.end(), ids.begin(), ids.end());
    }
    layout_ = KvLayout{kLayers, kKvHeads, kDim, kPage, DType::kF32};
  }

  KvConfig Config(int budget) const {
    KvConfig kv;
    kv.policy = "lychee";
    kv.budget = budget;
    kv.page_size = kPage;
    return kv;
  }
  IndexContext Context(const KvConfig& kv) const {
    return IndexContext{kv, layout_, kHeads, LimitsFor(kv), tok_.get()};
  }
  std::unique_ptr<LycheeIndex> MakeIndex(const KvConfig& kv) const {
    return std::make_unique<LycheeIndex>(Context(kv));
  }
  std::unique_ptr<KvHarness> MakeHarness(const KvConfig& kv, int64_t tokens) const {
    return std::make_unique<KvHarness>(layout_, PoolPagesFor(kv, layout_, tokens));
  }
  // Appends n tokens of text (ids from the tokenizer) and tells the index.
  template <typename KeyFn>
  void Append(KvHarness& kv, LycheeIndex& index, int64_t n, KeyFn& keys, TestRng& rng) {
    const int64_t first = kv.seq().length();
    kv.Append(n, keys, rng);
    std::span<const int32_t> ids(text_ids_.data() + first, static_cast<size_t>(n));
    ASSERT_TRUE(index.OnAppend(kv.seq(), first, ids).ok());
  }

  // An index over 2800 or more tokens of 6 topics (seed `seed`), appended in pieces of up to 200
  // tokens, with budget 96 and rank `rank`.
  std::pair<std::unique_ptr<LycheeIndex>, std::unique_ptr<KvHarness>> FilledWithTopics(
      uint64_t seed, TestRng& rng, const std::string& rank = "auto") {
    KvConfig kv = Config(96);
    kv.rank = rank;
    auto index = MakeIndex(kv);
    auto h = MakeHarness(kv, 3000);
    TopicKeys keys(kDim, 6, seed);
    while (h->seq().length() < 2800) Append(*h, *index, 1 + rng.Below(200), keys, rng);
    return {std::move(index), std::move(h)};
  }

  std::unique_ptr<Tokenizer> tok_;
  std::vector<int32_t> text_ids_;
  KvLayout layout_;
};

std::vector<float> Keys(const KvSequence& seq, const PageRef& p) {
  KeyReader r(seq.pool().view());
  const float* k = r.Keys(p.id, p.len);
  return std::vector<float>(k, k + static_cast<size_t>(p.len) * kDim);
}

double DistD(const float* a, const float* b) {
  double s = 0;
  for (int j = 0; j < kDim; ++j) s += (static_cast<double>(a[j]) - b[j]) * (a[j] - b[j]);
  return std::sqrt(s);
}
double DotD(const float* a, const float* b) {
  double s = 0;
  for (int j = 0; j < kDim; ++j) s += static_cast<double>(a[j]) * b[j];
  return s;
}

// Pages hold whole chunks; the sink stays in place; chunks tile the head in order.
void ExpectLayout(const LycheeIndex& index, const KvSequence& seq) {
  if (!index.started()) return;
  const ChunkLengths& l = index.lengths();
  const KvPoolView pool = seq.pool().view();
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      const std::vector<PageRef>& pages = seq.pages(layer, h);
      const int32_t sink_pages = index.chunks().empty() ? 1 : index.chunks()[0].page_begin;
      for (int32_t i = 0; i < sink_pages; ++i) {
        for (int t = 0; t < pages[i].len; ++t) {
          ASSERT_EQ(pool.positions[pages[i].id * kPage + t], i * kPage + t) << "sink moved";
        }
      }
      int32_t next_page = sink_pages;
      int64_t next_pos = sink_pages * kPage;
      for (const ChunkSpan& s : index.chunks()) {
        ASSERT_EQ(s.page_begin, next_page);
        ASSERT_EQ(s.first_pos, next_pos);
        ASSERT_GE(s.tokens, l.min_len);
        ASSERT_LE(s.tokens, l.max_len);
        ASSERT_EQ(s.pages, (s.tokens + kPage - 1) / kPage);
        int64_t pos = s.first_pos;
        for (int32_t i = s.page_begin; i < s.page_begin + s.pages; ++i) {
          for (int t = 0; t < pages[i].len; ++t)
            ASSERT_EQ(pool.positions[pages[i].id * kPage + t], pos++);
        }
        ASSERT_EQ(pos, s.first_pos + s.tokens) << "a page holds a partial chunk";
        next_page += s.pages;
        next_pos += s.tokens;
      }
      ASSERT_EQ(next_page, index.chunk_pages_end());
      ASSERT_EQ(next_pos, index.frontier());
      ASSERT_LE(index.frontier(), seq.tail_pos(layer, h));
      ASSERT_EQ(index.absorbed(), seq.tail_pos(layer, h));
    }
  }
}

// Every radius bounds all keys below its node; every chunk sits in one fine cluster and every
// fine cluster in one coarse unit.
// `var` is the per-dimension variance of `keys` ([n][kDim]) about `c`, and `far` is one of the
// keys, no farther from c than `radius`.
void ExpectSpread(const std::vector<float>& keys, const float* c, const float* var,
                  const float* far, float radius) {
  const size_t n = keys.size() / kDim;
  ASSERT_GT(n, 0u);
  bool far_is_a_key = false;
  for (int j = 0; j < kDim; ++j) {
    double v = 0;
    for (size_t t = 0; t < n; ++t) {
      const double d = static_cast<double>(keys[t * kDim + j]) - c[j];
      v += d * d;
    }
    v /= static_cast<double>(n);
    ASSERT_NEAR(var[j], v, 1e-3 * (1 + v)) << "dimension " << j << " of " << n << " keys";
  }
  for (size_t t = 0; t < n && !far_is_a_key; ++t) {
    far_is_a_key = std::equal(far, far + kDim, keys.begin() + t * kDim);
  }
  ASSERT_TRUE(far_is_a_key) << "the farthest key is not a key below the node";
  ASSERT_GE(radius, DistD(far, c));
}

void ExpectRadiiBound(const LycheeIndex& index, const KvSequence& seq) {
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      const ClusterIndex& ci = index.head_index(layer, h);
      if (!ci.built()) continue;
      ASSERT_TRUE(ci.complete());
      const std::vector<PageRef>& pages = seq.pages(layer, h);
      std::vector<std::vector<float>> chunk_keys(ci.chunks());
      for (int32_t c = 0; c < ci.chunks(); ++c) {
        const ChunkSpan& s = index.chunks()[c];
        for (int32_t i = s.page_begin; i < s.page_begin + s.pages; ++i) {
          const std::vector<float> k = Keys(seq, pages[i]);
          chunk_keys[c].insert(chunk_keys[c].end(), k.begin(), k.end());
        }
        for (size_t t = 0; t * kDim < chunk_keys[c].size(); ++t) {
          ASSERT_GE(ci.chunk_radius(c), DistD(&chunk_keys[c][t * kDim], ci.chunk_centroid(c)));
        }
      }
      std::vector<int> chunk_seen(ci.chunks(), 0), fine_seen(ci.fine().size(), 0);
      for (int32_t u = 0; u < ci.coarse().size(); ++u) {
        for (int32_t f : ci.coarse().children[u]) {
          ++fine_seen[f];
          ASSERT_EQ(ci.fine_parent(f), u);
          for (int32_t c : ci.fine().children[f]) {
            ++chunk_seen[c];
            ASSERT_EQ(ci.chunk_cluster(c), f);
            for (size_t t = 0; t * kDim < chunk_keys[c].size(); ++t) {
              const float* k = &chunk_keys[c][t * kDim];
              ASSERT_GE(ci.fine().radius[f], DistD(k, ci.fine().c(f, kDim))) << "fine radius";
              ASSERT_GE(ci.coarse().radius[u], DistD(k, ci.coarse().c(u, kDim))) << "coarse radius";
            }
          }
        }
      }
      for (int n : chunk_seen) ASSERT_EQ(n, 1);
      for (int n : fine_seen) ASSERT_EQ(n, 1);
      // The spread statistics (rank spread): every node's variance about its centroid is that
      // of the keys below it, and its farthest key is one of them, within its radius.
      if (!ci.spread_stats()) {
        ASSERT_TRUE(ci.fine().variance.empty() && ci.fine().far.empty());
        continue;
      }
      std::vector<float> fine_keys, coarse_keys;
      for (int32_t c = 0; c < ci.chunks(); ++c) {
        ASSERT_NO_FATAL_FAILURE(ExpectSpread(chunk_keys[c], ci.chunk_centroid(c),
                                             ci.chunk_variance(c), ci.chunk_far(c),
                                             ci.chunk_radius(c)));
      }
      for (int32_t u = 0; u < ci.coarse().size(); ++u) {
        coarse_keys.clear();
        for (int32_t f : ci.coarse().children[u]) {
          fine_keys.clear();
          for (int32_t c : ci.fine().children[f]) {
            fine_keys.insert(fine_keys.end(), chunk_keys[c].begin(), chunk_keys[c].end());
          }
          coarse_keys.insert(coarse_keys.end(), fine_keys.begin(), fine_keys.end());
          ASSERT_NO_FATAL_FAILURE(ExpectSpread(fine_keys, ci.fine().c(f, kDim),
                                               ci.fine().v(f, kDim), ci.fine().f(f, kDim),
                                               ci.fine().radius[f]));
        }
        ASSERT_NO_FATAL_FAILURE(ExpectSpread(coarse_keys, ci.coarse().c(u, kDim),
                                             ci.coarse().v(u, kDim), ci.coarse().f(u, kDim),
                                             ci.coarse().radius[u]));
      }
    }
  }
}

// Max over the group of q.c + |q| r >= max over keys below and over the group of q.k.
void ExpectNodeBounds(const LycheeIndex& index, const KvSequence& seq, TestRng& rng) {
  const int group = kHeads / kKvHeads;
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int h = 0; h < kKvHeads; ++h) {
      const ClusterIndex& ci = index.head_index(layer, h);
      if (!ci.built()) continue;
      const std::vector<PageRef>& pages = seq.pages(layer, h);
      for (int trial = 0; trial < 3; ++trial) {
        std::vector<float> q(static_cast<size_t>(group) * kDim);
        for (float& x : q) x = rng.Normal();
        auto bound = [&](const float* c, float r) {
          double b = -1e300;
          for (int g = 0; g < group; ++g) {
            const float* qg = &q[g * kDim];
            b = std::max(b, DotD(qg, c) + std::sqrt(DotD(qg, qg)) * r);
          }
          return b;
        };
        auto chunk_max = [&](int32_t c) {
          double best = -1e300;
          const ChunkSpan& s = index.chunks()[c];
          for (int32_t i = s.page_begin; i < s.page_begin + s.pages; ++i) {
            const std::vector<float> k = Keys(seq, pages[i]);
            for (int t = 0; t < pages[i].len; ++t) {
              for (int g = 0; g < group; ++g)
                best = std::max(best, DotD(&q[g * kDim], &k[t * kDim]));
            }
          }
          return best;
        };
        for (int32_t u = 0; u < ci.coarse().size(); ++u) {
          double coarse_true = -1e300;
          for (int32_t f : ci.coarse().children[u]) {
            double fine_true = -1e300;
            for (int32_t c : ci.fine().children[f]) {
              const double m = chunk_max(c);
              ASSERT_GE(bound(ci.chunk_centroid(c), ci.chunk_radius(c)), m) << "chunk bound";
              fine_true = std::max(fine_true, m);
            }
            ASSERT_GE(bound(ci.fine().c(f, kDim), ci.fine().radius[f]), fine_true) << "fine bound";
            coarse_true = std::max(coarse_true, fine_true);
          }
          ASSERT_GE(bound(ci.coarse().c(u, kDim), ci.coarse().radius[u]), coarse_true)
              << "coarse bound";
        }
      }
    }
  }
}

TEST_F(LycheeIndexTest, NothingHappensWhileTheContextFitsTheBudget) {
  const KvConfig kv = Config(64);
  auto index = MakeIndex(kv);
  auto h = MakeHarness(kv, 64);
  TestRng rng(1);
  TopicKeys keys(kDim, 3, 7);
  Append(*h, *index, 40, keys, rng);
  Append(*h, *index, 24, keys, rng);  // exactly the budget
  EXPECT_FALSE(index->started());
  for (int l = 0; l < kLayers; ++l) EXPECT_EQ(h->seq().tail_index(l, 0), 0);
  std::vector<float> q(kHeads * kDim, 0.5f);
  std::vector<std::vector<PageRef>> out(kKvHeads);
  SelectionStats stats;
  index->Select(h->seq(), 1, q.data(), out, &stats);
  for (int hd = 0; hd < kKvHeads; ++hd) {
    const std::vector<PageRef>& pages = h->seq().pages(1, hd);
    ASSERT_EQ(out[hd].size(), pages.size());
    for (size_t i = 0; i < pages.size(); ++i) EXPECT_EQ(out[hd][i].id, pages[i].id);
  }
  EXPECT_EQ(stats.nodes_visited, 0);
  Append(*h, *index, 1, keys, rng);
  EXPECT_TRUE(index->started()) << "the context exceeds the budget: the index starts";
}

TEST_F(LycheeIndexTest, InvariantsHoldUnderRandomInsertions) {
  for (uint64_t seed : {11u, 12u, 13u}) {
    SCOPED_TRACE(seed);
    // Seed 11 with the default rank, 12 and 13 with rank spread (which keeps spread statistics).
    KvConfig kv = Config(64);
    if (seed != 11) kv.rank = "spread";
    auto index = MakeIndex(kv);
    auto h = MakeHarness(kv, 2600);
    TestRng rng(seed);
    TopicKeys keys(kDim, 5, seed);
    int appends = 0;
    while (h->seq().length() < 2400) {
      // Prefill-sized chunks first, then mostly single decode tokens.
      const int64_t n =
          h->seq().length() < 600 ? 1 + rng.Below(90) : (rng.Below(8) == 0 ? 1 + rng.Below(40) : 1);
      Append(*h, *index, n, keys, rng);
      if (++appends % 37 == 0 || h->seq().length() >= 2400) {
        ASSERT_NO_FATAL_FAILURE(h->ExpectLossless());
        ASSERT_NO_FATAL_FAILURE(ExpectLayout(*index, h->seq()));
        ASSERT_NO_FATAL_FAILURE(ExpectRadiiBound(*index, h->seq()));
        ASSERT_NO_FATAL_FAILURE(ExpectNodeBounds(*index, h->seq(), rng));
      }
    }
    EXPECT_TRUE(index->started());
    EXPECT_GT(index->chunks().size(), 100u);
    EXPECT_GT(index->MemoryBytes(), 0);
  }
}

// Exact chunk scores from the pages (max over keys and the group's query heads).
class TestScorer : public ChunkScorer {
 public:
  TestScorer(const KvSequence& seq, int layer, int head, const LycheeIndex& index, const float* q)
      : seq_(seq), layer_(layer), head_(head), index_(index), q_(q) {}
  float Score(int32_t chunk) override {
    const ChunkSpan& s = index_.chunks()[chunk];
    const std::vector<PageRef>& pages = seq_.pages(layer_, head_);
    float best = -1e30f;
    for (int32_t i = s.page_begin; i < s.page_begin + s.pages; ++i) {
      const std::vector<float> k = Keys(seq_, pages[i]);
      for (int t = 0; t < pages[i].len; ++t) {
        for (int g = 0; g < kHeads / kKvHeads; ++g)
          best = std::max(best, DotF(q_ + g * kDim, &k[t * kDim], kDim));
      }
    }
    return best;
  }

 private:
  const KvSequence& seq_;
  int layer_, head_;
  const LycheeIndex& index_;
  const float* q_;
};

// A query of the group's heads along a stored key of (layer, head), as real queries seek keys,
// plus noise.
std::vector<float> QueryAlongAKey(const KvSequence& seq, const LycheeIndex& index, int layer,
                                  int head, TestRng& rng) {
  const int group = kHeads / kKvHeads;
  std::vector<float> q(static_cast<size_t>(group) * kDim);
  const std::vector<float> target =
      Keys(seq, seq.pages(layer, head)[1 + rng.Below(index.chunk_pages_end() - 1)]);
  for (int j = 0; j < group * kDim; ++j) q[j] = 0.4f * target[j % kDim] + 0.3f * rng.Normal();
  return q;
}

std::vector<float> ChunkScores(const ClusterIndex& ci, ChunkScorer& scorer) {
  std::vector<float> scores(ci.chunks());
  for (int32_t c = 0; c < ci.chunks(); ++c) scores[c] = scorer.Score(c);
  return scores;
}

TEST_F(LycheeIndexTest, PrunedSearchPicksWhatExhaustiveScoringPicks) {
  TestRng rng(5);
  auto [index, h] = FilledWithTopics(5, rng);
  const int group = kHeads / kKvHeads;
  int64_t visited = 0, possible = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int layer = trial % kLayers, head = (trial / kLayers) % kKvHeads;
    const ClusterIndex& ci = index->head_index(layer, head);
    ASSERT_TRUE(ci.built());
    const std::vector<float> q = QueryAlongAKey(h->seq(), *index, layer, head, rng);
    TestScorer scorer(h->seq(), layer, head, *index, q.data());
    const std::vector<float> scores = ChunkScores(ci, scorer);
    const std::vector<LooseUnit> loose = {{rng.Normal() * 10, 5, 1}, {rng.Normal() * 10, 8, 1}};
    const int64_t tokens = 40 + rng.Below(60), room = 6 + rng.Below(6);
    std::vector<Pick> got, want;
    SearchScratch scratch;
    SelectionStats stats;
    SelectUnits(ci, {q.data(), group, kDim}, loose, tokens, room, scorer, &scratch, &got, &stats);
    SelectUnitsExhaustive(ci, scores, loose, tokens, room, &want);
    ASSERT_EQ(got.size(), want.size()) << "trial " << trial;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].loose, want[i].loose);
      EXPECT_EQ(got[i].id, want[i].id);
    }
    // No unit left out beats a unit taken.
    auto score_of = [&](const Pick& p) { return p.loose ? loose[p.id].score : scores[p.id]; };
    float worst_taken = 1e30f;
    for (const Pick& p : got) worst_taken = std::min(worst_taken, score_of(p));
    for (int32_t c = 0; c < ci.chunks(); ++c) {
      const bool taken =
          std::any_of(got.begin(), got.end(), [&](const Pick& p) { return !p.loose && p.id == c; });
      if (!taken) {
        EXPECT_LE(scores[c], worst_taken) << "chunk " << c << " was pruned but beats a pick";
      }
    }
    visited += stats.nodes_visited;
    possible += ci.coarse().size() + ci.fine().size() + ci.chunks();
  }
  // The bounds actually prune on clustered keys.
  EXPECT_LT(visited, possible);
}

// The spread-ordered search (the default) only narrows what is scored: its picks fit the room
// and come in descending exact score, over half are what exhaustive scoring picks on clustered
// keys, it opens fewer nodes than the index has, and where the room holds every chunk it picks
// exactly what exhaustive scoring picks.
TEST_F(LycheeIndexTest, SpreadSearchFollowsTheQuery) {
  TestRng rng(7);
  auto [index, h] = FilledWithTopics(7, rng, "spread");
  const int group = kHeads / kKvHeads;
  int64_t visited = 0, possible = 0, agreed = 0, wanted = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int layer = trial % kLayers, head = (trial / kLayers) % kKvHeads;
    const ClusterIndex& ci = index->head_index(layer, head);
    ASSERT_TRUE(ci.built());
    const std::vector<float> q = QueryAlongAKey(h->seq(), *index, layer, head, rng);
    TestScorer scorer(h->seq(), layer, head, *index, q.data());
    const std::vector<float> scores = ChunkScores(ci, scorer);
    const std::vector<LooseUnit> loose = {{rng.Normal() * 10, 5, 1}};
    const int64_t tokens = 40 + rng.Below(60), room = 6 + rng.Below(6);
    std::vector<Pick> got, want;
    SearchScratch scratch;
    SelectionStats stats;
    SpreadSelect(ci, {q.data(), group, kDim, 1.0f, 0.7f}, loose, tokens, room, scorer, &scratch,
                 &got, &stats);
    SelectUnitsExhaustive(ci, scores, loose, tokens, room, &want);
    auto score_of = [&](const Pick& p) { return p.loose ? loose[p.id].score : scores[p.id]; };
    int64_t used_tokens = 0, used_pages = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      used_tokens += got[i].loose ? loose[got[i].id].tokens : ci.chunk_tokens(got[i].id);
      used_pages += got[i].loose ? loose[got[i].id].pages : ci.chunk_pages(got[i].id);
      if (i > 0) {
        ASSERT_GE(score_of(got[i - 1]), score_of(got[i])) << "picks out of order";
      }
    }
    ASSERT_LE(used_tokens, tokens);
    ASSERT_LE(used_pages, room);
    for (const Pick& w : want) {
      agreed += std::any_of(got.begin(), got.end(),
                            [&](const Pick& g) { return g.loose == w.loose && g.id == w.id; });
    }
    wanted += static_cast<int64_t>(want.size());
    visited += stats.nodes_visited;
    possible += ci.coarse().size() + ci.fine().size() + ci.chunks();

    // Room for everything: every chunk is a candidate, so the picks are exhaustive scoring's.
    const int64_t all = 1 << 20;
    SpreadSelect(ci, {q.data(), group, kDim, 1.0f, 0.7f}, loose, all, all, scorer, &scratch, &got,
                 &stats);
    SelectUnitsExhaustive(ci, scores, loose, all, all, &want);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].loose, want[i].loose);
      ASSERT_EQ(got[i].id, want[i].id);
    }
  }
  // Isotropic noise makes the best chunk of a topic a matter of luck, which no estimate
  // predicts: the search finds over half of exhaustive scoring's picks (98 of 177 when written),
  // where picks drawn at random would find about 3% (some 8 pages of about 350 chunks).
  EXPECT_GT(agreed, wanted / 2) << agreed << " of " << wanted << " exhaustive picks found";
  EXPECT_LT(visited, possible / 2);
}

// A chunk whose keys mostly look away from the query but hold one key far along it (a needle
// among unrelated tokens) is found: the farthest key's score orders its nodes, where their
// spread alone would bury it.
TEST(LycheeSpreadSearch, FindsAFarKeyAmongKeysThatLookAway) {
  constexpr int d = kDim;
  TestRng rng(3);
  ClusterIndex ci(d, /*spread_stats=*/true);
  std::vector<float> keys;
  std::vector<int64_t> offsets = {0};
  std::vector<float> q(d, 0.0f);
  q[0] = 1.0f;
  // 400 chunks of 8 keys around 20 centres (topics). Every key's first coordinate (the query's
  // direction) is about -6, shifted per chunk (sd 2) and per key (sd 0.5): the best of them
  // scores about 1. The 20 chunks of topic 17 look further away, at -12.
  std::vector<float> centres(20 * d);
  for (float& x : centres) x = 2.0f * rng.Normal();
  for (int c = 0; c < 400; ++c) {
    const float shift = c % 20 == 17 ? -12.0f : -6.0f + 2.0f * rng.Normal();
    for (int t = 0; t < 8; ++t) {
      for (int j = 0; j < d; ++j) {
        keys.push_back(j == 0 ? shift + 0.5f * rng.Normal()
                              : centres[(c % 20) * d + j] + 0.3f * rng.Normal());
      }
    }
    offsets.push_back(static_cast<int64_t>(keys.size()) / d);
  }
  // The needle: one key of chunk 137 (topic 17) scores 6, above every other key. Its clusters'
  // means and spreads along q stay far below the other topics'.
  const int32_t needle = 137;
  keys[(static_cast<size_t>(needle) * 8 + 5) * d] = 6.0f;
  for (int c = 0; c < 400; ++c) ci.AddChunk(&keys[static_cast<size_t>(offsets[c]) * d], 8, 1);
  ci.Build({keys.data(), offsets}, 1);
  struct Scorer : ChunkScorer {
    const std::vector<float>* keys;
    const std::vector<float>* q;
    float Score(int32_t chunk) override {
      float best = -1e30f;
      for (int t = 0; t < 8; ++t)
        best =
            std::max(best, DotF(q->data(), &(*keys)[(static_cast<size_t>(chunk) * 8 + t) * d], d));
      return best;
    }
  } scorer;
  scorer.keys = &keys;
  scorer.q = &q;
  std::vector<Pick> got;
  SearchScratch scratch;
  SelectionStats stats;
  SpreadSelect(ci, {q.data(), 1, d, 1.0f, 0.7f}, {}, 8, 1, scorer, &scratch, &got, &stats);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].loose);
  EXPECT_EQ(got[0].id, needle);
  EXPECT_LT(stats.nodes_visited, ci.coarse().size() + ci.fine().size() + ci.chunks());
}

TEST_F(LycheeIndexTest, SelectRespectsTheBudgetAndListsOwnPages) {
  const KvConfig kv = Config(64);
  auto index = MakeIndex(kv);
  auto h = MakeHarness(kv, 1200);
  TestRng rng(9);
  TopicKeys keys(kDim, 4, 9);
  while (h->seq().length() < 1000) {
    Append(*h, *index, 1 + rng.Below(30), keys, rng);
    std::vector<float> q(kHeads * kDim);
    for (float& x : q) x = rng.Normal();
    std::vector<std::vector<PageRef>> out(kKvHeads);
    SelectionStats stats;
    const int layer = rng.Below(kLayers);
    index->Select(h->seq(), layer, q.data(), out, &stats);
    const SelectionLimits lim = LimitsFor(kv);
    for (int hd = 0; hd < kKvHeads; ++hd) {
      std::set<int32_t> own;
      for (const PageRef& p : h->seq().pages(layer, hd)) own.insert(p.id);
      std::set<int32_t> listed;
      int tokens = 0;
      for (const PageRef& p : out[hd]) {
        ASSERT_TRUE(own.count(p.id)) << "page of another list";
        ASSERT_TRUE(listed.insert(p.id).second) << "page listed twice";
        tokens += p.len;
      }
      ASSERT_LE(tokens, lim.budget);
      ASSERT_LE(static_cast<int>(out[hd].size()), lim.max_pages);
      // The sink and the window are always there.
      const ListRegions r = RegionsOf(h->seq(), layer, hd, lim);
      if (h->seq().length() > lim.budget) {
        ASSERT_EQ(out[hd].front().id, h->seq().pages(layer, hd)[0].id);
        ASSERT_EQ(out[hd].back().id, h->seq().pages(layer, hd).back().id);
        ASSERT_GT(tokens, lim.budget - 3 * index->lengths().max_len) << "budget mostly unused";
        ASSERT_GT(r.window_tokens, 0);
      }
    }
  }
}

// With worker threads the KV heads search in parallel; the pages, their order and the work
// counted are those of the search on one thread.
TEST_F(LycheeIndexTest, SearchOnWorkerThreadsEqualsOneThread) {
  const KvConfig kv = Config(64);
  ThreadPool pool(4);
  IndexContext threaded = Context(kv);
  threaded.workers = &pool;
  auto serial = MakeIndex(kv);
  auto parallel = std::make_unique<LycheeIndex>(threaded);
  auto a = MakeHarness(kv, 1200), b = MakeHarness(kv, 1200);
  TestRng rng_a(21), rng_b(21), rng_q(22);
  TopicKeys keys_a(kDim, 4, 21), keys_b(kDim, 4, 21);
  int searched = 0;
  while (a->seq().length() < 1000) {
    const int64_t n = 1 + rng_q.Below(30);
    Append(*a, *serial, n, keys_a, rng_a);
    Append(*b, *parallel, n, keys_b, rng_b);
    std::vector<float> q(kHeads * kDim);
    for (float& x : q) x = rng_q.Normal();
    const int layer = rng_q.Below(kLayers);
    std::vector<std::vector<PageRef>> out_a(kKvHeads), out_b(kKvHeads);
    SelectionStats st_a, st_b;
    serial->Select(a->seq(), layer, q.data(), out_a, &st_a);
    parallel->Select(b->seq(), layer, q.data(), out_b, &st_b);
    for (int hd = 0; hd < kKvHeads; ++hd) {
      ASSERT_EQ(out_a[hd].size(), out_b[hd].size());
      for (size_t i = 0; i < out_a[hd].size(); ++i) {
        ASSERT_EQ(out_a[hd][i].id, out_b[hd][i].id);
        ASSERT_EQ(out_a[hd][i].len, out_b[hd][i].len);
      }
    }
    ASSERT_EQ(st_a.nodes_visited, st_b.nodes_visited);
    ASSERT_EQ(st_a.keys_scored, st_b.keys_scored);
    searched += st_a.keys_scored > 0;
  }
  EXPECT_GT(searched, 10);  // most steps searched (the context passed the budget early)
}

TEST_F(LycheeIndexTest, ReclusteringTriggersOnDrift) {
  // The index alone: a build, then chunks from the same distribution, then far away ones.
  TopicKeys keys(kDim, 4, 21);
  ClusterIndex ci(kDim);
  std::vector<float> all;
  std::vector<int64_t> offsets = {0};
  auto add = [&](int64_t pos) {
    std::vector<float> k(12 * kDim);
    for (int t = 0; t < 12; ++t) keys(0, 0, pos + t, &k[t * kDim]);
    const int32_t id = ci.AddChunk(k.data(), 12, 2);
    all.insert(all.end(), k.begin(), k.end());
    offsets.push_back(static_cast<int64_t>(all.size()) / kDim);
    return std::make_pair(id, k);
  };
  int64_t pos = 0;
  for (int i = 0; i < 300; ++i, pos += 12) add(pos);
  ci.Build({all.data(), offsets}, 1);
  EXPECT_NEAR(ci.Drift(), 1.0, 1e-9);
  EXPECT_FALSE(ci.NeedsRebuild());
  for (int i = 0; i < 30; ++i, pos += 12) {
    auto [id, k] = add(pos);
    ci.Insert(id, k.data(), 12);
  }
  EXPECT_LT(ci.Drift(), ClusterIndex::kDriftLimit) << "same distribution: little drift";
  EXPECT_FALSE(ci.NeedsRebuild());
  keys.set_offset(6.0f);
  int inserted = 0;
  while (!ci.NeedsRebuild() && inserted < 150) {
    auto [id, k] = add(pos);
    ci.Insert(id, k.data(), 12);
    pos += 12;
    ++inserted;
  }
  EXPECT_TRUE(ci.NeedsRebuild());
  EXPECT_GT(ci.Drift(), ClusterIndex::kDriftLimit);
  EXPECT_LT(ci.chunks(), ClusterIndex::kRebuildGrowth * ci.built_chunks()) << "drift, not growth";
  const int64_t builds = ci.rebuilds();
  ci.Build({all.data(), offsets}, 2);
  EXPECT_EQ(ci.rebuilds(), builds + 1);
  EXPECT_NEAR(ci.Drift(), 1.0, 1e-9);

  // Through the index: a shift in the key distribution during a long generation re-clusters
  // before the chunk count doubles.
  auto rebuilds_after = [&](float shift) {
    const KvConfig kv = Config(64);
    auto index = MakeIndex(kv);
    auto h = MakeHarness(kv, 4200);
    TestRng rng(3);
    TopicKeys k2(kDim, 4, 33);
    Append(*h, *index, 2000, k2, rng);
    const int64_t before = index->rebuilds();
    k2.set_offset(shift);
    for (int i = 0; i < 1200; ++i) Append(*h, *index, 1, k2, rng);
    return index->rebuilds() - before;
  };
  EXPECT_EQ(rebuilds_after(0.0f), 0) << "no drift, no doubling: no re-clustering";
  EXPECT_GT(rebuilds_after(6.0f), 0) << "drift re-clusters";
}

TEST_F(LycheeIndexTest, TakesOverAForkedSequence) {
  const KvConfig kv = Config(64);
  auto index = MakeIndex(kv);
  auto h = MakeHarness(kv, 4000);
  TestRng rng(17);
  TopicKeys keys(kDim, 4, 17);
  Append(*h, *index, 700, keys, rng);
  for (int i = 0; i < 50; ++i) Append(*h, *index, 1, keys, rng);
  // A copy of the sequence (as a forked session gets) and a fresh index told about it.
  KvSequence copy(&h->seq().pool());
  auto backend = MakeCpuBackend({.threads = 1});
  ASSERT_TRUE(copy.CopyFrom(h->seq(), *backend).ok());
  auto fork = MakeIndex(kv);
  ASSERT_TRUE(
      fork->OnAppend(copy, 0, std::span<const int32_t>(text_ids_.data(), copy.length())).ok());
  EXPECT_TRUE(fork->started());
  EXPECT_EQ(fork->absorbed(), copy.tail_pos(0, 0));
  ASSERT_NO_FATAL_FAILURE(ExpectRadiiBound(*fork, copy));
  std::vector<float> q(kHeads * kDim, 0.25f);
  std::vector<std::vector<PageRef>> out(kKvHeads);
  SelectionStats stats;
  fork->Select(copy, 0, q.data(), out, &stats);
  for (int hd = 0; hd < kKvHeads; ++hd) {
    int tokens = 0;
    for (const PageRef& p : out[hd]) tokens += p.len;
    EXPECT_LE(tokens, 64);
    EXPECT_GT(tokens, 32);
  }
  EXPECT_GT(stats.nodes_visited, 0);
}

TEST_F(LycheeIndexTest, AFullPoolLeavesPagesInTheTailAndLosesNothing) {
  const KvConfig kv = Config(64);
  auto index = MakeIndex(kv);
  // Room for positional paging only: re-arranging soon runs out of pages.
  auto h = std::make_unique<KvHarness>(layout_, layout_.PagesForTokens(900) + 8);
  TestRng rng(23);
  TopicKeys keys(kDim, 4, 23);
  // The index takes spare pages only while the pool has them; when growth itself no longer fits,
  // Grow fails cleanly and what is stored stays intact.
  bool full = false;
  while (h->seq().length() < 880 && !full) {
    const int64_t first = h->seq().length();
    const int64_t n = 1 + rng.Below(20);
    if (!h->TryAppend(n, keys, rng)) {
      full = true;
      break;
    }
    std::span<const int32_t> ids(text_ids_.data() + first, static_cast<size_t>(n));
    ASSERT_TRUE(index->OnAppend(h->seq(), first, ids).ok());
  }
  EXPECT_GT(h->seq().length(), 600);
  EXPECT_GT(index->skipped_absorptions(), 0);
  ASSERT_NO_FATAL_FAILURE(h->ExpectLossless());
  std::vector<float> q(kHeads * kDim, 0.1f);
  std::vector<std::vector<PageRef>> out(kKvHeads);
  SelectionStats stats;
  index->Select(h->seq(), 1, q.data(), out, &stats);
  for (int hd = 0; hd < kKvHeads; ++hd) {
    int tokens = 0;
    for (const PageRef& p : out[hd]) tokens += p.len;
    EXPECT_LE(tokens, 64);
  }
}

}  // namespace
}  // namespace icecache::lychee
