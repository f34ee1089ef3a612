// DenseAttention's page tables: after every kind of change to the lists (decode growth in and
// out of lockstep, prefill growth, truncation, re-arranged heads, a different order of
// sequences, a new sequence in place of an old one) the table the kernels read lists exactly
// each row's pages (then only empty slack entries), whether it was rebuilt or updated in place.
// kSlack runs the GPU layout on the CPU: slack after rows, a separate copy and uploads.
#include "engine/dense_attention.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_sequence.h"
#include "kv/page_pool.h"

namespace icecache {
namespace {

using Layout = DenseAttention::Layout;

class DenseTableTest : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    backend_ = MakeCpuBackend({.threads = 1});
    layout_ = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .page_size = 4};
    pool_ = PagePool::Create(*backend_, layout_, 1024).value();
    config_.n_layers = 2;
    config_.n_heads = 4;
    config_.n_kv_heads = 2;
    config_.head_dim = 8;
    dense_ = DenseAttention::Create(backend_.get(), config_, /*max_rows=*/8,
                                    /*max_entries=*/256, GetParam())
                 .value();
  }

  // Prepares a step over `seqs` and checks the table of every layer against their lists.
  void Check(const std::vector<KvSequence*>& seqs) {
    const std::vector<int32_t> counts(seqs.size(), 1);
    const std::vector<int64_t> start(seqs.size(), 0);
    const StepContext step{seqs,     counts,  start, static_cast<int64_t>(seqs.size()),
                           Tensor(), Tensor()};
    ASSERT_TRUE(dense_->Prepare(step).ok());
    for (int l = 0; l < layout_.n_layers; ++l) {
      auto rows = dense_->ReadTable(l);
      ASSERT_TRUE(rows.ok());
      ASSERT_EQ(rows->size(), seqs.size() * layout_.n_kv_heads);
      for (size_t s = 0; s < seqs.size(); ++s) {
        for (int h = 0; h < layout_.n_kv_heads; ++h) {
          SCOPED_TRACE("layer " + std::to_string(l) + " seq " + std::to_string(s) + " head " +
                       std::to_string(h));
          const std::vector<PageRef>& want = seqs[s]->pages(l, h);
          const std::vector<PageRef>& got = (*rows)[s * layout_.n_kv_heads + h];
          ASSERT_GE(got.size(), want.size());
          if (GetParam() == Layout::kPacked) {
            EXPECT_EQ(got.size(), want.size());
          }
          for (size_t k = 0; k < got.size(); ++k) {
            if (k < want.size()) {
              EXPECT_EQ(got[k].id, want[k].id) << "entry " << k;
              EXPECT_EQ(got[k].len, want[k].len) << "entry " << k;
            } else {
              EXPECT_EQ(got[k].len, 0) << "slack entry " << k;
            }
          }
        }
      }
    }
  }

  std::unique_ptr<Backend> backend_;
  KvLayout layout_;
  std::unique_ptr<PagePool> pool_;
  ModelConfig config_;
  std::unique_ptr<DenseAttention> dense_;
};

TEST_P(DenseTableTest, DecodeGrowthUpdatesInPlace) {
  KvSequence a(pool_.get());
  ASSERT_TRUE(a.Grow(10).ok());
  Check({&a});
  ASSERT_EQ(dense_->rebuilds(), 1);
  const int64_t pages0 = static_cast<int64_t>(a.pages(0, 0).size());
  for (int step = 0; step < 40; ++step) {
    ASSERT_TRUE(a.Grow(1).ok());
    Check({&a});
  }
  const int64_t new_pages = static_cast<int64_t>(a.pages(0, 0).size()) - pages0;
  if (GetParam() == Layout::kPacked) {
    EXPECT_EQ(dense_->rebuilds(), 1 + new_pages);  // a new page needs a rebuild
  } else {
    EXPECT_LT(dense_->rebuilds(), 1 + new_pages / 2);  // slack takes several pages
  }
}

// Sequences that hold nearly all of their pool (the engine sizes a table's entries by the pool):
// the slack layout still keeps its slack, so new pages update the table in place.
TEST_P(DenseTableTest, ANearlyFullPoolKeepsTheSlack) {
  // 2 layers x 2 heads x 40 pages; entries per layer as the transformer sizes them.
  auto pool = PagePool::Create(*backend_, layout_, 160).value();
  auto dense = DenseAttention::Create(backend_.get(), config_, /*max_rows=*/2,
                                      /*max_entries=*/160 / 2 + 2, GetParam())
                   .value();
  KvSequence a(pool.get());
  ASSERT_TRUE(a.Grow(150).ok());  // 38 of 40 pages per list
  const int32_t counts[] = {1};
  const int64_t start[] = {0};
  std::vector<KvSequence*> seqs = {&a};
  const StepContext step{seqs, counts, start, 1, Tensor(), Tensor()};
  ASSERT_TRUE(dense->Prepare(step).ok());
  for (int t = 150; t < 160; ++t) {  // two new pages per list
    ASSERT_TRUE(a.Grow(1).ok());
    ASSERT_TRUE(dense->Prepare(step).ok());
  }
  EXPECT_EQ(dense->rebuilds(), GetParam() == Layout::kPacked ? 3 : 1);
}

TEST_P(DenseTableTest, EveryOtherChangeIsSeen) {
  auto a = std::make_unique<KvSequence>(pool_.get());
  KvSequence b(pool_.get());
  ASSERT_TRUE(a->Grow(21).ok());
  ASSERT_TRUE(b.Grow(6).ok());
  Check({a.get(), &b});
  // Out of lockstep: different lengths, a prefill-sized step for one of them.
  for (int step = 0; step < 12; ++step) {
    ASSERT_TRUE(a->Grow(1).ok());
    ASSERT_TRUE(b.Grow(step == 5 ? 30 : 1 + step % 3).ok());
    Check({a.get(), &b});
  }
  // Another order of the same sequences, then back.
  Check({&b, a.get()});
  Check({a.get(), &b});
  // One sequence alone (fewer rows).
  Check({&b});
  Check({a.get(), &b});
  // Truncation.
  a->Truncate(17);
  Check({a.get(), &b});
  ASSERT_TRUE(a->Grow(1).ok());
  Check({a.get(), &b});
  // Re-arranged head pages of one (layer, head): two pages moved out of the tail and swapped.
  b.AdvanceTail(1, 0, 2);
  int32_t tail = 0;
  std::vector<PageRef>& head = b.MutableHead(1, 0, &tail);
  ASSERT_EQ(tail, 2);
  std::swap(head[0], head[1]);
  Check({a.get(), &b});
  ASSERT_TRUE(b.Grow(1).ok());
  Check({a.get(), &b});
  // ReplaceHead with a re-arranged copy.
  std::vector<PageRef> pages(b.pages(1, 0).begin(), b.pages(1, 0).begin() + 2);
  std::swap(pages[0], pages[1]);
  b.ReplaceHead(1, 0, pages, {});
  Check({a.get(), &b});
  // A new sequence in place of an old one (maybe at the same address), longer than it was.
  a.reset();
  a = std::make_unique<KvSequence>(pool_.get());
  ASSERT_TRUE(a->Grow(70).ok());
  Check({a.get(), &b});
  ASSERT_TRUE(a->Grow(1).ok());
  ASSERT_TRUE(b.Grow(1).ok());
  Check({a.get(), &b});
}

INSTANTIATE_TEST_SUITE_P(Layouts, DenseTableTest,
                         ::testing::Values(Layout::kPacked, Layout::kSlack),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return info.param == Layout::kPacked ? "Packed" : "Slack";
                         });

}  // namespace
}  // namespace icecache
