// A KV sequence driven directly (no model) for lychee index tests: tokens are appended with
// generated keys and values, every written (layer, head, position) row is recorded, and the
// host tier can be checked against the record at any time.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/split_mix.h"
#include "index/key_reader.h"
#include "kv/kv_sequence.h"
#include "kv/page_pool.h"

namespace icecache::lychee {

// Deterministic pseudo-random numbers for the index tests.
using TestRng = SplitMixRng;

class KvHarness {
 public:
  KvHarness(const KvLayout& layout, int64_t capacity) : layout_(layout) {
    backend_ = MakeCpuBackend({.threads = 1});
    auto pool = PagePool::Create(*backend_, layout, capacity);
    EXPECT_TRUE(pool.ok());
    pool_ = std::move(pool).value();
    seq_ = std::make_unique<KvSequence>(pool_.get());
  }

  KvSequence& seq() { return *seq_; }
  const KvLayout& layout() const { return layout_; }

  // Appends `n` tokens; key of (layer, head, position) from `key(layer, head, pos, out)`,
  // values random. Records every row written.
  template <typename KeyFn>
  void Append(int64_t n, KeyFn key, TestRng& rng) {
    ASSERT_TRUE(TryAppend(n, key, rng));
  }

  // As Append, but a pool too full to grow is reported (false, nothing written) instead of
  // failing the test.
  template <typename KeyFn>
  bool TryAppend(int64_t n, KeyFn key, TestRng& rng) {
    const int64_t first = seq_->length();
    if (!seq_->Grow(n).ok()) return false;
    const int heads = layout_.n_kv_heads, d = layout_.head_dim;
    std::vector<int32_t> slots(static_cast<size_t>(n) * heads);
    const KvPoolView v = pool_->view();
    for (int l = 0; l < layout_.n_layers; ++l) {
      seq_->Slots(l, first, n, slots.data());
      for (int64_t t = 0; t < n; ++t) {
        for (int h = 0; h < heads; ++h) {
          const int32_t slot = slots[t * heads + h];
          float* k = static_cast<float*>(v.k) + static_cast<int64_t>(slot) * d;
          float* val = static_cast<float*>(v.v) + static_cast<int64_t>(slot) * d;
          key(l, h, first + t, k);
          for (int j = 0; j < d; ++j) val[j] = rng.Normal();
          v.positions[slot] = static_cast<int32_t>(first + t);
          std::vector<float> row(k, k + d);
          row.insert(row.end(), val, val + d);
          rows_[{l, h, first + t}] = std::move(row);
        }
      }
    }
    return true;
  }

  // Every recorded row is in exactly one page of its list, bit for bit, and nothing else is.
  void ExpectLossless() {
    const int d = layout_.head_dim;
    const KvPoolView v = pool_->view();
    std::set<int32_t> ids;  // over all lists: a page belongs to one list
    for (int l = 0; l < layout_.n_layers; ++l) {
      for (int h = 0; h < layout_.n_kv_heads; ++h) {
        std::set<int64_t> seen;
        for (const PageRef& p : seq_->pages(l, h)) {
          ASSERT_TRUE(ids.insert(p.id).second) << "page listed twice";
          for (int t = 0; t < p.len; ++t) {
            const int64_t slot = static_cast<int64_t>(p.id) * layout_.page_size + t;
            const int64_t pos = v.positions[slot];
            ASSERT_TRUE(seen.insert(pos).second)
                << "position " << pos << " twice (" << l << "," << h << ")";
            auto it = rows_.find({l, h, pos});
            ASSERT_NE(it, rows_.end()) << "unknown position " << pos;
            ASSERT_EQ(0, std::memcmp(static_cast<const float*>(v.k) + slot * d, it->second.data(),
                                     d * sizeof(float)))
                << "K of (" << l << "," << h << "," << pos << ") changed";
            ASSERT_EQ(0, std::memcmp(static_cast<const float*>(v.v) + slot * d,
                                     it->second.data() + d, d * sizeof(float)))
                << "V of (" << l << "," << h << "," << pos << ") changed";
          }
        }
        ASSERT_EQ(static_cast<int64_t>(seen.size()), seq_->length()) << "tokens lost";
      }
    }
    // Re-arrangements free exactly the pages they stop listing: none leaks, none is lost.
    ASSERT_EQ(pool_->used(), static_cast<int64_t>(ids.size())) << "pages leaked";
  }

 private:
  KvLayout layout_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<KvSequence> seq_;
  std::map<std::tuple<int, int, int64_t>, std::vector<float>> rows_;
};

// Keys drawn around a few centres per (layer, head), the centre changing with the "topic"
// (position / 40), plus noise: structure for the clustering to find.
class TopicKeys {
 public:
  TopicKeys(int dim, int topics, uint64_t seed, float scale = 4.0f) : dim_(dim), topics_(topics) {
    TestRng rng(seed);
    centres_.resize(static_cast<size_t>(64) * topics * dim);
    for (float& x : centres_) x = scale * rng.Normal();
  }
  // Shifts every later key by `offset` (a new distribution, for drift).
  void set_offset(float offset) { offset_ = offset; }
  void operator()(int layer, int head, int64_t pos, float* k) {
    const int topic = static_cast<int>((pos / 40) % topics_);
    const float* c =
        &centres_[(static_cast<size_t>((layer * 8 + head) % 64) * topics_ + topic) * dim_];
    TestRng rng(static_cast<uint64_t>(pos) * 1000003u + layer * 131u + head);
    for (int j = 0; j < dim_; ++j) k[j] = c[j] + rng.Normal() + (j % 2 == 0 ? offset_ : -offset_);
  }

 private:
  int dim_;
  int topics_;
  float offset_ = 0;
  std::vector<float> centres_;
};

}  // namespace icecache::lychee
