// The icecache searches: exact mode picks exactly what exhaustive scoring of every leaf by its
// bound picks (random and clustered keys, through the tree and through Select) while computing
// fewer bounds on clustered keys; the default best-first search keeps most of the softmax mass
// that the oracle's best pages hold while opening a small part of the tree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>

#include "icecache_test_util.h"
#include "index/icecache/tree_search.h"
#include "index/policies.h"
#include "index/regions.h"

namespace icecache::ice {
namespace {

constexpr int kLayers = 2, kKvHeads = 2, kHeads = 4, kDim = 16, kPage = 8;
constexpr int kGroup = kHeads / kKvHeads;

IceSetup MakeSetup() { return IceSetup{KvLayout{kLayers, kKvHeads, kDim, kPage, DType::kF32}}; }

// A query for KV head `head` of `layer`: along a stored key (as real queries seek keys) plus
// noise, or pure noise.
std::vector<float> QueryFor(const KvSequence& seq, int layer, int head, bool along, TestRng& rng) {
  std::vector<float> q(static_cast<size_t>(kGroup) * kDim);
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  const std::vector<float> target = PageKeys(seq, pages[rng.Below(static_cast<int>(pages.size()))]);
  for (int j = 0; j < kGroup * kDim; ++j) {
    q[j] = along ? 0.5f * target[j % kDim] + 0.3f * rng.Normal() : rng.Normal();
  }
  return q;
}

template <typename KeyFn>
void ExpectExactEqualsExhaustive(KeyFn keys, uint64_t seed, bool expect_pruning) {
  const IceSetup s = MakeSetup();
  KvConfig kv = IceConfig(96, kPage);
  kv.exact = true;
  auto index = s.MakeIndex(kv);
  auto h = s.MakeHarness(kv, 3000);
  TestRng rng(seed);
  while (h->seq().length() < 2800) {
    const int64_t n = h->seq().length() < 1000 ? 1 + rng.Below(200) : 1 + rng.Below(4);
    AppendTokens(*h, *index, n, keys, rng);
  }
  int64_t visited = 0, possible = 0;
  SearchScratch scratch;
  for (int trial = 0; trial < 80; ++trial) {
    const int layer = trial % kLayers, head = (trial / kLayers) % kKvHeads;
    const LeafTree& tree = index->tree(layer, head);
    ASSERT_FALSE(tree.empty());
    std::vector<float> q = QueryFor(h->seq(), layer, head, trial % 3 != 0, rng);
    const TreeQuery query{q.data(), kGroup, kDim};
    // Two loose units with random scores, sometimes equal to a leaf's bound (a tie).
    PrepareQuery(query, &scratch);
    const int32_t tie_leaf = rng.Below(tree.leaves());
    const float tie = Bound(query, scratch.q_norm, tree.centroid(tree.leaf_node(tie_leaf)),
                            tree.node(tree.leaf_node(tie_leaf)).radius);
    const std::vector<LooseUnit> loose = {{rng.Normal() * 10, 5}, {trial % 2 ? tie : 1.0f, 8}};
    const int64_t tokens = 40 + rng.Below(100), room = 6 + rng.Below(10);
    std::vector<Pick> got, want;
    SelectionStats stats;
    ExactSelect(tree, query, loose, tokens, room, &scratch, &got, &stats);
    ExhaustiveSelect(tree, query, loose, tokens, room, &want);
    ASSERT_EQ(got.size(), want.size()) << "trial " << trial;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].loose, want[i].loose) << "trial " << trial << " pick " << i;
      ASSERT_EQ(got[i].id, want[i].id) << "trial " << trial << " pick " << i;
    }
    ASSERT_FALSE(got.empty());
    visited += stats.nodes_visited;
    possible += tree.num_nodes();
  }
  if (expect_pruning) {
    EXPECT_LT(visited, possible / 2) << "bounds should prune clustered keys";
  }
  EXPECT_LE(visited, possible);

  // Through Select: the pages between sink and window are the leaves of an independent
  // exhaustive ranking by bound (ties to the smaller leaf), taken until one does not fit.
  const SelectionLimits lim = LimitsFor(kv);
  for (int trial = 0; trial < 20; ++trial) {
    const int layer = trial % kLayers;
    std::vector<float> q(static_cast<size_t>(kHeads) * kDim);
    for (int hd = 0; hd < kKvHeads; ++hd) {
      const std::vector<float> qh = QueryFor(h->seq(), layer, hd, true, rng);
      std::copy(qh.begin(), qh.end(), q.begin() + hd * kGroup * kDim);
    }
    std::vector<std::vector<PageRef>> out(kKvHeads);
    SelectionStats stats;
    index->Select(h->seq(), layer, q.data(), out, &stats);
    for (int hd = 0; hd < kKvHeads; ++hd) {
      const LeafTree& tree = index->tree(layer, hd);
      const TreeQuery query{q.data() + hd * kGroup * kDim, kGroup, kDim};
      PrepareQuery(query, &scratch);
      // (score, kind, list index): leaves (kind 0) before loose pages (kind 1) at equal scores.
      const std::vector<PageRef>& pages = h->seq().pages(layer, hd);
      std::vector<std::tuple<float, int, int32_t>> ranked;
      for (int32_t leaf = 0; leaf < tree.leaves(); ++leaf) {
        const int32_t n = tree.leaf_node(leaf);
        ranked.emplace_back(Bound(query, scratch.q_norm, tree.centroid(n), tree.node(n).radius), 0,
                            index->sink_pages() + leaf);
      }
      // Loose pages (tail pages before the window that straddle the absorption limit), scored by
      // the bound of their own ball.
      const ListRegions r = RegionsOf(h->seq(), layer, hd, lim);
      for (int32_t i = h->seq().tail_index(layer, hd); i < r.window_begin; ++i) {
        const std::vector<float> k = PageKeys(h->seq(), pages[i]);
        std::vector<float> c(kDim);
        const float radius = BallOf(k.data(), pages[i].len, kDim, c.data());
        ranked.emplace_back(Bound(query, scratch.q_norm, c.data(), radius), 1, i);
      }
      std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
        if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
        return std::make_pair(std::get<1>(a), std::get<2>(a)) <
               std::make_pair(std::get<1>(b), std::get<2>(b));
      });
      int64_t left = lim.budget - r.sink_tokens - r.window_tokens;
      int64_t pages_left = lim.max_pages - r.sink_end - (r.end - r.window_begin);
      std::vector<int32_t> want_ids;
      for (const auto& [score, kind, i] : ranked) {
        const PageRef& pg = pages[i];
        if (pg.len > left || pages_left < 1) break;
        want_ids.push_back(pg.id);
        left -= pg.len;
        --pages_left;
      }
      std::vector<int32_t> got_ids;
      for (size_t i = r.sink_end; i + (r.end - r.window_begin) < out[hd].size(); ++i) {
        got_ids.push_back(out[hd][i].id);
      }
      EXPECT_EQ(got_ids, want_ids) << "trial " << trial << " head " << hd;
    }
  }
}

TEST(IceCacheSearchTest, ExactModeEqualsExhaustiveScoringByBoundOnClusteredKeys) {
  ExpectExactEqualsExhaustive(TopicKeys(kDim, 6, 5), 5, /*expect_pruning=*/true);
}

TEST(IceCacheSearchTest, ExactModeEqualsExhaustiveScoringByBoundOnRandomKeys) {
  ExpectExactEqualsExhaustive(RandomKeys{kDim}, 6, /*expect_pruning=*/false);
}

// Exact best q.k of a leaf page, computed as the index does (DotF, max over the group), each
// head's q.k less its shift where one is given (mass scoring).
class TestScorer : public LeafScorer {
 public:
  TestScorer(const KvSequence& seq, int layer, int head, int32_t first_leaf, const float* q,
             const float* shift = nullptr)
      : seq_(seq), layer_(layer), head_(head), first_leaf_(first_leaf), q_(q), shift_(shift) {}
  float Score(int32_t leaf) override {
    const PageRef& p = seq_.pages(layer_, head_)[first_leaf_ + leaf];
    const std::vector<float> k = PageKeys(seq_, p);
    float best = -std::numeric_limits<float>::infinity();
    for (int t = 0; t < p.len; ++t) {
      for (int g = 0; g < kGroup; ++g) {
        const float shift = shift_ != nullptr ? shift_[g] : 0.0f;
        best = std::max(best, DotF(q_ + g * kDim, &k[t * kDim], kDim) - shift);
      }
    }
    return best;
  }

 private:
  const KvSequence& seq_;
  int layer_, head_;
  int32_t first_leaf_;
  const float* q_;
  const float* shift_;
};

// With every leaf a candidate, the best-bound-first scoring picks exactly what scoring every leaf
// exactly picks, while scoring fewer keys; whatever the radius weight that orders the descent,
// and with per-head shifts (mass scoring: the bounds, shifted alike, still cap the scores).
TEST(IceCacheSearchTest, BestFirstSearchScoresLeavesBestBoundFirstWithoutChangingThePicks) {
  const IceSetup s = MakeSetup();
  const KvConfig kv = IceConfig(96, kPage);
  auto index = s.MakeIndex(kv);
  auto h = s.MakeHarness(kv, 2600);
  TestRng rng(23);
  TopicKeys keys(kDim, 6, 23);
  while (h->seq().length() < 2400) AppendTokens(*h, *index, 1 + rng.Below(100), keys, rng);
  int64_t scored = 0, all = 0;
  SearchScratch scratch;
  for (int trial = 0; trial < 40; ++trial) {
    const int layer = trial % kLayers, head = (trial / kLayers) % kKvHeads;
    const LeafTree& tree = index->tree(layer, head);
    std::vector<float> q = QueryFor(h->seq(), layer, head, trial % 4 != 0, rng);
    // Odd trials shift the heads apart, by more than their q.k differ.
    std::vector<float> shift(kGroup);
    for (float& v : shift) v = 8.0f * rng.Normal();
    TreeQuery query{q.data(), kGroup, kDim};
    if (trial % 2 == 1) query.shift = shift.data();
    TestScorer scorer(h->seq(), layer, head, index->sink_pages(), q.data(), query.shift);
    const std::vector<LooseUnit> loose = {{rng.Normal() * 10, 5}, {rng.Normal() * 10, 8}};
    const int64_t tokens = 40 + rng.Below(100), room = 6 + rng.Below(10);
    std::vector<Pick> got;
    SelectionStats stats;
    const SearchWidth width{trial % 3 * 0.5f, 1 << 30};
    BestFirstSelect(tree, query, width, loose, tokens, room, scorer, &scratch, &got, &stats);
    // Reference: every leaf scored, (score desc, leaves before loose, smaller id), stop at the
    // first unit that does not fit.
    std::vector<std::tuple<float, int, int32_t>> ranked;
    for (int32_t leaf = 0; leaf < tree.leaves(); ++leaf) {
      ranked.emplace_back(scorer.Score(leaf), 0, leaf);
    }
    for (int32_t i = 0; i < 2; ++i) ranked.emplace_back(loose[i].score, 1, i);
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
      return std::make_pair(std::get<1>(a), std::get<2>(a)) <
             std::make_pair(std::get<1>(b), std::get<2>(b));
    });
    std::vector<Pick> want;
    int64_t left = tokens, pages_left = room;
    for (const auto& [score, kind, id] : ranked) {
      const int64_t t = kind == 1 ? loose[id].tokens : tree.node(tree.leaf_node(id)).count;
      if (t > left || pages_left < 1) break;
      want.push_back({kind == 1, id});
      left -= t;
      --pages_left;
    }
    ASSERT_EQ(got.size(), want.size()) << "trial " << trial;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].loose, want[i].loose) << "trial " << trial << " pick " << i;
      ASSERT_EQ(got[i].id, want[i].id) << "trial " << trial << " pick " << i;
    }
    scored += stats.keys_scored;
    all += tree.keys() * kGroup;
  }
  EXPECT_LT(scored, all / 2) << "bounds should spare most exact scoring on clustered keys";
}

// Softmax mass (over all keys of the list, query head 0 of the group, scale 1/sqrt(d)) of the
// tokens in `selected`.
double Mass(const KvSequence& seq, int layer, int head, const float* q,
            const std::vector<PageRef>& selected) {
  std::vector<std::pair<int32_t, double>> logits;  // page id, logit
  for (const PageRef& p : seq.pages(layer, head)) {
    const std::vector<float> k = PageKeys(seq, p);
    for (int t = 0; t < p.len; ++t) {
      logits.emplace_back(p.id, DotD(q, &k[t * kDim], kDim) / std::sqrt(double{kDim}));
    }
  }
  double mx = -1e300;
  for (const auto& l : logits) mx = std::max(mx, l.second);
  double total = 0, in = 0;
  for (const auto& [id, l] : logits) {
    const double w = std::exp(l - mx);
    total += w;
    const bool chosen = std::any_of(selected.begin(), selected.end(),
                                    [id = id](const PageRef& p) { return p.id == id; });
    if (chosen) in += w;
  }
  return in / total;
}

TEST(IceCacheSearchTest, BestFirstSearchKeepsMostOfTheOraclesSoftmaxMass) {
  const IceSetup s = MakeSetup();
  const KvConfig kv = IceConfig(128, kPage);
  KvConfig oracle_kv = kv;
  oracle_kv.policy = "oracle";
  KvConfig stream_kv = kv;
  stream_kv.policy = "streaming";
  auto index = s.MakeIndex(kv);
  auto oracle = MakeSequenceIndex(s.Context(oracle_kv));
  auto streaming = MakeSequenceIndex(s.Context(stream_kv));
  ASSERT_TRUE(oracle.ok() && streaming.ok());
  auto h = s.MakeHarness(kv, 4200);
  TestRng rng(17);
  TopicKeys keys(kDim, 8, 17, 2.0f);
  while (h->seq().length() < 4000) {
    const int64_t n = h->seq().length() < 2000 ? 1 + rng.Below(300) : 1 + rng.Below(3);
    AppendTokens(*h, *index, n, keys, rng);
  }
  double ice = 0, best = 0, sink_window = 0;
  int64_t keys_scored = 0, nodes_visited = 0, tree_nodes = 0;
  const int trials = 40;
  for (int trial = 0; trial < trials; ++trial) {
    const int layer = trial % kLayers;
    std::vector<float> q(static_cast<size_t>(kHeads) * kDim);
    for (int hd = 0; hd < kKvHeads; ++hd) {
      // A query aimed at one old topic's keys: the mass sits in a few scattered places.
      std::vector<float> target(kDim);
      keys(layer, hd, 40 * rng.Below(80) + rng.Below(40), target.data());
      for (int g = 0; g < kGroup; ++g) {
        for (int j = 0; j < kDim; ++j) {
          q[(hd * kGroup + g) * kDim + j] = 0.6f * target[j] + 0.3f * rng.Normal();
        }
      }
    }
    std::vector<std::vector<PageRef>> a(kKvHeads), b(kKvHeads), c(kKvHeads);
    SelectionStats stats, unused;
    index->Select(h->seq(), layer, q.data(), a, &stats);
    (*oracle)->Select(h->seq(), layer, q.data(), b, &unused);
    (*streaming)->Select(h->seq(), layer, q.data(), c, &unused);
    keys_scored += stats.keys_scored;
    nodes_visited += stats.nodes_visited;
    for (int hd = 0; hd < kKvHeads; ++hd) {
      tree_nodes += index->tree(layer, hd).num_nodes();
      const float* qh = q.data() + hd * kGroup * kDim;
      ice += Mass(h->seq(), layer, hd, qh, a[hd]);
      best += Mass(h->seq(), layer, hd, qh, b[hd]);
      sink_window += Mass(h->seq(), layer, hd, qh, c[hd]);
    }
  }
  const double n = trials * kKvHeads;
  ice /= n;
  best /= n;
  sink_window /= n;
  std::printf(
      "softmax mass: icecache %.3f, oracle pages %.3f, sink+window %.3f; keys scored %.2f, "
      "nodes %.2f of the trees\n",
      ice, best, sink_window,
      static_cast<double>(keys_scored) / (trials * kKvHeads * kGroup * 4000.0),
      static_cast<double>(nodes_visited) / static_cast<double>(tree_nodes));
  EXPECT_GT(ice, 0.9 * best);
  EXPECT_GT(ice, sink_window + 0.5 * (best - sink_window));
  // The search scored only part of the context exactly.
  EXPECT_LT(keys_scored, static_cast<int64_t>(trials) * kKvHeads * kGroup * 4000);
  // It opened a small part of the trees (the bounds of loose pages are not counted here).
  EXPECT_LT(nodes_visited, tree_nodes / 2);
}

// A needle: one leaf holds a single key far out along the query among keys that point away
// from it, so its mean and spread estimate rank it below 200 leaves of moderately aligned keys.
// Its farthest key is the needle itself, and the best-first search finds it with room for two
// leaves and ten candidates.
class LeafKeysScorer : public LeafScorer {
 public:
  LeafKeysScorer(const std::vector<std::vector<float>>& leaves, const float* q)
      : leaves_(leaves), q_(q) {}
  float Score(int32_t leaf) override {
    float best = -std::numeric_limits<float>::infinity();
    for (size_t t = 0; t * kDim < leaves_[leaf].size(); ++t) {
      best = std::max(best, DotF(q_, &leaves_[leaf][t * kDim], kDim));
    }
    return best;
  }

 private:
  const std::vector<std::vector<float>>& leaves_;
  const float* q_;
};

TEST(IceCacheSearchTest, BestFirstSearchFindsALoneKeyFarOutAlongTheQuery) {
  TestRng rng(31);
  std::vector<float> u(kDim);
  for (float& x : u) x = rng.Normal();
  const float un = Norm(u.data(), kDim);
  for (float& x : u) x /= un;
  const int kLeaves = 201, kNeedleLeaf = 137;
  std::vector<std::vector<float>> leaves(kLeaves);
  for (int leaf = 0; leaf < kLeaves; ++leaf) {
    for (int t = 0; t < kPage; ++t) {
      // Distractors: q.k about 0.5, tight. The needle's leaf: seven keys at -u, one at 3u.
      const float along = leaf != kNeedleLeaf ? 0.5f : (t == 5 ? 3.0f : -1.0f);
      for (int j = 0; j < kDim; ++j) leaves[leaf].push_back(along * u[j] + 0.05f * rng.Normal());
    }
  }
  LeafTree tree(kDim);
  float m = 0;
  for (const std::vector<float>& k : leaves) {
    for (int t = 0; t < kPage; ++t) m = std::max(m, DotF(&k[t * kDim], &k[t * kDim], kDim));
  }
  tree.set_max_sq_norm(m);
  for (const std::vector<float>& k : leaves) tree.AddLeaf(k.data(), kPage);
  tree.BuildUpper();
  const TreeQuery query{u.data(), 1, kDim};
  SearchScratch scratch;
  PrepareQuery(query, &scratch);
  // The spread estimate alone, q.c + w sqrt(2 ln n) sqrt(sum_j u_j^2 var_j), would rank the
  // needle's leaf last of all: one key among eight moves the mean little, and the per-dimension
  // variance spreads the needle's direction over every dimension.
  KvConfig icecache;
  icecache.policy = "icecache";
  const float w = icecache.ResolvedSearchRadius();  // the default weight
  ASSERT_GT(w, 0.0f);
  auto estimate = [&](int32_t leaf) {
    const int32_t n = tree.leaf_node(leaf);
    float v = 0;
    for (int j = 0; j < kDim; ++j) v += u[j] * u[j] * tree.variance(n)[j];
    return DotF(u.data(), tree.centroid(n), kDim) +
           w * std::sqrt(2 * std::log(static_cast<float>(kPage))) * std::sqrt(v);
  };
  int above = 0;
  for (int leaf = 0; leaf < kLeaves; ++leaf) above += estimate(leaf) > estimate(kNeedleLeaf);
  ASSERT_EQ(above, kLeaves - 1);
  ASSERT_GT(DotF(u.data(), tree.far_key(tree.leaf_node(kNeedleLeaf)), kDim), 2.5f);
  LeafKeysScorer scorer(leaves, u.data());
  std::vector<Pick> picks;
  SelectionStats stats;
  BestFirstSelect(tree, query, SearchWidth{w, 2 + 8}, {}, 2 * kPage, 2, scorer, &scratch, &picks,
                  &stats);
  ASSERT_FALSE(picks.empty());
  EXPECT_FALSE(picks[0].loose);
  EXPECT_EQ(picks[0].id, kNeedleLeaf);
  EXPECT_LT(stats.nodes_visited, tree.num_nodes() / 2);
}

}  // namespace
}  // namespace icecache::ice
