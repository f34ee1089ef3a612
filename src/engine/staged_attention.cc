#include "engine/staged_attention.h"

#include <algorithm>
#include <cmath>

namespace icecache {

StagedAttention::StagedAttention(Backend* backend, const ModelConfig& config,
                                 const KvLayout& layout, int64_t pages)
    : backend_(backend), config_(config), layout_(layout), initial_pages_(pages) {}

Status StagedAttention::Prepare(const StepContext& step) {
  step_ = step;
  return Status::Ok();
}

Status StagedAttention::Reserve(int64_t pages) {
  if (stage_ && stage_->capacity() >= pages) return Status::Ok();
  const int64_t want = std::max({pages, initial_pages_, stage_ ? 2 * stage_->capacity() : 0});
  stage_.reset();
  ICECACHE_ASSIGN_OR_RETURN(stage_, PagePool::Create(*backend_, layout_, want));
  return Status::Ok();
}

Status StagedAttention::Attend(int layer, const Tensor& q, const Tensor& out) {
  const int heads = config_.n_kv_heads;
  const int64_t rows = static_cast<int64_t>(step_.seqs.size()) * heads;
  int64_t total = 0;
  for (const KvSequence* s : step_.seqs) {
    for (int h = 0; h < heads; ++h) total += static_cast<int64_t>(s->pages(layer, h).size());
  }
  ICECACHE_RETURN_IF_ERROR(Reserve(total));
  // Staging page i holds the i-th listed page: the indices are 0..total-1 in row order, and
  // the same device entries name the gather's destination pages.
  ids_.resize(static_cast<size_t>(total));
  table_.assign(static_cast<size_t>(rows + 1 + 2 * total), 0);
  int32_t* indptr = table_.data();
  int32_t* indices = indptr + rows + 1;
  int32_t* lens = indices + total;
  int64_t i = 0, r = 0;
  for (const KvSequence* s : step_.seqs) {
    for (int h = 0; h < heads; ++h, ++r) {
      indptr[r] = static_cast<int32_t>(i);
      for (const PageRef& p : s->pages(layer, h)) {
        ids_[i] = p.id;
        indices[i] = static_cast<int32_t>(i);
        lens[i] = p.len;
        ++i;
      }
    }
  }
  indptr[rows] = static_cast<int32_t>(total);
  const int64_t need_table = static_cast<int64_t>(table_.size());
  if (ids_dev_.empty() || ids_dev_.numel() < total) {
    ICECACHE_ASSIGN_OR_RETURN(ids_dev_, backend_->Allocate(DType::kI32, {2 * total + 1024}));
  }
  if (table_dev_.empty() || table_dev_.numel() < need_table) {
    ICECACHE_ASSIGN_OR_RETURN(table_dev_, backend_->Allocate(DType::kI32, {2 * need_table + 1024}));
  }
  ICECACHE_RETURN_IF_ERROR(backend_->Copy(Tensor(table_.data(), DType::kI32, {need_table}),
                                          table_dev_.Slice(0, need_table)));
  if (total > 0) {
    ICECACHE_RETURN_IF_ERROR(
        backend_->Copy(Tensor(ids_.data(), DType::kI32, {total}), ids_dev_.Slice(0, total)));
    backend_->CopyPages(step_.seqs.front()->pool().view(), stage_->view(), ids_dev_.Slice(0, total),
                        table_dev_.Slice(rows + 1, rows + 1 + total));
  }
  const int32_t* t = table_dev_.data_as<const int32_t>();
  AttentionArgs a;
  a.q = q;
  a.out = out;
  a.positions = step_.positions;
  a.row_base = step_.row_base;
  a.table.indptr = t;
  a.table.indices = t + rows + 1;
  a.table.lens = t + rows + 1 + total;
  a.table.num_rows = static_cast<int32_t>(rows);
  a.pool = stage_->view();
  a.n_heads = config_.n_heads;
  a.n_kv_heads = heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  a.causal = true;
  backend_->Attention(a);
  return Status::Ok();
}

}  // namespace icecache
