// StagedAttention (dense attention over an offloaded host tier, staged layer by layer into a
// separate pool) gives exactly DenseAttention's output: same pages in the same order, copied.
// Checked on the CPU backend with prefill-sized and decode-sized steps of two sequences.
#include "engine/staged_attention.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "engine/dense_attention.h"
#include "kv/kv_sequence.h"
#include "kv/page_pool.h"

namespace icecache {
namespace {

class StagedAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = MakeCpuBackend({.threads = 1});
    layout_ = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 8, .page_size = 4};
    pool_ = PagePool::Create(*backend_, layout_, 1024).value();
    config_.n_layers = 2;
    config_.n_heads = 4;
    config_.n_kv_heads = 2;
    config_.head_dim = 8;
  }

  // Grows `seq` by `n` tokens with random K/V and their positions written into its pages.
  void Grow(KvSequence& seq, int64_t n) {
    const int64_t first = seq.length();
    ASSERT_TRUE(seq.Grow(n).ok());
    const KvPoolView v = pool_->view();
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<int32_t> slots(static_cast<size_t>(n * layout_.n_kv_heads));
    for (int l = 0; l < layout_.n_layers; ++l) {
      seq.Slots(l, first, n, slots.data());
      for (int64_t t = 0; t < n; ++t) {
        for (int h = 0; h < layout_.n_kv_heads; ++h) {
          const int64_t slot = slots[t * layout_.n_kv_heads + h];
          v.positions[slot] = static_cast<int32_t>(first + t);
          for (int d = 0; d < layout_.head_dim; ++d) {
            static_cast<float*>(v.k)[slot * layout_.head_dim + d] = u(rng_);
            static_cast<float*>(v.v)[slot * layout_.head_dim + d] = u(rng_);
          }
        }
      }
    }
  }

  // Runs one step of `counts` new tokens per sequence through both strategies and compares.
  void Compare(const std::vector<KvSequence*>& seqs, const std::vector<int32_t>& counts) {
    std::vector<int64_t> start;
    std::vector<int32_t> positions, row_base;
    for (size_t s = 0; s < seqs.size(); ++s) {
      start.push_back(seqs[s]->length() - counts[s]);
      for (int32_t i = 0; i < counts[s]; ++i) {
        positions.push_back(static_cast<int32_t>(start.back() + i));
        row_base.push_back(static_cast<int32_t>(s) * layout_.n_kv_heads);
      }
    }
    const int64_t n = static_cast<int64_t>(positions.size());
    const StepContext step{seqs,
                           counts,
                           start,
                           n,
                           Tensor(positions.data(), DType::kI32, {n}),
                           Tensor(row_base.data(), DType::kI32, {n})};
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> q(static_cast<size_t>(n * config_.n_heads * config_.head_dim));
    for (float& x : q) x = u(rng_);
    std::vector<float> want(q.size()), got(q.size());
    const Tensor qt(q.data(), DType::kF32, {n, config_.n_heads, config_.head_dim});
    const Tensor wt(want.data(), DType::kF32, {n, config_.n_heads, config_.head_dim});
    const Tensor gt(got.data(), DType::kF32, {n, config_.n_heads, config_.head_dim});
    auto dense = DenseAttention::Create(backend_.get(), config_, 8, 256).value();
    StagedAttention staged(backend_.get(), config_, layout_, /*pages=*/4);
    ASSERT_TRUE(dense->Prepare(step).ok());
    ASSERT_TRUE(staged.Prepare(step).ok());
    for (int l = 0; l < layout_.n_layers; ++l) {
      ASSERT_TRUE(dense->Attend(l, qt, wt).ok());
      ASSERT_TRUE(staged.Attend(l, qt, gt).ok());
      EXPECT_EQ(got, want) << "layer " << l;
    }
    EXPECT_GT(staged.bytes(), 0);
  }

  std::mt19937 rng_{7};
  std::unique_ptr<Backend> backend_;
  KvLayout layout_;
  std::unique_ptr<PagePool> pool_;
  ModelConfig config_;
};

TEST_F(StagedAttentionTest, PrefillAndDecodeStepsEqualDenseAttention) {
  KvSequence a(pool_.get()), b(pool_.get());
  Grow(a, 13);
  Grow(b, 6);
  Compare({&a, &b}, {13, 6});  // both prefilled in one step (the staging pool grows)
  for (int step = 0; step < 5; ++step) {
    Grow(a, 1);
    Grow(b, step == 2 ? 9 : 1);
    Compare({&a, &b}, {1, step == 2 ? 9 : 1});
  }
}

}  // namespace
}  // namespace icecache
