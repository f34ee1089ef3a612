#include "engine/sparse_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/env_switch.h"
#include "core/half.h"
#include "core/process.h"

namespace icecache {

SparseAttention::SparseAttention(Backend* backend, const ModelConfig& config)
    : backend_(backend), config_(config) {
  batch_ops_ = EnvSwitch("ICECACHE_DEVICE_BATCH", true);
  queued_uploads_ = EnvSwitch("ICECACHE_QUEUED_UPLOADS", false);
  parallel_prepare_ = EnvSwitch("ICECACHE_PARALLEL_PREPARE", true);
  const int percent = EnvInt("ICECACHE_PREFETCH_PERCENT", 100);
  prefetch_percent_ = percent >= 1 && percent <= 100 ? percent : 100;
}

void SparseAttention::SetBatch(std::span<SequenceState* const> states) {
  states_ = states;
  // Whether this step prefetches is decided once, for all its layers.
  int selecting = 0;
  bool behind = false;
  for (const SequenceState* st : states_) {
    selecting += st->device_select && st->sparse() ? 1 : 0;
    behind = behind || (st->device_select && st->kv.fetch == "behind");
  }
  // kAuto leaves steps that fetch behind alone: a prefetch is joined before its layer attends,
  // and with it the copies behind queued before it on the side stream.
  step_tuned_ = prefetch_ == PrefetchMode::kAuto && selecting == 1 && !behind;
  step_prefetch_ =
      selecting > 0 && (prefetch_ == PrefetchMode::kOn || (step_tuned_ && tuner_.wanted()));
  if (step_prefetch_) {
    for (SequenceState* st : states_) st->acct.prefetch_steps += st->device_select && st->sparse();
  }
}

Status SparseAttention::Prepare(const StepContext& step) {
  if (step.seqs.size() != states_.size()) return Internal("sparse attention: batch mismatch");
  for (size_t i = 0; i < states_.size(); ++i) {
    if (step.counts[i] != 1) {
      return Internal("sparse attention runs decode steps (one token per sequence)");
    }
    if (!states_[i]->seq.pool().host_accessible()) {
      return Unsupported(
          "sparse KV policies and --kv-recall need the KV host tier on the host "
          "(--kv-offload on)");
    }
  }
  ICECACHE_RETURN_IF_ERROR(PrepareDeviceSelection());
  positions_ = step.positions;
  if (row_base_.empty()) {
    ICECACHE_ASSIGN_OR_RETURN(row_base_, backend_->Allocate(DType::kI32, {1}));
  }
  const int heads = config_.n_kv_heads;
  selected_.resize(heads);
  mapped_.resize(heads);
  token_slots_.resize(heads);
  if (backend_->device() != Device::kCpu) {
    const int64_t rows = static_cast<int64_t>(states_.size());
    const int64_t width = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
    if (q_host_.empty() || q_host_.rows() < rows) {
      ICECACHE_ASSIGN_OR_RETURN(
          q_host_, backend_->AllocateStaging(backend_->activation_dtype(), {rows, width}));
    }
  }
  return Status::Ok();
}

Status SparseAttention::PrepareDeviceSelection() {
  // Inside the transformer's input fence (LayerAttention::Prepare): uploads may be queued.
  const auto upload =
      queued_uploads_ ? DeviceSelection::Upload::kQueued : DeviceSelection::Upload::kBlocking;
  std::vector<SequenceState*> device;
  for (SequenceState* st : states_) {
    if (st->device_select) device.push_back(st);
  }
  std::vector<double> took(device.size(), 0.0);
  for (size_t i = 0; i < device.size(); ++i) {
    const double t0 = NowSeconds();
    Status s = device[i]->device_select->BeginPrepare(device[i]->seq, 1, upload);
    took[i] += NowSeconds() - t0;
    if (!s.ok()) return s;
  }
  // The host work of each sequence (comparing its lists with what the device holds) on the
  // workers when there are several sequences: at batch 20 on the 8B shape it was most of the
  // step's host time before the first layer is queued, when the device waits (docs/PERF.md).
  auto collect = [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double t0 = NowSeconds();
      device[i]->device_select->CollectChanges(device[i]->seq, 1);
      took[i] += NowSeconds() - t0;
    }
  };
  const int64_t n = static_cast<int64_t>(device.size());
  if (workers_ != nullptr && parallel_prepare_ && n > 1) {
    workers_->ParallelForIfIdle(n, 1, collect);
  } else {
    collect(0, 0, n);
  }
  // Every sequence whose changes were collected uploads them, even after another one failed, so
  // that none keeps host state that its device copy lacks.
  Status first = Status::Ok();
  for (size_t i = 0; i < device.size(); ++i) {
    const double t0 = NowSeconds();
    const Status s = device[i]->device_select->FinishPrepare(device[i]->seq, upload);
    took[i] += NowSeconds() - t0;
    if (!s.ok() && first.ok()) first = s;
    device[i]->acct.prepare_s += took[i];
  }
  return first;
}

bool SparseAttention::NeedsHostQueries(int layer) const {
  for (const SequenceState* st : states_) {
    if (st->kv.recall || (st->sparse() && !st->device_select && layer >= st->kv.dense_layers)) {
      return true;
    }
  }
  return false;
}

namespace {

// Whether `st` selects `layer`'s pages on the device (and so can prefetch them).
bool SelectsOnDevice(const SequenceState& st, int layer) {
  return st.device_select && st.sparse() && layer >= st.kv.dense_layers;
}

}  // namespace

bool SparseAttention::WantsPrefetch(int layer) const {
  if (!step_prefetch_) return false;
  for (const SequenceState* st : states_) {
    if (SelectsOnDevice(*st, layer)) return true;
  }
  return false;
}

void SparseAttention::EndStep(double step_seconds) {
  if (step_tuned_) tuner_.Observe(step_seconds);
  step_tuned_ = false;
}

Status SparseAttention::Prefetch(int layer, const Tensor& q_estimate, bool defer_copy) {
  // Per sequence: all query heads, or fewer (an estimate of one head per KV group).
  const int64_t width = q_estimate.numel() / q_estimate.dim(0);
  for (size_t i = 0; i < states_.size(); ++i) {
    SequenceState& st = *states_[i];
    if (!SelectsOnDevice(st, layer)) continue;
    const int64_t t = static_cast<int64_t>(i);
    st.device_select->Prefetch(layer, q_estimate.Slice(t, t + 1).Reshape({width}), *st.working_set,
                               prefetch_percent_, defer_copy);
  }
  return Status::Ok();
}

Status SparseAttention::FinishPrefetch(int layer) {
  for (SequenceState* st : states_) {
    if (SelectsOnDevice(*st, layer)) st->device_select->CopyPrefetched(layer, *st->working_set);
  }
  return Status::Ok();
}

Result<const float*> SparseAttention::HostQueries(const Tensor& q) {
  if (backend_->device() == Device::kCpu) return q.data_as<const float>();
  const int64_t n = q.dim(0);
  const Tensor host = q_host_.Slice(0, n);
  ICECACHE_RETURN_IF_ERROR(backend_->Copy(q.Reshape({n, host.dim(1)}), host));
  backend_->Synchronize();
  const int64_t count = host.numel();
  q_f32_.resize(static_cast<size_t>(count));
  if (host.dtype() == DType::kBF16) {
    const uint16_t* src = host.data_as<const uint16_t>();
    for (int64_t i = 0; i < count; ++i) q_f32_[i] = Bf16ToF32(src[i]);
  } else if (host.dtype() == DType::kF32) {
    const float* src = host.data_as<const float>();
    std::copy(src, src + count, q_f32_.begin());
  } else {
    return Internal("sparse attention: unexpected activation type");
  }
  return q_f32_.data();
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
  const int32_t* table = table_.data();
  if (backend_->device() != Device::kCpu) {
    const int64_t need = static_cast<int64_t>(table_.size());
    if (table_dev_.empty() || table_dev_.numel() < need) {
      ICECACHE_ASSIGN_OR_RETURN(table_dev_,
                                backend_->Allocate(DType::kI32, {std::max<int64_t>(need, 4096)}));
    }
    const Tensor src(table_.data(), DType::kI32, {need});
    ICECACHE_RETURN_IF_ERROR(backend_->Copy(src, table_dev_.Slice(0, need)));
    table = table_dev_.data_as<const int32_t>();
  }
  PageTableView view;
  view.indptr = table;
  view.indices = table + heads + 1;
  view.lens = table + heads + 1 + total;
  view.num_rows = heads;
  AttendTable(q, out, token, view, pool);
  return Status::Ok();
}

AttentionArgs SparseAttention::TableArgs(const Tensor& q, const Tensor& out, int64_t token,
                                         const PageTableView& table, const KvPoolView& pool) const {
  AttentionArgs a;
  a.q = q.Slice(token, token + 1);
  a.out = out.Slice(token, token + 1);
  a.positions = positions_.Slice(token, token + 1);
  a.row_base = row_base_;
  a.table = table;
  a.pool = pool;
  a.n_heads = config_.n_heads;
  a.n_kv_heads = config_.n_kv_heads;
  a.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));  // as AttentionRecall
  a.causal = true;
  return a;
}

void SparseAttention::AttendTable(const Tensor& q, const Tensor& out, int64_t token,
                                  const PageTableView& table, const KvPoolView& pool) {
  backend_->Attention(TableArgs(q, out, token, table, pool));
}

void SparseAttention::AttendDeviceSelected(int layer, const Tensor& q, const Tensor& out,
                                           int64_t token, SequenceState& st) {
  KvAccounting& acct = st.acct;
  DeviceSelection& sel = *st.device_select;
  const bool timed = phase_timing_ && backend_->device() != Device::kCpu;
  const int64_t width = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
  if (timed) backend_->Synchronize();
  const double t0 = NowSeconds();
  sel.Select(layer, q.Slice(token, token + 1).Reshape({width}));
  if (timed) backend_->Synchronize();
  const double t1 = NowSeconds();
  PageTableView table;
  sel.Map(layer, *st.working_set, &table);
  if (sel.defers()) {
    // The deferred pages' copies touch only slots the table does not list. In a lane they stay
    // in it (side work forks from the main stream, not from the lane).
    if (!in_lanes_) backend_->BeginSideWork();
    sel.CopyBehind(layer, *st.working_set);
    if (!in_lanes_) backend_->EndSideWork();
  }
  if (timed) backend_->Synchronize();
  const double t2 = NowSeconds();
  AttendTable(q, out, token, table, st.working_set->view());
  if (timed) backend_->Synchronize();
  const double t3 = NowSeconds();
  // Without waits the phases only queue work: their time is left to "rest".
  if (timed || backend_->device() == Device::kCpu) {
    acct.select_s += t1 - t0;
    acct.fetch_s += t2 - t1;
    acct.attend_s += t3 - t2;
  }
  acct.nodes += sel.planned_nodes(layer);  // tokens: the device counters (SequenceState::Stats)
  ++acct.sparse_layer_steps;
}

void SparseAttention::AttendDeviceSelectedBatch(int layer, const Tensor& q, const Tensor& out) {
  const int64_t width = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
  select_batch_.clear();
  map_batch_.clear();
  behind_batch_.clear();
  attend_batch_.clear();
  for (const size_t i : device_selected_) {
    SequenceState& st = *states_[i];
    const DeviceSelection& sel = *st.device_select;
    const int64_t t = static_cast<int64_t>(i);
    select_batch_.push_back(sel.SelectArgs(layer, q.Slice(t, t + 1).Reshape({width})));
    map_batch_.push_back(sel.MapArgs(layer, *st.working_set));
    if (sel.defers()) behind_batch_.push_back(sel.BehindMapArgs(layer, *st.working_set));
    attend_batch_.push_back(TableArgs(q, out, t, sel.Table(), st.working_set->view()));
    st.acct.nodes += sel.planned_nodes(layer);  // tokens: the device counters
    ++st.acct.sparse_layer_steps;
  }
  const double t0 = NowSeconds();
  backend_->SelectPagesBatch(select_batch_);
  const double t1 = NowSeconds();
  backend_->MapPagesBatch(map_batch_);
  if (!behind_batch_.empty()) {
    backend_->BeginSideWork();
    backend_->MapPagesBatch(behind_batch_);
    backend_->EndSideWork();
  }
  const double t2 = NowSeconds();
  backend_->AttentionBatch(attend_batch_);
  const double t3 = NowSeconds();
  if (backend_->device() != Device::kCpu) return;  // only queued: the time is left to "rest"
  const double share = 1.0 / static_cast<double>(device_selected_.size());
  for (const size_t i : device_selected_) {
    KvAccounting& acct = states_[i]->acct;
    acct.select_s += (t1 - t0) * share;
    acct.fetch_s += (t2 - t1) * share;
    acct.attend_s += (t3 - t2) * share;
  }
}

bool SparseAttention::AttendsInParts(int layer) const {
  if (states_.empty() || (phase_timing_ && backend_->device() != Device::kCpu)) return false;
  for (const SequenceState* st : states_) {
    // A part runs as side work, which does not nest: no copies behind.
    if (st->kv.recall || !SelectsOnDevice(*st, layer) || st->kv.fetch == "behind") return false;
  }
  return true;
}

Status SparseAttention::AttendPart(int layer, const Tensor& q, const Tensor& out, size_t begin,
                                   size_t end) {
  if (begin >= end || end > states_.size() || !AttendsInParts(layer)) {
    return Internal("sparse attention: no such part of the batch");
  }
  device_selected_.clear();
  for (size_t i = begin; i < end; ++i) device_selected_.push_back(i);
  if (batch_ops_ && device_selected_.size() > 1) {
    AttendDeviceSelectedBatch(layer, q, out);
    return Status::Ok();
  }
  for (size_t i = begin; i < end; ++i) {
    AttendDeviceSelected(layer, q, out, static_cast<int64_t>(i), *states_[i]);
  }
  return Status::Ok();
}

Status SparseAttention::Attend(int layer, const Tensor& q, const Tensor& out) {
  const int heads = config_.n_kv_heads;
  const int group = config_.n_heads / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  const int64_t qrow = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
  const float* q_host = nullptr;
  const bool gpu = backend_->device() != Device::kCpu;
  if (NeedsHostQueries(layer)) {
    // The layer's work so far belongs to "rest"; only the copy is charged to selection.
    if (gpu) backend_->Synchronize();
    const double t0 = NowSeconds();
    ICECACHE_ASSIGN_OR_RETURN(q_host, HostQueries(q));
    // Charged to selection: the queries cross to the host only for it (and for recall).
    const double spent = NowSeconds() - t0;
    for (SequenceState* st : states_) {
      if (st->sparse() && layer >= st->kv.dense_layers) st->acct.select_s += spent;
    }
  }
  device_selected_.clear();
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
        const float* qh = q_host + t * qrow;
        for (int h = 0; h < heads; ++h) {
          recall_.AddPages(st.seq, layer, h, qh, group, scale, selected_[h], &acct.recall);
        }
        acct.recall_s += NowSeconds() - r0;
      }
      const double t0 = NowSeconds();
      ICECACHE_RETURN_IF_ERROR(AttendOne(q, out, t, selected_, st.seq.pool().view()));
      if (gpu) backend_->Synchronize();
      acct.attend_s += NowSeconds() - t0;
      continue;
    }
    if (st.device_select) {
      device_selected_.push_back(i);  // after the host's work, below
      continue;
    }
    // select
    const float* qh = q_host + t * qrow;
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
    // On a GPU the split waits for each phase, so that it counts device time (the host waits
    // for the queries of every layer anyway).
    if (gpu) backend_->Synchronize();
    const double t2 = NowSeconds();
    // attend
    ICECACHE_RETURN_IF_ERROR(AttendOne(q, out, t, mapped_, st.working_set->view()));
    if (gpu) backend_->Synchronize();
    const double t3 = NowSeconds();
    acct.select_s += t1 - t0;
    acct.fetch_s += t2 - t1f;
    acct.attend_s += t3 - t2;
    acct.nodes += sel.nodes_visited;
    ++acct.sparse_layer_steps;
  }
  // Sequences that select in backend memory queue only backend ops: batched ops over all of
  // them, or one lane each, so that a GPU runs their small selection, map and attention kernels
  // side by side (unless their phases are timed, which waits after each).
  if (batch_ops_ && device_selected_.size() > 1 && !(phase_timing_ && gpu)) {
    AttendDeviceSelectedBatch(layer, q, out);
    return Status::Ok();
  }
  const bool lanes = device_selected_.size() > 1 && !(phase_timing_ && gpu);
  if (lanes) backend_->BeginLanes();
  in_lanes_ = lanes;
  for (size_t k = 0; k < device_selected_.size(); ++k) {
    const size_t i = device_selected_[k];
    if (lanes) backend_->Lane(static_cast<int>(k));
    AttendDeviceSelected(layer, q, out, static_cast<int64_t>(i), *states_[i]);
  }
  in_lanes_ = false;
  if (lanes) backend_->EndLanes();
  return Status::Ok();
}

}  // namespace icecache
