// Copies token rows (K, V and position) between slots of pages of one pool. Policies that
// re-arrange tokens into their own pages (lychee chunks, icecache leaves) move rows with it; a
// copy is bit for bit, so the host tier never changes a token's K/V.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kv/kv_views.h"

namespace icecache {

class RowCopier {
 public:
  explicit RowCopier(const KvPoolView& pool)
      : pool_(pool), row_bytes_(static_cast<size_t>(pool.head_dim) * BlockBytes(pool.dtype)) {}

  // Copies the row at (src_page, src_slot) to (dst_page, dst_slot). A row copied onto itself is
  // left alone.
  void Copy(int32_t src_page, int src_slot, int32_t dst_page, int dst_slot) const {
    const int64_t s = static_cast<int64_t>(src_page) * pool_.page_size + src_slot;
    const int64_t d = static_cast<int64_t>(dst_page) * pool_.page_size + dst_slot;
    if (s == d) return;
    std::memcpy(static_cast<char*>(pool_.k) + d * row_bytes_,
                static_cast<const char*>(pool_.k) + s * row_bytes_, row_bytes_);
    std::memcpy(static_cast<char*>(pool_.v) + d * row_bytes_,
                static_cast<const char*>(pool_.v) + s * row_bytes_, row_bytes_);
    pool_.positions[d] = pool_.positions[s];
  }

 private:
  KvPoolView pool_;
  size_t row_bytes_;
};

}  // namespace icecache
