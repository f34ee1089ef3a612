// Plain views of the paged KV layout that backends consume (no ownership, no engine logic).
//
// One page holds up to `page_size` tokens of one (layer, KV head): K[page_size][head_dim],
// V[page_size][head_dim] (keys after RoPE) and the absolute position of each token. All pages of
// all layers live in one pool and are named by a global page id. A page may hold non-contiguous
// positions (semantic pages), so every page-table entry carries its own token count.
//
// Page table (FlashInfer's indptr/indices idea, with a per-entry length instead of
// last_page_len): row r covers entries [indptr[r], indptr[r+1]) of `indices` / `lens`. Dense
// attention passes every page of a sequence; a selection policy passes a shorter list. The
// same kernels run both.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace icecache {

// The page pool as seen by kernels. Pointers are in the backend's memory space.
struct KvPoolView {
  void* k = nullptr;             // [num_pages][page_size][head_dim] of `dtype`
  void* v = nullptr;             // [num_pages][page_size][head_dim] of `dtype`
  int32_t* positions = nullptr;  // [num_pages][page_size]
  DType dtype = DType::kF32;
  int64_t num_pages = 0;
  int page_size = 0;
  int head_dim = 0;
};

// A page table over `num_rows` rows. Pointers are in the backend's memory space.
struct PageTableView {
  const int32_t* indptr = nullptr;   // [num_rows + 1]
  const int32_t* indices = nullptr;  // [indptr[num_rows]] page ids
  const int32_t* lens = nullptr;     // [indptr[num_rows]] valid tokens of each listed page
  int32_t num_rows = 0;
};

}  // namespace icecache
