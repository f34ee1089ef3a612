#include "engine/sparse_attention.h"

#include <cmath>
#include <string>

#include "core/process.h"

namespace icecache {

SparseAttention::SparseAttention(Backend* backend, const ModelConfig& config)
    : backend_(backend), config_(config) {}

Status SparseAttention::Prepare(const StepContext& step) {
  if (step.seqs.size() != states_.size()) return Internal("sparse attention: batch mismatch");
  for (size_t i = 0; i < states_.size(); ++i) {
    if (step.counts[i] != 1) {
      return Internal("sparse attention runs decode steps (one token per sequence)");
    }
  }
  if (backend_->device() != Device::kCpu) {
    return Unsupported("sparse KV policies and --kv-recall run on the CPU backend for now");
  }
  positions_ = step.positions;
  if (row_base_.empty()) {
    ICECACHE_ASSIGN_OR_RETURN(row_base_, backend_->Allocate(DType::kI32, {1}));
  }
  const int heads = config_.n_kv_heads;
  selected_.resize(heads);
  mapped_.resize(heads);
  token_slots_.resize(heads);
  return Status::Ok();
}

Status SparseAttention::AttendOne(const Tensor& q, const Tensor& out, int64_t token,
                                  const std::vector<std::vector<PageRef>>& lists,
                                  const KvPoolView& pool) {
  const int heads = config_.n_kv_heads;
  table_.clear();
  table_.push_back(0);
  int32_t total = 0;
  for (int h = 0; h < heads; ++h) {
    total += static_cast<int32_t>(lists[h].size());
    table_.push_back(total);
  }
  for (int h = 0; h < heads; ++h) {
    for (const PageRef& p : lists[h]) table_.push_back(p.id);
  }
  for (int h = 0; h < heads; ++h) {
    for (const PageRef& p : lists[h]) table_.push_back(p.len);
  }
  AttentionArgs a;
  a.q = q.Slice(token, token + 1);
  a.out = out.Slice(token, token + 1);
  a.positions = positions_.Slice(token, token + 1);
  a.row_base = row_base_;
  a.table.indptr = table_.data();
  a.table.indices = table_.data() + heads + 1;
  a.table.lens = table_.data() + heads + 1 + total;
  a.table.num_rows = heads;
  a.pool = pool;
  a.n_heads = config_.n_heads;
  a.n_kv_heads = heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));  // as AttentionRecall
  a.causal = true;
  backend_->Attention(a);
  return Status::Ok();
}

Status SparseAttention::Attend(int layer, const Tensor& q, const Tensor& out) {
  const int heads = config_.n_kv_heads;
  const int group = config_.n_heads / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  const int64_t qrow = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
  for (size_t i = 0; i < states_.size(); ++i) {
    SequenceState& st = *states_[i];
    KvAccounting& acct = st.acct;
    const int64_t t = static_cast<int64_t>(i);
    const bool dense = !st.sparse() || layer < st.kv.dense_layers;
    if (dense) {
      for (int h = 0; h < heads; ++h) {
        selected_[h] = st.seq.pages(layer, h);
        for (const PageRef& p : selected_[h]) acct.tokens_dense += p.len;
      }
      ++acct.dense_layer_steps;
      if (st.kv.recall && !st.sparse()) {
        const double r0 = NowSeconds();
        const float* qh = q.data_as<const float>() + t * qrow;
        for (int h = 0; h < heads; ++h) {
          recall_.AddPages(st.seq, layer, h, qh, group, scale, selected_[h], &acct.recall);
        }
        acct.recall_s += NowSeconds() - r0;
      }
      const double t0 = NowSeconds();
      ICECACHE_RETURN_IF_ERROR(AttendOne(q, out, t, selected_, st.seq.pool().view()));
      acct.attend_s += NowSeconds() - t0;
      continue;
    }
    // select
    const float* qh = q.data_as<const float>() + t * qrow;
    SelectionStats sel;
    const double t0 = NowSeconds();
    const bool tokens = st.index->token_level();
    if (tokens) {
      st.index->SelectTokens(st.seq, layer, qh, token_slots_, &sel);
    } else {
      st.index->Select(st.seq, layer, qh, selected_, &sel);
    }
    const double t1 = NowSeconds();
    if (st.kv.recall) {
      for (int h = 0; h < heads; ++h) {
        if (tokens) {
          recall_.AddSlots(st.seq, layer, h, qh, group, scale, token_slots_[h], &acct.recall);
        } else {
          recall_.AddPages(st.seq, layer, h, qh, group, scale, selected_[h], &acct.recall);
        }
      }
      acct.recall_s += NowSeconds() - t1;
    }
    const double t1f = NowSeconds();
    // fetch
    for (int h = 0; h < heads; ++h) {
      mapped_[h].clear();
      const int group = layer * heads + h;
      if (tokens) {
        ICECACHE_RETURN_IF_ERROR(
            st.working_set->Gather(group, token_slots_[h], st.seq.pool(), &mapped_[h]));
      } else {
        if (static_cast<int>(selected_[h].size()) > st.working_set->capacity()) {
          return Internal("policy selected " + std::to_string(selected_[h].size()) +
                          " pages, more than the working set holds");
        }
        st.working_set->Map(group, selected_[h], st.seq.pool(), &mapped_[h]);
      }
      for (const PageRef& p : mapped_[h]) acct.tokens_sparse += p.len;
    }
    ICECACHE_RETURN_IF_ERROR(st.working_set->Flush(st.seq.pool()));
    const double t2 = NowSeconds();
    // attend
    ICECACHE_RETURN_IF_ERROR(AttendOne(q, out, t, mapped_, st.working_set->view()));
    const double t3 = NowSeconds();
    acct.select_s += t1 - t0;
    acct.fetch_s += t2 - t1f;
    acct.attend_s += t3 - t2;
    acct.nodes += sel.nodes_visited;
    ++acct.sparse_layer_steps;
  }
  return Status::Ok();
}

}  // namespace icecache
