// A long first prompt's bulk build laid out ahead, during its prefill
// (IceCacheIndex::OnPrefillChunk): the runs laid out in the background give exactly the lists and
// trees of the build at the prompt's end, nothing leaks, and a prompt cut short or an index
// dropped mid-prompt returns every page it took.
#include <gtest/gtest.h>

#include <cstring>

#include "core/thread_pool.h"
#include "icecache_test_util.h"

namespace icecache::ice {
namespace {

constexpr int kLayers = 2, kKvHeads = 2, kDim = 16, kPage = 8, kChunk = 4096;
// A prompt of runs of 64K, 32K, 16K and 16K tokens (segment_layout.h).
constexpr int64_t kPrompt = 8 * kMinRunTokens + 500;

IceSetup Setup() { return IceSetup{KvLayout{kLayers, kKvHeads, kDim, kPage, DType::kF32}}; }

struct Prefilled {
  std::unique_ptr<KvHarness> kv;
  std::unique_ptr<IceCacheIndex> index;
  int kv_ready_calls = 0;
};

// Writes the prompt chunk by chunk as the engine's prefill does: after every chunk but the
// last, OnPrefillChunk (when `workers` is set); then `chunks` chunks or the whole prompt, and
// OnAppend once at the end of the prompt (only when the whole prompt was written).
Prefilled Prefill(ThreadPool* workers, int64_t chunks = -1) {
  const IceSetup s = Setup();
  const KvConfig kv = IceConfig(512, kPage);
  Prefilled out;
  IndexContext context = s.Context(kv);
  context.workers = workers;
  context.overlap_prefill = workers != nullptr;
  out.index = std::make_unique<IceCacheIndex>(context);
  out.kv = s.MakeHarness(kv, kPrompt);
  TestRng rng(21);
  TopicKeys keys(kDim, 6, 9);
  int64_t written = 0;
  for (int64_t c = 0; written < kPrompt && c != chunks; ++c) {
    const int64_t n = std::min<int64_t>(kChunk, kPrompt - written);
    out.kv->Append(n, keys, rng);
    written += n;
    if (workers != nullptr && written < kPrompt) {
      EXPECT_TRUE(
          out.index->OnPrefillChunk(out.kv->seq(), kPrompt, [&] { ++out.kv_ready_calls; }).ok());
    }
  }
  if (written == kPrompt) {
    std::vector<int32_t> ids(kPrompt, 7);
    EXPECT_TRUE(out.index->OnAppend(out.kv->seq(), 0, ids).ok());
  }
  return out;
}

void ExpectSameTrees(const LeafTree& a, const LeafTree& b) {
  ASSERT_EQ(a.leaves(), b.leaves());
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  ASSERT_EQ(a.max_sq_norm(), b.max_sq_norm());
  for (int32_t n = 0; n < a.num_nodes(); ++n) {
    const LeafTree::Node &x = a.node(n), &y = b.node(n);
    ASSERT_EQ(x.count, y.count) << "node " << n;
    ASSERT_EQ(x.children, y.children) << "node " << n;
    ASSERT_EQ(x.ext, y.ext) << "node " << n;
    ASSERT_EQ(x.radius, y.radius) << "node " << n;
    ASSERT_EQ(0, std::memcmp(a.centroid(n), b.centroid(n), sizeof(float) * kDim)) << "node " << n;
    ASSERT_EQ(a.search_stats(), b.search_stats());
    if (!a.search_stats()) continue;
    ASSERT_EQ(0, std::memcmp(a.far_key(n), b.far_key(n), sizeof(float) * kDim)) << "node " << n;
    ASSERT_EQ(0, std::memcmp(a.variance(n), b.variance(n), sizeof(float) * kDim)) << "node " << n;
  }
}

// Up to 2 * kMinRunTokens tokens stay one run; longer ranges are halved until the rest is that
// short; the runs cover the range in order.
TEST(IceCacheAheadTest, RunLengthsHalveLongRanges) {
  EXPECT_EQ(RunLengths(1, 16), std::vector<int32_t>({1}));
  EXPECT_EQ(RunLengths(2048, 16), std::vector<int32_t>({2048}));  // 32K tokens: whole
  EXPECT_EQ(RunLengths(2049, 16), std::vector<int32_t>({1024, 1025}));
  EXPECT_EQ(RunLengths(8158, 16), std::vector<int32_t>({4079, 2039, 2040}));  // 128K tokens
  for (int32_t pages : {5000, 65536, 123457}) {
    const std::vector<int32_t> runs = RunLengths(pages, 8);
    int64_t sum = 0;
    for (int32_t r : runs) sum += r;
    EXPECT_EQ(sum, pages);
    EXPECT_LE(runs.back(), 2 * kMinRunTokens / 8);
    for (size_t k = 1; k < runs.size(); ++k) EXPECT_LE(runs[k], runs[k - 1] + 1);
  }
}

TEST(IceCacheAheadTest, RunsLaidOutDuringThePrefillEqualTheBuildAtItsEnd) {
  ThreadPool workers(3);
  Prefilled at_end = Prefill(nullptr);
  Prefilled ahead = Prefill(&workers);
  EXPECT_GE(ahead.index->runs_ahead(), 1);  // the first run is always handed out
  EXPECT_GE(ahead.kv_ready_calls, 1);       // and the K/V were made visible before
  EXPECT_EQ(at_end.index->runs_ahead(), 0);
  const KvSequence &a = at_end.kv->seq(), &b = ahead.kv->seq();
  const KvPoolView va = a.pool().view(), vb = b.pool().view();
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kKvHeads; ++h) {
      SCOPED_TRACE(testing::Message() << "list " << l << "," << h);
      ASSERT_TRUE(ahead.index->list_started(l, h));
      const int64_t window = LimitsFor(IceConfig(512, kPage)).window;
      ASSERT_EQ(RunLengths((kPrompt - window) / kPage - ahead.index->sink_pages(), kPage).size(),
                4u);
      ASSERT_NO_FATAL_FAILURE(ExpectSameTrees(at_end.index->tree(l, h), ahead.index->tree(l, h)));
      // Same tokens in the same pages, in the same order.
      const std::vector<PageRef>&pa = a.pages(l, h), &pb = b.pages(l, h);
      ASSERT_EQ(pa.size(), pb.size());
      for (size_t i = 0; i < pa.size(); ++i) {
        ASSERT_EQ(pa[i].len, pb[i].len);
        for (int t = 0; t < pa[i].len; ++t) {
          ASSERT_EQ(va.positions[pa[i].id * kPage + t], vb.positions[pb[i].id * kPage + t]);
        }
      }
      EXPECT_EQ(a.tail_index(l, h), b.tail_index(l, h));
    }
  }
  ahead.kv->ExpectLossless();  // every token once, bit for bit; no page leaked
  TestRng rng(3);
  ASSERT_NO_FATAL_FAILURE(ExpectTreeInvariants(*ahead.index, b, 0, 2, rng));
}

TEST(IceCacheAheadTest, APromptCutShortReturnsEveryPage) {
  ThreadPool workers(3);
  Prefilled cut = Prefill(&workers, 20);  // the first run written, the prompt not finished
  EXPECT_GE(cut.index->runs_ahead(), 1);
  KvSequence& seq = cut.kv->seq();
  cut.index->StopBackground();  // as the engine does before it drops tokens
  seq.Truncate(0);
  cut.index->OnTruncate(seq);
  EXPECT_EQ(seq.pool().used(), 0);
  EXPECT_FALSE(cut.index->started());

  Prefilled dropped = Prefill(&workers, 20);
  EXPECT_GE(dropped.index->runs_ahead(), 1);
  const int64_t listed = dropped.kv->seq().pool().used();
  dropped.index.reset();  // waits for the background runs and returns their pages
  int64_t pages = 0;
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kKvHeads; ++h) pages += dropped.kv->seq().pages(l, h).size();
  }
  EXPECT_LE(dropped.kv->seq().pool().used(), listed);
  EXPECT_EQ(dropped.kv->seq().pool().used(), pages);
}

}  // namespace
}  // namespace icecache::ice
