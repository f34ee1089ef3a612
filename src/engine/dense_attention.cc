#include "engine/dense_attention.h"

#include <cmath>
#include <string>

#include "core/check.h"

namespace icecache {

Result<std::unique_ptr<DenseAttention>> DenseAttention::Create(Backend* backend,
                                                               const ModelConfig& config,
                                                               int64_t max_rows,
                                                               int64_t max_entries) {
  std::unique_ptr<DenseAttention> d(new DenseAttention());
  d->backend_ = backend;
  d->config_ = config;
  d->max_rows_ = max_rows;
  d->max_entries_ = max_entries;
  d->region_ = max_rows + 1 + 2 * max_entries;
  const int64_t total = d->region_ * config.n_layers;
  ICECACHE_ASSIGN_OR_RETURN(d->host_, backend->AllocateStaging(DType::kI32, {total}));
  if (backend->device() == Device::kCpu) {
    d->device_ = d->host_;
  } else {
    ICECACHE_ASSIGN_OR_RETURN(d->device_, backend->Allocate(DType::kI32, {total}));
  }
  return d;
}

Status DenseAttention::Prepare(const StepContext& step) {
  const int heads = config_.n_kv_heads;
  const int64_t rows = static_cast<int64_t>(step.seqs.size()) * heads;
  if (rows > max_rows_) {
    return Internal("dense attention: " + std::to_string(rows) + " rows exceed capacity " +
                    std::to_string(max_rows_));
  }
  rows_ = static_cast<int32_t>(rows);
  pool_view_ = step.seqs.front()->pool().view();
  positions_ = step.positions;
  row_base_ = step.row_base;
  int32_t* base = host_.data_as<int32_t>();
  int64_t max_used = 0;
  for (int l = 0; l < config_.n_layers; ++l) {
    int32_t* indptr = base + Region(l);
    int32_t* indices = indptr + IndicesAt();
    int32_t* lens = indptr + LensAt();
    int64_t used = 0;
    indptr[0] = 0;
    int64_t r = 0;
    for (KvSequence* s : step.seqs) {
      for (int h = 0; h < heads; ++h) {
        const std::vector<PageRef>& pages = s->pages(l, h);
        if (used + static_cast<int64_t>(pages.size()) > max_entries_) {
          return Internal("dense attention: page table capacity exceeded");
        }
        for (const PageRef& p : pages) {
          indices[used] = p.id;
          lens[used] = p.len;
          ++used;
        }
        indptr[++r] = static_cast<int32_t>(used);
      }
    }
    max_used = std::max(max_used, used);
  }
  if (backend_->device() != Device::kCpu) {
    const int64_t pitch = region_ * 4;
    char* dst = static_cast<char*>(device_.data());
    const char* src = static_cast<const char*>(host_.data());
    const int64_t n = config_.n_layers;
    ICECACHE_RETURN_IF_ERROR(backend_->CopyBlocks(src, dst, n, (rows + 1) * 4, pitch, pitch));
    if (max_used > 0) {
      ICECACHE_RETURN_IF_ERROR(backend_->CopyBlocks(src + IndicesAt() * 4, dst + IndicesAt() * 4, n,
                                                    max_used * 4, pitch, pitch));
      ICECACHE_RETURN_IF_ERROR(backend_->CopyBlocks(src + LensAt() * 4, dst + LensAt() * 4, n,
                                                    max_used * 4, pitch, pitch));
    }
  }
  return Status::Ok();
}

Status DenseAttention::Attend(int layer, const Tensor& q, const Tensor& out) {
  // All sequences of a forward share one pool.
  const int32_t* indptr = device_.data_as<int32_t>() + Region(layer);
  AttentionArgs a;
  a.q = q;
  a.out = out;
  a.positions = positions_;
  a.row_base = row_base_;
  a.table.indptr = indptr;
  a.table.indices = indptr + IndicesAt();
  a.table.lens = indptr + LensAt();
  a.table.num_rows = rows_;
  a.pool = pool_view_;
  a.n_heads = config_.n_heads;
  a.n_kv_heads = config_.n_kv_heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  a.causal = true;
  backend_->Attention(a);
  return Status::Ok();
}

}  // namespace icecache
