#include "kv/kv_sequence.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "backend/backend.h"

namespace icecache {
namespace {

class KvSequenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = MakeCpuBackend({.threads = 1});
    layout_ = {.n_layers = 2, .n_kv_heads = 3, .head_dim = 8, .page_size = 4};
    auto pool = PagePool::Create(*backend_, layout_, 64);
    ASSERT_TRUE(pool.ok());
    pool_ = std::move(pool).value();
  }
  std::unique_ptr<Backend> backend_;
  KvLayout layout_;
  std::unique_ptr<PagePool> pool_;
};

TEST_F(KvSequenceTest, GrowAllocatesPagesPerLayerAndHead) {
  KvSequence s(pool_.get());
  ASSERT_TRUE(s.Grow(5).ok());
  EXPECT_EQ(s.length(), 5);
  EXPECT_EQ(s.num_pages(), 2 * 2 * 3);  // 2 pages x 2 layers x 3 heads
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 3; ++h) {
      ASSERT_EQ(s.pages(l, h).size(), 2u);
      EXPECT_EQ(s.pages(l, h)[0].len, 4);
      EXPECT_EQ(s.pages(l, h)[1].len, 1);
    }
  }
  ASSERT_TRUE(s.Grow(3).ok());
  EXPECT_EQ(s.pages(1, 2)[1].len, 4);
  EXPECT_EQ(pool_->used(), 12);
}

// ReserveTokens sizes the page arrays once: growing one token at a time up to the reserve (also
// after a truncation to nothing, and in a copy) never moves a list's entries.
TEST_F(KvSequenceTest, ReservedListsDoNotMoveAsTheyGrow) {
  for (bool reserve : {true, false}) {
    SCOPED_TRACE(reserve ? "reserved" : "not reserved");
    KvSequence s(pool_.get());
    if (reserve) s.ReserveTokens(16);
    int moves = 0;
    for (int round = 0; round < 2; ++round) {
      ASSERT_TRUE(s.Grow(1).ok());
      const PageRef* at = s.pages(1, 2).data();
      for (int t = 1; t < 16; ++t) {
        ASSERT_TRUE(s.Grow(1).ok());
        moves += s.pages(1, 2).data() != at;
        at = s.pages(1, 2).data();
      }
      EXPECT_EQ(s.pages(1, 2).size(), 4u);
      if (round == 0) s.Truncate(0);
    }
    KvSequence copy(pool_.get());
    if (reserve) copy.ReserveTokens(20);
    ASSERT_TRUE(copy.CopyFrom(s, *backend_).ok());
    const PageRef* at = copy.pages(0, 0).data();
    ASSERT_TRUE(copy.Grow(4).ok());
    moves += copy.pages(0, 0).data() != at;
    if (reserve) {
      EXPECT_EQ(moves, 0);
    } else {
      EXPECT_GT(moves, 0);  // doubling arrays: the test can see a move
    }
  }
}

TEST_F(KvSequenceTest, SlotsAreDistinctAndFollowPositions) {
  KvSequence s(pool_.get());
  ASSERT_TRUE(s.Grow(9).ok());
  std::set<int32_t> all;
  for (int l = 0; l < 2; ++l) {
    std::vector<int32_t> slots(9 * 3);
    s.Slots(l, 0, 9, slots.data());
    for (int t = 0; t < 9; ++t) {
      for (int h = 0; h < 3; ++h) {
        const int32_t slot = slots[t * 3 + h];
        EXPECT_EQ(slot / 4, s.pages(l, h)[t / 4].id);
        EXPECT_EQ(slot % 4, t % 4);
        EXPECT_TRUE(all.insert(slot).second) << "slot reused";
      }
    }
  }
}

TEST_F(KvSequenceTest, TruncateFreesPagesAndFixesLengths) {
  KvSequence s(pool_.get());
  ASSERT_TRUE(s.Grow(10).ok());
  s.Truncate(5);
  EXPECT_EQ(s.length(), 5);
  EXPECT_EQ(s.pages(0, 0).size(), 2u);
  EXPECT_EQ(s.pages(0, 0)[1].len, 1);
  EXPECT_EQ(pool_->used(), 12);
  s.Truncate(0);
  EXPECT_EQ(pool_->used(), 0);
}

TEST_F(KvSequenceTest, GrowFailureChangesNothing) {
  KvSequence a(pool_.get());
  ASSERT_TRUE(a.Grow(40).ok());  // 10 pages x 6 = 60 of 64
  KvSequence b(pool_.get());
  Status st = b.Grow(5);  // needs 12 pages, 4 left
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("out of KV space"), std::string::npos);
  EXPECT_EQ(b.length(), 0);
  EXPECT_EQ(b.num_pages(), 0);
  EXPECT_EQ(pool_->used(), 60);
}

TEST_F(KvSequenceTest, DestructorReturnsPages) {
  {
    KvSequence s(pool_.get());
    ASSERT_TRUE(s.Grow(7).ok());
    EXPECT_GT(pool_->used(), 0);
  }
  EXPECT_EQ(pool_->used(), 0);
}

// The growth reserve holds back the pages a sequence still needs for tokens it has yet to
// write: spare() (what re-arranging indexes may take) leaves them alone, growth uses them.
TEST_F(KvSequenceTest, GrowthReserveHoldsBackPagesForUnwrittenTokens) {
  EXPECT_EQ(pool_->spare(), 64);                    // no reserve: every free page
  const int64_t full = layout_.PagesForTokens(16);  // 4 pages x 6 lists = 24
  pool_->set_growth_reserve(full);
  EXPECT_EQ(pool_->spare(), 64 - full);
  {
    KvSequence s(pool_.get());
    ASSERT_TRUE(s.Grow(5).ok());  // 12 pages, all out of the reserve
    EXPECT_EQ(pool_->used(), 12);
    EXPECT_EQ(pool_->spare(), 64 - full);
    // Optional allocations take every spare page ...
    std::vector<int32_t> taken;
    while (pool_->spare() > 0) taken.push_back(*pool_->Allocate());
    EXPECT_EQ(static_cast<int64_t>(taken.size()), 64 - full);
    // ... and the sequence still grows to its full length.
    ASSERT_TRUE(s.Grow(11).ok());
    EXPECT_EQ(pool_->used(), 64);
    EXPECT_EQ(pool_->spare(), 0);
    for (int32_t id : taken) pool_->Free(id);
    s.Truncate(4);  // tokens it may write again: the reserve holds their pages back again
    EXPECT_EQ(pool_->spare(), 64 - full);
  }
  EXPECT_EQ(pool_->used(), 0);
  EXPECT_EQ(pool_->spare(), 64 - full);  // the destructor credited everything back
  // A copy credits its length too.
  KvSequence a(pool_.get());
  ASSERT_TRUE(a.Grow(8).ok());
  KvSequence b(pool_.get());
  ASSERT_TRUE(b.CopyFrom(a, *backend_).ok());
  EXPECT_EQ(pool_->used(), 24);
  // Each has 8 of 16 tokens; the reserve was for one sequence at 16, so nothing is held back.
  EXPECT_EQ(pool_->spare(), 64 - 24);
}

// Head edits carry which entries they changed, for readers that mirror the lists; edits with
// no hint, and readers that missed an edit, get nothing (they compare everything).
TEST_F(KvSequenceTest, HeldFreesReturnToThePoolOnlyOnRelease) {
  std::vector<int32_t> pages;
  for (int i = 0; i < 4; ++i) pages.push_back(*pool_->Allocate());
  const int64_t spare = pool_->spare();
  pool_->HoldFrees();
  EXPECT_TRUE(pool_->holding());
  pool_->Free(pages[0]);
  pool_->Free(pages[1]);
  EXPECT_EQ(pool_->used(), 4) << "a held page still counts as used";
  EXPECT_EQ(pool_->spare(), spare);
  std::set<int32_t> handed;
  for (int i = 0; i < 60; ++i) handed.insert(*pool_->Allocate());
  EXPECT_FALSE(pool_->Allocate().ok()) << "the held pages are not handed out";
  EXPECT_EQ(handed.count(pages[0]) + handed.count(pages[1]), 0u);
  pool_->ReleaseHeld();
  EXPECT_FALSE(pool_->holding());
  std::set<int32_t> again{*pool_->Allocate(), *pool_->Allocate()};
  EXPECT_EQ(again, (std::set<int32_t>{pages[0], pages[1]}));
  pool_->Free(pages[2]);  // no hold: free at once
  EXPECT_EQ(*pool_->Allocate(), pages[2]);
}

TEST_F(KvSequenceTest, HeadEditsNameWhatChanged) {
  KvSequence s(pool_.get());
  ASSERT_TRUE(s.Grow(18).ok());  // 5 pages: 4 full, 1 of 2 tokens
  s.AdvanceTail(0, 1, 3);
  const uint64_t before = s.stamp(0, 1);
  const std::vector<PageRef> old = s.pages(0, 1);
  // Keep entry 0; entries 1 and 2 become one fresh page holding their 8 tokens' place.
  auto fresh = pool_->Allocate();
  ASSERT_TRUE(fresh.ok());
  const PageRef rest[] = {{*fresh, 4}, {old[1].id, 4}};
  const int32_t freed[] = {old[2].id};
  s.ReplaceHeadAfter(0, 1, 1, rest, freed);
  EXPECT_NE(s.stamp(0, 1), before);
  ASSERT_EQ(s.pages(0, 1).size(), 5u);
  EXPECT_EQ(s.pages(0, 1)[0].id, old[0].id);
  EXPECT_EQ(s.pages(0, 1)[1].id, *fresh);
  EXPECT_EQ(s.pages(0, 1)[3].id, old[3].id);  // the tail follows
  EXPECT_EQ(s.tail_index(0, 1), 3);
  const HeadEdit* e = s.EditSince(0, 1, before);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->from, 1);
  EXPECT_TRUE(e->entries.empty());
  EXPECT_EQ(s.EditSince(0, 1, before - 1), nullptr);  // a reader that missed an edit
  EXPECT_EQ(s.EditSince(0, 1, 0), nullptr);           // a reader that never saw the list

  // A full ReplaceHead with a hint: entry 2 becomes another page, and everything from 3 on may
  // differ.
  const uint64_t second = s.stamp(0, 1);
  std::vector<PageRef> head = s.pages(0, 1);
  head.resize(3);
  auto other = pool_->Allocate();
  ASSERT_TRUE(other.ok());
  const int32_t dropped[] = {head[2].id};
  head[2] = {*other, 4};
  s.ReplaceHead(0, 1, head, dropped, {3, {2}});
  e = s.EditSince(0, 1, second);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->from, 3);
  EXPECT_EQ(e->entries, std::vector<int32_t>{2});
  EXPECT_EQ(s.EditSince(0, 1, before), nullptr);

  // Edits without a hint.
  const uint64_t third = s.stamp(0, 1);
  s.Truncate(17);
  EXPECT_EQ(s.EditSince(0, 1, third), nullptr);
  // Other lists are untouched.
  EXPECT_EQ(s.pages(1, 1).size(), 5u);
}

}  // namespace
}  // namespace icecache
