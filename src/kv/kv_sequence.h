// The KV of one sequence: for every (layer, KV head) an ordered list of pages in a PagePool.
//
// Tokens are appended in position order; token p of a (layer, head) lives in page p / page_size
// of that list at offset p % page_size. Every (layer, head) has its own pages, so a selection
// policy can later re-arrange one head's pages without touching another's.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/page_pool.h"

namespace icecache {

struct PageRef {
  int32_t id = -1;
  int32_t len = 0;  // valid tokens
};

class KvSequence {
 public:
  // `pool` must outlive the sequence.
  explicit KvSequence(PagePool* pool);
  ~KvSequence();
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  int64_t length() const { return length_; }
  const KvLayout& layout() const { return pool_->layout(); }
  PagePool& pool() const { return *pool_; }

  // Makes room for `n` more tokens (positions length() .. length()+n-1) in every (layer, head)
  // and advances length(). On failure (pool exhausted) nothing changes.
  Status Grow(int64_t n);
  // Drops tokens at positions >= `n` (REQUIRES n <= length()), freeing emptied pages.
  void Truncate(int64_t n);

  // Slots (page_id * page_size + offset) of positions [first, first + n) for `layer`, written as
  // slots[t * n_kv_heads + head]. REQUIRES: first + n <= length().
  void Slots(int layer, int64_t first, int64_t n, int32_t* slots) const;

  const std::vector<PageRef>& pages(int layer, int head) const {
    return pages_[static_cast<size_t>(layer) * layout().n_kv_heads + head];
  }
  // Pages held across all layers and heads.
  int64_t num_pages() const;

  // Makes this (empty) sequence a copy of `other` (same pool): fresh pages with the same
  // contents, lengths and order. On failure (pool exhausted) this stays empty.
  Status CopyFrom(const KvSequence& other, Backend& backend);

 private:
  PagePool* pool_;
  int64_t length_ = 0;
  std::vector<std::vector<PageRef>> pages_;  // [layer * n_kv_heads + head]
};

}  // namespace icecache
