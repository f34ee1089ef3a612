// The shape of a model's paged KV store.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace icecache {

struct KvLayout {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_size = 16;  // tokens per page
  DType dtype = DType::kF32;

  // Bytes of K plus V of one page.
  int64_t page_bytes() const { return 2LL * page_size * head_dim * BlockBytes(dtype); }
  // Pages needed for `tokens` tokens of one sequence, all layers and heads.
  int64_t PagesForTokens(int64_t tokens) const {
    return (tokens + page_size - 1) / page_size * n_layers * n_kv_heads;
  }
};

}  // namespace icecache
