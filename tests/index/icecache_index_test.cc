// Property tests of the icecache index on a KV sequence driven directly: nothing happens while
// the context fits the budget; under random insertions (prefill chunks, then decode tokens)
// every token stays in exactly one page of its list with its K/V unchanged and the tree keeps
// its invariants; selections respect the budget with the sink first and the window last; a
// forked sequence is taken over; truncation and a full pool are handled.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "icecache_test_util.h"
#include "index/policies.h"
#include "index/regions.h"

namespace icecache::ice {
namespace {

constexpr int kLayers = 2, kKvHeads = 2, kHeads = 4, kDim = 16;
constexpr int kGroup = kHeads / kKvHeads;

IceSetup MakeSetup(int page) {
  return IceSetup{KvLayout{kLayers, kKvHeads, kDim, page, DType::kF32}};
}

// Checks one Select call: own pages, each once, within budget and page limit, sink first and
// window last (when the context exceeds the budget), the budget mostly used.
void ExpectValidSelection(const KvSequence& seq, int layer, const SelectionLimits& lim,
                          std::span<const std::vector<PageRef>> out) {
  const int p = seq.layout().page_size;
  for (int h = 0; h < kKvHeads; ++h) {
    const std::vector<PageRef>& pages = seq.pages(layer, h);
    std::set<int32_t> own;
    for (const PageRef& pg : pages) own.insert(pg.id);
    std::set<int32_t> listed;
    int tokens = 0;
    for (const PageRef& pg : out[h]) {
      ASSERT_TRUE(own.count(pg.id)) << "page of another list";
      ASSERT_TRUE(listed.insert(pg.id).second) << "page listed twice";
      tokens += pg.len;
    }
    ASSERT_LE(tokens, lim.budget);
    ASSERT_LE(static_cast<int>(out[h].size()), lim.max_pages);
    if (seq.length() <= lim.budget) continue;
    const ListRegions r = RegionsOf(seq, layer, h, lim);
    ASSERT_GE(static_cast<int32_t>(out[h].size()), r.sink_end + (r.end - r.window_begin));
    for (int32_t i = 0; i < r.sink_end; ++i) ASSERT_EQ(out[h][i].id, pages[i].id) << "sink first";
    const size_t w = r.end - r.window_begin;
    for (size_t i = 0; i < w; ++i) {
      ASSERT_EQ(out[h][out[h].size() - w + i].id, pages[r.window_begin + i].id) << "window last";
    }
    ASSERT_GT(r.window_tokens, 0);
    if (seq.length() >= 2 * lim.budget) {
      ASSERT_GT(tokens, lim.budget - 2 * p) << "budget mostly unused";
    }
  }
}

TEST(IceCacheIndexTest, NothingHappensWhileTheContextFitsTheBudget) {
  const IceSetup s = MakeSetup(8);
  const KvConfig kv = IceConfig(64, 8);
  auto index = s.MakeIndex(kv);
  auto h = s.MakeHarness(kv, 80);
  TestRng rng(1);
  TopicKeys keys(kDim, 3, 7);
  AppendTokens(*h, *index, 40, keys, rng);
  AppendTokens(*h, *index, 24, keys, rng);  // exactly the budget
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
  EXPECT_EQ(stats.nodes_visited + stats.keys_scored, 0);
  AppendTokens(*h, *index, 1, keys, rng);
  EXPECT_TRUE(index->started()) << "the context exceeds the budget: the index starts";
  EXPECT_EQ(index->rebuilds(), kLayers * kKvHeads) << "one bulk build per list";
}

// Random insertions at page sizes 8 and 4 (many splits), with random and clustered keys, one
// dense layer in some runs: losslessness and every tree invariant after every few appends.
TEST(IceCacheIndexTest, InvariantsAndLosslessnessUnderRandomInsertions) {
  for (int page : {8, 4}) {
    for (uint64_t seed : {11u, 12u}) {
      SCOPED_TRACE(testing::Message() << "page " << page << " seed " << seed);
      const IceSetup s = MakeSetup(page);
      KvConfig kv = IceConfig(64, page);
      kv.dense_layers = seed == 12u ? 1 : 0;
      auto index = s.MakeIndex(kv);
      auto h = s.MakeHarness(kv, 2100);
      TestRng rng(seed);
      TopicKeys topic(kDim, 5, seed);
      RandomKeys random{kDim};
      auto keys = [&](int l, int hd, int64_t pos, float* k) {
        if (seed == 11u) {
          topic(l, hd, pos, k);
        } else {
          random(l, hd, pos, k);
        }
      };
      int appends = 0;
      while (h->seq().length() < 2000) {
        const int64_t n = h->seq().length() < 500 ? 1 + rng.Below(150)
                                                  : (rng.Below(10) == 0 ? 1 + rng.Below(40) : 1);
        AppendTokens(*h, *index, n, keys, rng);
        if (++appends % 41 == 0 || h->seq().length() >= 2000) {
          ASSERT_NO_FATAL_FAILURE(h->ExpectLossless());
          ASSERT_NO_FATAL_FAILURE(
              ExpectTreeInvariants(*index, h->seq(), kv.dense_layers, kGroup, rng));
        }
      }
      EXPECT_GT(index->insertions(), 100);
      EXPECT_EQ(index->skipped_absorptions(), 0);
      EXPECT_GT(index->MemoryBytes(), 0);
      // Trees grew several levels and split many leaves.
      const LeafTree& tree = index->tree(1, 0);
      EXPECT_GE(tree.height(), 2);
      EXPECT_GT(tree.leaves(), 1800 / page);
      // The pool bound holds (PoolPagesFor sized the harness for 2100 tokens).
      EXPECT_LE(h->seq().num_pages(), PoolPagesFor(kv, s.layout, h->seq().length()));
    }
  }
}

TEST(IceCacheIndexTest, SelectRespectsTheBudgetSinkFirstWindowLast) {
  for (bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact" : "best-first");
    const IceSetup s = MakeSetup(8);
    KvConfig kv = IceConfig(64, 8);
    kv.exact = exact;
    auto index = s.MakeIndex(kv);
    auto h = s.MakeHarness(kv, 1200);
    TestRng rng(9);
    TopicKeys keys(kDim, 4, 9);
    while (h->seq().length() < 1000) {
      AppendTokens(*h, *index, 1 + rng.Below(30), keys, rng);
      std::vector<float> q(kHeads * kDim);
      for (float& x : q) x = rng.Normal();
      std::vector<std::vector<PageRef>> out(kKvHeads);
      SelectionStats stats;
      const int layer = rng.Below(kLayers);
      index->Select(h->seq(), layer, q.data(), out, &stats);
      ASSERT_NO_FATAL_FAILURE(ExpectValidSelection(h->seq(), layer, LimitsFor(kv), out));
      if (h->seq().length() > 200) {
        EXPECT_GT(stats.nodes_visited, 0);
        if (!exact) {
          EXPECT_GT(stats.keys_scored, 0);
        }
      }
    }
  }
}

TEST(IceCacheIndexTest, SameInputsGiveTheSameLayoutAndSelection) {
  const IceSetup s = MakeSetup(8);
  const KvConfig kv = IceConfig(64, 8);
  std::vector<std::vector<int32_t>> runs;
  for (int run = 0; run < 2; ++run) {
    auto index = s.MakeIndex(kv);
    auto h = s.MakeHarness(kv, 900);
    TestRng rng(3), qrng(4);
    TopicKeys keys(kDim, 4, 3);
    std::vector<int32_t> trace;
    while (h->seq().length() < 800) {
      AppendTokens(*h, *index, 1 + rng.Below(20), keys, rng);
      std::vector<float> q(kHeads * kDim);
      for (float& x : q) x = qrng.Normal();
      std::vector<std::vector<PageRef>> out(kKvHeads);
      SelectionStats stats;
      index->Select(h->seq(), 1, q.data(), out, &stats);
      for (const auto& o : out) {
        for (const PageRef& p : o) {
          trace.push_back(p.id);
          trace.push_back(p.len);
        }
      }
    }
    runs.push_back(std::move(trace));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// The centroid ranking never runs the best-first search, so its trees leave out the farthest
// keys and key variances: the same leaves, centroids, radii and layout as the soft ranking's
// trees for the same keys, with a third less memory.
TEST(IceCacheIndexTest, CentroidRankTreesLeaveOutTheSearchStatistics) {
  const IceSetup s = MakeSetup(8);
  KvConfig soft = IceConfig(64, 8), centroid = soft;
  soft.rank = "soft";
  centroid.rank = "centroid";
  auto a = s.MakeIndex(soft);
  auto b = s.MakeIndex(centroid);
  auto ha = s.MakeHarness(soft, 1300);
  auto hb = s.MakeHarness(centroid, 1300);
  TestRng ra(5), rb(5), qrng(6);
  TopicKeys keys(kDim, 4, 5);
  while (ha->seq().length() < 1200) {
    const int64_t n = 1 + ra.Below(60);
    AppendTokens(*ha, *a, n, keys, ra);
    AppendTokens(*hb, *b, n, keys, rb);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectTreeInvariants(*b, hb->seq(), 0, kGroup, qrng));
  int64_t bytes_a = 0, bytes_b = 0;
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kKvHeads; ++h) {
      const LeafTree &x = a->tree(l, h), &y = b->tree(l, h);
      EXPECT_TRUE(x.search_stats());
      EXPECT_FALSE(y.search_stats());
      ASSERT_EQ(x.num_nodes(), y.num_nodes());
      ASSERT_GT(x.leaves(), 10);
      for (int32_t n = 0; n < x.num_nodes(); ++n) {
        ASSERT_EQ(x.node(n).children, y.node(n).children) << "node " << n;
        ASSERT_EQ(x.node(n).radius, y.node(n).radius) << "node " << n;
        ASSERT_EQ(0, std::memcmp(x.centroid(n), y.centroid(n), sizeof(float) * kDim));
      }
      bytes_a += x.MemoryBytes();
      bytes_b += y.MemoryBytes();
    }
  }
  EXPECT_LT(bytes_b, bytes_a * 3 / 4);
}

// The positions page `p` holds.
std::vector<int32_t> PositionsOf(const KvSequence& seq, const PageRef& p) {
  const KvPoolView v = seq.pool().view();
  const int32_t* pos = v.positions + static_cast<int64_t>(p.id) * v.page_size;
  return {pos, pos + p.len};
}

// Every list's pages as the positions they hold, in list order (page ids aside).
std::vector<std::vector<int32_t>> Layout(const KvSequence& seq) {
  std::vector<std::vector<int32_t>> out;
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kKvHeads; ++h) {
      for (const PageRef& p : seq.pages(l, h)) out.push_back(PositionsOf(seq, p));
    }
  }
  return out;
}

// With worker threads, lists are absorbed in parallel and KV heads search in parallel (best-first
// search, and the bounded search of exact mode): the same layouts, pages and work as one thread.
TEST(IceCacheIndexTest, ListsMaintainedInParallelEqualOneByOne) {
  const IceSetup s = MakeSetup(8);
  for (const bool exact : {false, true}) {
    SCOPED_TRACE(exact ? "exact" : "best-first");
    KvConfig kv = IceConfig(64, 8);
    kv.exact = exact;
    ThreadPool workers(4);
    std::vector<std::vector<std::vector<int32_t>>> layouts, selections;
    std::vector<std::pair<int64_t, int64_t>> work;
    for (ThreadPool* w : {static_cast<ThreadPool*>(nullptr), &workers}) {
      IndexContext context = s.Context(kv);
      context.workers = w;
      IceCacheIndex index(context);
      auto h = s.MakeHarness(kv, 1200);
      TestRng rng(11), qrng(12);
      TopicKeys keys(kDim, 4, 5);
      std::vector<std::vector<int32_t>> picked;
      SelectionStats stats;
      // Prefill-sized chunks (bulk builds and insertions of many tokens), then decode steps.
      for (int64_t chunk : {300, 200, 250, 100}) AppendTokens(*h, index, chunk, keys, rng);
      for (int step = 0; step < 40; ++step) {
        AppendTokens(*h, index, 1, keys, rng);
        std::vector<float> q(kHeads * kDim);
        for (float& x : q) x = qrng.Normal();
        std::vector<std::vector<PageRef>> out(kKvHeads);
        index.Select(h->seq(), step % kLayers, q.data(), out, &stats);
        for (const auto& o : out) {
          picked.emplace_back();
          for (const PageRef& p : o) {
            const std::vector<int32_t> pos = PositionsOf(h->seq(), p);
            picked.back().insert(picked.back().end(), pos.begin(), pos.end());
          }
        }
      }
      EXPECT_GT(index.rebuilds(), 0);
      EXPECT_GT(index.insertions(), 0);
      if (w != nullptr) {
        EXPECT_GT(index.parallel_appends(), 0);
      }
      layouts.push_back(Layout(h->seq()));
      selections.push_back(std::move(picked));
      work.emplace_back(stats.nodes_visited, stats.keys_scored);
    }
    EXPECT_EQ(layouts[0], layouts[1]);
    EXPECT_EQ(selections[0], selections[1]);
    EXPECT_EQ(work[0], work[1]);
    EXPECT_GT(work[0].first + work[0].second, 0);
  }
}

// A pool without room for every list's re-arrangement at once: the lists go in waves that fit,
// still on the workers, with the layouts of one by one and nothing skipped.
TEST(IceCacheIndexTest, ListsGoInWavesWhenThePoolIsTight) {
  const IceSetup s = MakeSetup(8);
  const KvConfig kv = IceConfig(64, 8);
  ThreadPool workers(2);
  std::vector<std::vector<std::vector<int32_t>>> layouts;
  for (ThreadPool* w : {static_cast<ThreadPool*>(nullptr), &workers}) {
    IndexContext context = s.Context(kv);
    context.workers = w;
    IceCacheIndex index(context);
    // The prompt's pages plus half as many: a bulk build of every list needs about as many.
    const int64_t positional = s.layout.PagesForTokens(1000);
    KvHarness h(s.layout, positional + positional / 2);
    TestRng rng(3);
    TopicKeys keys(kDim, 4, 5);
    AppendTokens(h, index, 1000, keys, rng);
    EXPECT_GT(index.rebuilds(), 0);
    EXPECT_EQ(index.skipped_absorptions(), 0);
    if (w != nullptr) {
      EXPECT_GE(index.parallel_appends(), 2);  // more than one wave in that one OnAppend
    }
    for (int t = 0; t < 24; ++t) AppendTokens(h, index, 1, keys, rng);
    EXPECT_GT(index.insertions(), 0);
    EXPECT_EQ(index.skipped_absorptions(), 0);
    layouts.push_back(Layout(h.seq()));
  }
  EXPECT_EQ(layouts[0], layouts[1]);
}

// A pool with room for the sequence's positional pages and little more: with the growth
// reserve, icecache only re-arranges with what is spare and the sequence always reaches its full
// length; without it, re-arranging takes pages the sequence's later tokens need.
TEST(IceCacheIndexTest, TheGrowthReserveKeepsRearrangingFromStarvingGrowth) {
  const IceSetup s = MakeSetup(8);
  const KvConfig kv = IceConfig(64, 8);
  const int64_t tokens = 1000;
  const int64_t positional = s.layout.PagesForTokens(tokens);
  const int64_t lists = static_cast<int64_t>(kLayers) * kKvHeads;
  for (bool reserve : {true, false}) {
    SCOPED_TRACE(reserve ? "growth reserve" : "no reserve");
    IceCacheIndex index(s.Context(kv));
    KvHarness h(s.layout, positional + 2 * lists);
    if (reserve) h.seq().pool().set_growth_reserve(positional);
    TestRng rng(11);
    TopicKeys keys(kDim, 4, 5);
    bool grew = true;
    while (grew && h.seq().length() < tokens) {
      const int64_t first = h.seq().length();
      const int64_t n = std::min<int64_t>(1 + rng.Below(40), tokens - first);
      grew = h.TryAppend(n, keys, rng);
      if (grew) {
        std::vector<int32_t> ids(static_cast<size_t>(n), 7);
        ASSERT_TRUE(index.OnAppend(h.seq(), first, ids).ok());
      }
    }
    if (!reserve) {
      EXPECT_FALSE(grew) << "re-arranging left room for every token: the contrast is gone";
      continue;
    }
    ASSERT_TRUE(grew);
    EXPECT_EQ(h.seq().length(), tokens);
    EXPECT_GT(index.rebuilds() + index.insertions(), 0);  // it re-arranged what was spare
    EXPECT_GT(index.skipped_absorptions(), 0);            // and skipped the rest
    ASSERT_NO_FATAL_FAILURE(ExpectTreeInvariants(index, h.seq(), 0, kGroup, rng));
    std::vector<float> q(kHeads * kDim);
    for (float& x : q) x = rng.Normal();
    std::vector<std::vector<PageRef>> out(kKvHeads);
    SelectionStats stats;
    for (int l = 0; l < kLayers; ++l) {
      index.Select(h.seq(), l, q.data(), out, &stats);
      ASSERT_NO_FATAL_FAILURE(ExpectValidSelection(h.seq(), l, LimitsFor(kv), out));
    }
  }
}

// A pinned pool for a batch reserves far less than every sequence's worst case at once, and a
// batch of forks of one long prompt fits it: the prompt is laid out in full, and every fork
// re-arranges its decode tokens without skipping any.
TEST(IceCacheIndexTest, APinnedPoolForABatchFitsItsSequences) {
  const KvLayout big{.n_layers = 32, .n_kv_heads = 8, .head_dim = 128, .page_size = 16};
  const KvConfig big_kv = IceConfig(2048, 16);
  const int64_t ctx = 32768;
  EXPECT_EQ(PinnedPoolPagesFor(big_kv, big, ctx, 1), PoolPagesFor(big_kv, big, ctx));
  const int64_t batch16 = PinnedPoolPagesFor(big_kv, big, ctx, 16);
  EXPECT_LE(batch16, 16 * PoolPagesFor(big_kv, big, ctx) * 6 / 10);
  EXPECT_GE(batch16, 17 * big.PagesForTokens(ctx));
  KvConfig quest = big_kv;
  quest.policy = "quest";
  EXPECT_EQ(PinnedPoolPagesFor(quest, big, ctx, 16), 16 * PoolPagesFor(quest, big, ctx));

  const IceSetup s = MakeSetup(8);
  const KvConfig kv = IceConfig(64, 8);
  const int64_t tokens = 2000, decode = 120, forks = 3;
  const int64_t capacity = PinnedPoolPagesFor(kv, s.layout, tokens + decode, forks + 1);
  ASSERT_LT(capacity, (forks + 1) * PoolPagesFor(kv, s.layout, tokens + decode));
  KvHarness h(s.layout, capacity);
  PagePool& pool = h.seq().pool();
  pool.set_growth_reserve((forks + 1) * s.layout.PagesForTokens(tokens + decode));
  TestRng rng(13);
  TopicKeys keys(kDim, 4, 5);
  IceCacheIndex prompt(s.Context(kv));
  AppendTokens(h, prompt, tokens, keys, rng);  // one bulk build of the whole prompt
  EXPECT_GT(prompt.rebuilds(), 0);
  EXPECT_EQ(prompt.skipped_absorptions(), 0);
  auto backend = MakeCpuBackend({.threads = 1});
  std::vector<std::unique_ptr<KvSequence>> copies;
  std::vector<std::unique_ptr<IceCacheIndex>> indexes;
  for (int f = 0; f < forks; ++f) {
    copies.push_back(std::make_unique<KvSequence>(&pool));
    ASSERT_TRUE(copies.back()->CopyFrom(h.seq(), *backend).ok());
    indexes.push_back(s.MakeIndex(kv));
    ASSERT_TRUE(indexes.back()->OnAppend(*copies.back(), 0, {}).ok());
  }
  // Decode: every sequence (the prompt's own too) appends tokens one at a time.
  const RandomKeys more{kDim};
  for (int64_t t = 0; t < decode; ++t) {
    AppendTokens(h, prompt, 1, keys, rng);
    for (int f = 0; f < forks; ++f) {
      KvSequence& c = *copies[f];
      const int64_t first = c.length();
      ASSERT_TRUE(c.Grow(1).ok()) << "fork " << f << " at " << first;
      std::vector<int32_t> slots(kKvHeads);
      const KvPoolView v = pool.view();
      for (int l = 0; l < kLayers; ++l) {
        c.Slots(l, first, 1, slots.data());
        for (int hd = 0; hd < kKvHeads; ++hd) {
          float* k = static_cast<float*>(v.k) + static_cast<int64_t>(slots[hd]) * kDim;
          more(l, hd, first, k);
          v.positions[slots[hd]] = static_cast<int32_t>(first);
        }
      }
      const int32_t id = 7;
      ASSERT_TRUE(indexes[f]->OnAppend(c, first, {&id, 1}).ok());
    }
  }
  EXPECT_EQ(prompt.skipped_absorptions(), 0);
  for (int f = 0; f < forks; ++f) {
    EXPECT_GT(indexes[f]->insertions(), 0);
    EXPECT_EQ(indexes[f]->skipped_absorptions(), 0) << "fork " << f;
    ASSERT_NO_FATAL_FAILURE(ExpectTreeInvariants(*indexes[f], *copies[f], 0, kGroup, rng));
  }
  EXPECT_LE(pool.peak_used(), capacity);
}

TEST(IceCacheIndexTest, TakesOverAForkedSequence) {
  const IceSetup s = MakeSetup(8);
  const KvConfig kv = IceConfig(64, 8);
  auto index = s.MakeIndex(kv);
  auto h = s.MakeHarness(kv, 2 * 700);  // room for the copy
  TestRng rng(5);
  TopicKeys keys(kDim, 4, 5);
  while (h->seq().length() < 600) AppendTokens(*h, *index, 1 + rng.Below(40), keys, rng);
  auto backend = MakeCpuBackend({.threads = 1});
  KvSequence copy(&h->seq().pool());
  ASSERT_TRUE(copy.CopyFrom(h->seq(), *backend).ok());
  auto fresh = s.MakeIndex(kv);
  ASSERT_TRUE(fresh->OnAppend(copy, 0, {}).ok());
  EXPECT_TRUE(fresh->started());
  ASSERT_NO_FATAL_FAILURE(ExpectTreeInvariants(*fresh, copy, 0, kGroup, rng));
  for (int l = 0; l < kLayers; ++l) {
    for (int hd = 0; hd < kKvHeads; ++hd) {
      EXPECT_EQ(fresh->tree(l, hd).leaves(), index->tree(l, hd).leaves());
    }
  }
  std::vector<float> q(kHeads * kDim);
  for (float& x : q) x = rng.Normal();
  std::vector<std::vector<PageRef>> a(kKvHeads), b(kKvHeads);
  SelectionStats stats;
  fresh->Select(copy, 1, q.data(), a, &stats);
  ASSERT_NO_FATAL_FAILURE(ExpectValidSelection(copy, 1, LimitsFor(kv), a));
  index->Select(h->seq(), 1, q.data(), b, &stats);
  // Both select the same list positions (the copy has the same arrangement).
  for (int hd = 0; hd < kKvHeads; ++hd) {
    ASSERT_EQ(a[hd].size(), b[hd].size());
    for (size_t i = 0; i < a[hd].size(); ++i) EXPECT_EQ(a[hd][i].len, b[hd][i].len);
  }
}

TEST(IceCacheIndexTest, TruncatingTheTailKeepsEverythingConsistent) {
  const IceSetup s = MakeSetup(8);
  const KvConfig kv = IceConfig(64, 8);
  auto index = s.MakeIndex(kv);
  auto h = s.MakeHarness(kv, 900);
  TestRng rng(6);
  TopicKeys keys(kDim, 4, 6);
  while (h->seq().length() < 500) AppendTokens(*h, *index, 1 + rng.Below(25), keys, rng);
  int64_t n = h->seq().length() - 10;
  ASSERT_TRUE(h->seq().CanTruncate(n));
  h->seq().Truncate(n);
  index->OnTruncate(h->seq());
  while (h->seq().length() < 800) AppendTokens(*h, *index, 1 + rng.Below(5), keys, rng);
  ASSERT_NO_FATAL_FAILURE(h->ExpectLossless());
  ASSERT_NO_FATAL_FAILURE(ExpectTreeInvariants(*index, h->seq(), 0, kGroup, rng));
}

// A pool with little room beyond positional paging: absorptions that do not fit are skipped
// (their pages stay in the tail, scored as loose pages) and nothing is lost.
// Also while the pool holds frees (updates beside the device's work), when splits need two pages.
TEST(IceCacheIndexTest, AFullPoolSkipsReArrangingAndLosesNothing) {
  for (bool hold : {false, true}) {
    SCOPED_TRACE(hold ? "holding frees" : "not holding");
    const IceSetup s = MakeSetup(8);
    const KvConfig kv = IceConfig(64, 8);
    auto index = s.MakeIndex(kv);
    const int64_t lists = kLayers * kKvHeads;
    auto h = std::make_unique<KvHarness>(s.layout, s.layout.PagesForTokens(700) + 3 * lists);
    TestRng rng(8);
    TopicKeys keys(kDim, 4, 8);
    while (h->seq().length() < 690) {
      const int64_t first = h->seq().length();
      if (!h->TryAppend(1 + rng.Below(8), keys, rng)) break;
      if (hold) h->seq().pool().HoldFrees();
      ASSERT_TRUE(index->OnAppend(h->seq(), first, {}).ok());
      if (hold) h->seq().pool().ReleaseHeld();
      std::vector<float> q(kHeads * kDim);
      for (float& x : q) x = rng.Normal();
      std::vector<std::vector<PageRef>> out(kKvHeads);
      SelectionStats stats;
      index->Select(h->seq(), 0, q.data(), out, &stats);
      ASSERT_NO_FATAL_FAILURE(ExpectValidSelection(h->seq(), 0, LimitsFor(kv), out));
    }
    EXPECT_GT(index->skipped_absorptions(), 0);
    ASSERT_NO_FATAL_FAILURE(h->ExpectLossless());
    ASSERT_NO_FATAL_FAILURE(ExpectTreeInvariants(*index, h->seq(), 0, kGroup, rng));
  }
}

TEST(IceCacheIndexTest, FactoryRejectsWhatItCannotDo) {
  const IceSetup s = MakeSetup(8);
  const KvConfig kv = IceConfig(64, 8);
  IndexContext bad = s.Context(kv);
  bad.n_heads = 3;
  auto r = MakeSequenceIndex(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  auto ok = MakeSequenceIndex(s.Context(kv));
  ASSERT_TRUE(ok.ok());
  EXPECT_NE(*ok, nullptr);
}

// reuse_layers 2 over 4 layers (one dense): layers 1 and 3 search, layer 2 reuses layer 1's
// positions in the same step (scoring nothing, pages of its own list holding those positions);
// a layer whose leader has not selected at this length searches itself.
TEST(IceCacheIndexTest, ReuseLayersSharesTheLeadersPositions) {
  const IceSetup s{KvLayout{4, kKvHeads, kDim, 8, DType::kF32}};
  KvConfig kv = IceConfig(64, 8);
  kv.reuse_layers = 2;
  kv.dense_layers = 1;
  auto index = s.MakeIndex(kv);
  auto h = std::make_unique<KvHarness>(s.layout, PoolPagesFor(kv, s.layout, 700));
  TestRng rng(12);
  TopicKeys keys(kDim, 4, 12);
  const SelectionLimits lim = LimitsFor(kv);
  while (h->seq().length() < 600) {
    AppendTokens(*h, *index, 1 + rng.Below(30), keys, rng);
    std::vector<float> q(kHeads * kDim);
    for (float& x : q) x = rng.Normal();
    std::vector<std::vector<PageRef>> lead(kKvHeads), follow(kKvHeads);
    SelectionStats lead_stats, follow_stats;
    // Layer 2 first: its leader (1) has not selected at this length, so it searches.
    index->Select(h->seq(), 2, q.data(), follow, &follow_stats);
    ASSERT_NO_FATAL_FAILURE(ExpectValidSelection(h->seq(), 2, lim, follow));
    if (h->seq().length() > 2 * lim.budget) {
      ASSERT_GT(follow_stats.nodes_visited, 0);
    }
    index->Select(h->seq(), 1, q.data(), lead, &lead_stats);
    follow_stats = {};
    index->Select(h->seq(), 2, q.data(), follow, &follow_stats);
    ASSERT_NO_FATAL_FAILURE(ExpectValidSelection(h->seq(), 2, lim, follow));
    EXPECT_EQ(follow_stats.nodes_visited + follow_stats.keys_scored, 0) << "reused, not searched";
    if (h->seq().length() <= 2 * lim.budget) continue;
    const KvPoolView pool = h->seq().pool().view();
    for (int hd = 0; hd < kKvHeads; ++hd) {
      // Every page the follower chose between sink and window holds a position the leader chose.
      const ListRegions rl = RegionsOf(h->seq(), 1, hd, lim);
      std::set<int32_t> chosen;
      for (size_t i = rl.sink_end; i + (rl.end - rl.window_begin) < lead[hd].size(); ++i) {
        for (int t = 0; t < lead[hd][i].len; ++t) {
          chosen.insert(pool.positions[lead[hd][i].id * 8 + t]);
        }
      }
      const ListRegions rf = RegionsOf(h->seq(), 2, hd, lim);
      int middle = 0;
      for (size_t i = rf.sink_end; i + (rf.end - rf.window_begin) < follow[hd].size(); ++i) {
        bool shares = false;
        for (int t = 0; t < follow[hd][i].len; ++t) {
          shares = shares || chosen.count(pool.positions[follow[hd][i].id * 8 + t]) > 0;
        }
        EXPECT_TRUE(shares) << "page without any of the leader's positions";
        ++middle;
      }
      EXPECT_GT(middle, 0);
    }
    // Layer 3 leads its own group: it searches.
    SelectionStats third;
    index->Select(h->seq(), 3, q.data(), lead, &third);
    EXPECT_GT(third.nodes_visited, 0);
  }
}

// The engine may run a decode step's OnAppend beside the next step's device work
// (SequenceIndex::UpdatesBesideDeviceReads): one step late, with the next token's slot already
// in the sequence, and the pool holding frees. Then no row a list showed before the call may
// change, no freed page may be handed out again before the hold ends, and the lists must come
// out as the same tokens in the same pages as when every OnAppend runs right after its step.
TEST(IceCacheIndexTest, UpdatesBesideDeviceReadsRewriteNoShownRowAndMatchUpdatesAfter) {
  const IceSetup s = MakeSetup(4);  // small pages: many splits
  const KvConfig kv = IceConfig(64, 4);
  auto after_index = s.MakeIndex(kv), beside_index = s.MakeIndex(kv);
  ASSERT_TRUE(beside_index->UpdatesBesideDeviceReads());
  auto after = s.MakeHarness(kv, 1400), beside = s.MakeHarness(kv, 1400);
  RandomKeys keys{kDim};
  TestRng rng_a(3), rng_b(3);
  AppendTokens(*after, *after_index, 300, keys, rng_a);  // the prompt: a bulk build
  AppendTokens(*beside, *beside_index, 300, keys, rng_b);
  PagePool& pool = beside->seq().pool();
  const int32_t token = 7;
  int64_t splits_out_of_place = 0;
  for (int step = 0; step < 600; ++step) {
    AppendTokens(*after, *after_index, 1, keys, rng_a);
    // Beside: the step before's update runs once this step's token has its slot (written here
    // before the call, which must not read it), while the "device" may read what the lists show.
    const int64_t first = beside->seq().length() - 1;
    beside->Append(1, keys, rng_b);
    struct Shown {
      int32_t id;
      std::vector<float> keys;
    };
    std::vector<Shown> shown;
    std::set<int32_t> shown_leaves;  // pages before the tail: the sink and leaf pages
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kKvHeads; ++h) {
        const std::vector<PageRef>& pages = beside->seq().pages(l, h);
        for (size_t i = 0; i < pages.size(); ++i) {
          shown.push_back({pages[i].id, PageKeys(beside->seq(), pages[i])});
          if (static_cast<int32_t>(i) < beside->seq().tail_index(l, h)) {
            shown_leaves.insert(pages[i].id);
          }
        }
      }
    }
    const int64_t used = pool.used();
    pool.HoldFrees();
    ASSERT_TRUE(beside_index->OnAppend(beside->seq(), first, {&token, 1}).ok());
    for (const Shown& sh : shown) {
      KeyReader r(pool.view());
      ASSERT_EQ(0, std::memcmp(r.Keys(sh.id, 1), sh.keys.data(), sh.keys.size() * sizeof(float)))
          << "a row the lists showed was rewritten (page " << sh.id << ")";
    }
    // Pages freed during the hold still count as used: none went to a new owner.
    EXPECT_GE(pool.used(), used);
    std::set<int32_t> listed;
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kKvHeads; ++h) {
        for (const PageRef& p : beside->seq().pages(l, h)) listed.insert(p.id);
      }
    }
    // A leaf page no longer listed was split out of place.
    for (int32_t id : shown_leaves) splits_out_of_place += listed.count(id) == 0 ? 1 : 0;
    pool.ReleaseHeld();
  }
  // The last step's update, as the engine runs it after its loop.
  ASSERT_TRUE(beside_index->OnAppend(beside->seq(), beside->seq().length() - 1, {&token, 1}).ok());
  EXPECT_GT(splits_out_of_place, 0) << "no leaf split out of place: the test proves nothing";
  ASSERT_NO_FATAL_FAILURE(beside->ExpectLossless());
  ASSERT_NO_FATAL_FAILURE(ExpectTreeInvariants(*beside_index, beside->seq(), 0, kGroup, rng_b));
  EXPECT_EQ(beside_index->insertions(), after_index->insertions());
  EXPECT_EQ(beside_index->skipped_absorptions(), 0);
  const KeyReader ra(after->seq().pool().view()), rb(pool.view());
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kKvHeads; ++h) {
      const std::vector<PageRef>& pa = after->seq().pages(l, h);
      const std::vector<PageRef>& pb = beside->seq().pages(l, h);
      ASSERT_EQ(pa.size(), pb.size());
      for (size_t i = 0; i < pa.size(); ++i) {
        ASSERT_EQ(pa[i].len, pb[i].len);
        const int32_t* a = ra.Positions(pa[i].id);
        const int32_t* b = rb.Positions(pb[i].id);
        ASSERT_TRUE(std::equal(a, a + pa[i].len, b))
            << "list (" << l << "," << h << ") entry " << i;
      }
    }
  }
}

}  // namespace
}  // namespace icecache::ice
