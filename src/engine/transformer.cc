#include "engine/transformer.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "model/arch/arch.h"

namespace icecache {

namespace {

// Prepares one weight (empty stays empty).
Status Prepare(Backend& b, const Tensor& host, Tensor* out) {
  if (host.empty()) {
    *out = Tensor();
    return Status::Ok();
  }
  ICECACHE_ASSIGN_OR_RETURN(*out, b.PrepareWeight(host));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Transformer>> Transformer::Create(const ModelConfig& config,
                                                         const ModelWeights& weights,
                                                         Backend* backend, int max_tokens) {
  if (max_tokens <= 0) return InvalidArgument("max tokens per forward must be positive");
  std::unique_ptr<Transformer> t(new Transformer());
  t->config_ = config;
  t->backend_ = backend;
  t->max_tokens_ = max_tokens;
  ICECACHE_RETURN_IF_ERROR(t->PrepareWeights(weights));
  ICECACHE_RETURN_IF_ERROR(t->AllocateWorkspace());
  return t;
}

Status Transformer::PrepareWeights(const ModelWeights& host) {
  Backend& b = *backend_;
  ICECACHE_RETURN_IF_ERROR(Prepare(b, host.tok_embd, &w_.tok_embd));
  ICECACHE_RETURN_IF_ERROR(Prepare(b, host.output_norm, &w_.output_norm));
  if (host.output.data() == host.tok_embd.data()) {
    w_.output = w_.tok_embd;
  } else {
    ICECACHE_RETURN_IF_ERROR(Prepare(b, host.output, &w_.output));
  }
  w_.layers.resize(host.layers.size());
  for (size_t i = 0; i < host.layers.size(); ++i) {
    const LayerWeights& h = host.layers[i];
    LayerWeights& d = w_.layers[i];
    for (auto [src, dst] : {std::pair{&h.attn_norm, &d.attn_norm},
                            {&h.wq, &d.wq},
                            {&h.wk, &d.wk},
                            {&h.wv, &d.wv},
                            {&h.wo, &d.wo},
                            {&h.bq, &d.bq},
                            {&h.bk, &d.bk},
                            {&h.bv, &d.bv},
                            {&h.q_norm, &d.q_norm},
                            {&h.k_norm, &d.k_norm},
                            {&h.ffn_norm, &d.ffn_norm},
                            {&h.w_gate, &d.w_gate},
                            {&h.w_up, &d.w_up},
                            {&h.w_down, &d.w_down}}) {
      ICECACHE_RETURN_IF_ERROR(Prepare(b, *src, dst));
    }
  }
  return Status::Ok();
}

Status Transformer::AllocateWorkspace() {
  Backend& b = *backend_;
  const ModelConfig& c = config_;
  const int64_t n = max_tokens_;
  const DType act = b.device() == Device::kCpu ? DType::kF32 : DType::kBF16;
  ICECACHE_ASSIGN_OR_RETURN(x_, b.Allocate(act, {n, c.hidden}));
  ICECACHE_ASSIGN_OR_RETURN(xn_, b.Allocate(act, {n, c.hidden}));
  ICECACHE_ASSIGN_OR_RETURN(q_, b.Allocate(act, {n, c.n_heads, c.head_dim}));
  ICECACHE_ASSIGN_OR_RETURN(k_, b.Allocate(act, {n, c.n_kv_heads, c.head_dim}));
  ICECACHE_ASSIGN_OR_RETURN(v_, b.Allocate(act, {n, c.n_kv_heads, c.head_dim}));
  ICECACHE_ASSIGN_OR_RETURN(attn_, b.Allocate(act, {n, c.n_heads, c.head_dim}));
  ICECACHE_ASSIGN_OR_RETURN(gate_, b.Allocate(act, {n, c.ffn}));
  ICECACHE_ASSIGN_OR_RETURN(up_, b.Allocate(act, {n, c.ffn}));
  ICECACHE_ASSIGN_OR_RETURN(logits_in_, b.Allocate(act, {n, c.hidden}));
  ICECACHE_ASSIGN_OR_RETURN(logits_, b.Allocate(DType::kF32, {n, c.vocab}));

  std::vector<float> inv_freq(c.head_dim / 2);
  ComputeRopeInvFreq(c, inv_freq.data());
  ICECACHE_ASSIGN_OR_RETURN(inv_freq_, b.Allocate(DType::kF32, {c.head_dim / 2}));
  Tensor inv_host(inv_freq.data(), DType::kF32, {c.head_dim / 2});
  ICECACHE_RETURN_IF_ERROR(b.Copy(inv_host, inv_freq_));

  ICECACHE_ASSIGN_OR_RETURN(ids_host_, Tensor::Host(DType::kI32, {n}));
  ICECACHE_ASSIGN_OR_RETURN(pos_host_, Tensor::Host(DType::kI32, {n}));
  ICECACHE_ASSIGN_OR_RETURN(row_base_host_, Tensor::Host(DType::kI32, {n}));
  ICECACHE_ASSIGN_OR_RETURN(slots_host_, Tensor::Host(DType::kI32, {n, c.n_kv_heads}));
  ICECACHE_ASSIGN_OR_RETURN(rows_host_, Tensor::Host(DType::kI32, {n}));
  if (b.device() == Device::kCpu) {
    ids_ = ids_host_;
    pos_ = pos_host_;
    row_base_ = row_base_host_;
    slots_ = slots_host_;
    rows_ = rows_host_;
    logits_host_ = logits_;
  } else {
    ICECACHE_ASSIGN_OR_RETURN(ids_, b.Allocate(DType::kI32, {n}));
    ICECACHE_ASSIGN_OR_RETURN(pos_, b.Allocate(DType::kI32, {n}));
    ICECACHE_ASSIGN_OR_RETURN(row_base_, b.Allocate(DType::kI32, {n}));
    ICECACHE_ASSIGN_OR_RETURN(slots_, b.Allocate(DType::kI32, {n, c.n_kv_heads}));
    ICECACHE_ASSIGN_OR_RETURN(rows_, b.Allocate(DType::kI32, {n}));
    ICECACHE_ASSIGN_OR_RETURN(logits_host_, Tensor::Host(DType::kF32, {n, c.vocab}));
  }
  return Status::Ok();
}

void Transformer::BuildPageTable(int layer, std::span<KvSequence* const> seqs) {
  const int heads = config_.n_kv_heads;
  indptr_.clear();
  indices_.clear();
  lens_.clear();
  indptr_.push_back(0);
  for (KvSequence* s : seqs) {
    for (int h = 0; h < heads; ++h) {
      for (const PageRef& p : s->pages(layer, h)) {
        indices_.push_back(p.id);
        lens_.push_back(p.len);
      }
      indptr_.push_back(static_cast<int32_t>(indices_.size()));
    }
  }
}

Result<Tensor> Transformer::Forward(const ForwardInput& in) {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  if (in.seqs.size() != in.counts.size()) return InvalidArgument("one count per sequence needed");
  if (n == 0) return InvalidArgument("empty batch");
  if (n > max_tokens_) {
    return InvalidArgument("batch of " + std::to_string(n) + " tokens exceeds the limit of " +
                           std::to_string(max_tokens_));
  }
  int64_t total = 0;
  for (int32_t k : in.counts) total += k;
  if (total != n) return InvalidArgument("token counts do not sum to the batch size");
  for (size_t i = 0; i < in.rows.size(); ++i) {
    if (in.rows[i] < 0 || in.rows[i] >= n || (i > 0 && in.rows[i] <= in.rows[i - 1])) {
      return InvalidArgument("logit rows must be ascending indices into the batch");
    }
  }
  for (int32_t id : in.tokens) {
    if (id < 0 || id >= c.vocab) {
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                             std::to_string(c.vocab) + ")");
    }
  }

  // Grow every sequence's KV; undo on failure so the call changes nothing.
  std::vector<int64_t> start(in.seqs.size());
  for (size_t s = 0; s < in.seqs.size(); ++s) {
    start[s] = in.seqs[s]->length();
    Status st = in.seqs[s]->Grow(in.counts[s]);
    if (!st.ok()) {
      for (size_t r = 0; r < s; ++r) in.seqs[r]->Truncate(start[r]);
      return st;
    }
  }

  auto result = Run(in, start);
  if (!result.ok()) {
    for (size_t s = 0; s < in.seqs.size(); ++s) in.seqs[s]->Truncate(start[s]);
  }
  return result;
}

Result<Tensor> Transformer::Run(const ForwardInput& in, const std::vector<int64_t>& start) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  // Inputs: ids, positions, page-table row bases, logit rows.
  auto* ids = ids_host_.data_as<int32_t>();
  auto* pos = pos_host_.data_as<int32_t>();
  auto* row_base = row_base_host_.data_as<int32_t>();
  auto* rows = rows_host_.data_as<int32_t>();
  int64_t n_rows = 0;
  if (in.logits == LogitsMode::kRows) {
    for (int32_t r : in.rows) rows[n_rows++] = r;
  }
  {
    int64_t t = 0;
    for (size_t s = 0; s < in.seqs.size(); ++s) {
      for (int32_t i = 0; i < in.counts[s]; ++i, ++t) {
        ids[t] = in.tokens[t];
        pos[t] = static_cast<int32_t>(start[s] + i);
        row_base[t] = static_cast<int32_t>(s) * c.n_kv_heads;
        if (in.logits == LogitsMode::kAll ||
            (in.logits == LogitsMode::kLast && i == in.counts[s] - 1)) {
          rows[n_rows++] = static_cast<int32_t>(t);
        }
      }
    }
  }
  const bool upload = b.device() != Device::kCpu;
  if (upload) {
    ICECACHE_RETURN_IF_ERROR(b.Copy(ids_host_.Slice(0, n), ids_.Slice(0, n)));
    ICECACHE_RETURN_IF_ERROR(b.Copy(pos_host_.Slice(0, n), pos_.Slice(0, n)));
    ICECACHE_RETURN_IF_ERROR(b.Copy(row_base_host_.Slice(0, n), row_base_.Slice(0, n)));
    if (n_rows > 0)
      ICECACHE_RETURN_IF_ERROR(b.Copy(rows_host_.Slice(0, n_rows), rows_.Slice(0, n_rows)));
  }

  const Tensor x = x_.Slice(0, n), xn = xn_.Slice(0, n), q = q_.Slice(0, n), k = k_.Slice(0, n),
               v = v_.Slice(0, n), attn = attn_.Slice(0, n), gate = gate_.Slice(0, n),
               up = up_.Slice(0, n);
  const Tensor ids_t = ids_.Slice(0, n), pos_t = pos_.Slice(0, n);
  const Tensor slots_t = slots_.Slice(0, n);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  b.Embed(w_.tok_embd, ids_t, x);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w_.layers[l];
    b.RmsNorm(x, lw.attn_norm, c.norm_eps, xn);
    b.MatMul(xn, lw.wq, lw.bq.empty() ? nullptr : &lw.bq, q.Reshape({n, c.q_dim()}));
    b.MatMul(xn, lw.wk, lw.bk.empty() ? nullptr : &lw.bk, k.Reshape({n, c.kv_dim()}));
    b.MatMul(xn, lw.wv, lw.bv.empty() ? nullptr : &lw.bv, v.Reshape({n, c.kv_dim()}));
    if (!lw.q_norm.empty()) {
      const Tensor qh = q.Reshape({n * c.n_heads, c.head_dim});
      const Tensor kh = k.Reshape({n * c.n_kv_heads, c.head_dim});
      b.RmsNorm(qh, lw.q_norm, c.norm_eps, qh);
      b.RmsNorm(kh, lw.k_norm, c.norm_eps, kh);
    }
    b.Rope(pos_t, inv_freq_, q);
    b.Rope(pos_t, inv_freq_, k);

    // Append K/V to the pages of this layer.
    {
      int64_t t = 0;
      auto* slots = slots_host_.data_as<int32_t>();
      for (size_t s = 0; s < in.seqs.size(); ++s) {
        in.seqs[s]->Slots(l, start[s], in.counts[s], slots + t * c.n_kv_heads);
        t += in.counts[s];
      }
      if (upload) ICECACHE_RETURN_IF_ERROR(b.Copy(slots_host_.Slice(0, n), slots_t));
    }
    const KvPoolView pool = in.seqs[0]->pool().view();
    b.WriteKv(KvWriteArgs{k, v, slots_t, pos_t, pool});

    // Attention over every page of the layer (dense: the full page list).
    BuildPageTable(l, in.seqs);
    AttentionArgs aa;
    aa.q = q;
    aa.out = attn;
    aa.positions = pos_t;
    aa.row_base = row_base_.Slice(0, n);
    aa.pool = pool;
    aa.n_heads = c.n_heads;
    aa.n_kv_heads = c.n_kv_heads;
    aa.scale = scale;
    aa.causal = true;
    ICECACHE_RETURN_IF_ERROR(SetPageTable(&aa.table));
    b.Attention(aa);

    b.MatMul(attn.Reshape({n, c.q_dim()}), lw.wo, nullptr, xn);
    b.Add(xn, x);
    b.RmsNorm(x, lw.ffn_norm, c.norm_eps, xn);
    b.MatMul(xn, lw.w_gate, nullptr, gate);
    b.MatMul(xn, lw.w_up, nullptr, up);
    b.SwiGlu(gate, up, gate);
    b.MatMul(gate, lw.w_down, nullptr, xn);
    b.Add(xn, x);
  }

  if (n_rows == 0) return Tensor();
  const Tensor sel = logits_in_.Slice(0, n_rows);
  b.Embed(x, rows_.Slice(0, n_rows), sel);
  b.RmsNorm(sel, w_.output_norm, c.norm_eps, sel);
  const Tensor logits = logits_.Slice(0, n_rows);
  b.MatMul(sel, w_.output, nullptr, logits);
  if (upload) {
    const Tensor host = logits_host_.Slice(0, n_rows);
    ICECACHE_RETURN_IF_ERROR(b.Copy(logits, host));
    b.Synchronize();
    return host;
  }
  return logits;
}

Status Transformer::SetPageTable(PageTableView* table) {
  table->num_rows = static_cast<int32_t>(indptr_.size()) - 1;
  if (backend_->device() == Device::kCpu) {
    table->indptr = indptr_.data();
    table->indices = indices_.data();
    table->lens = lens_.data();
    return Status::Ok();
  }
  // One device buffer holds [indptr | indices | lens]; grown (rarely) between steps.
  const int64_t need = static_cast<int64_t>(indptr_.size() + 2 * indices_.size());
  if (table_dev_.empty() || table_dev_.numel() < need) {
    ICECACHE_ASSIGN_OR_RETURN(table_dev_, backend_->Allocate(DType::kI32, {need * 2}));
  }
  std::vector<int32_t> packed;
  packed.reserve(need);
  packed.insert(packed.end(), indptr_.begin(), indptr_.end());
  packed.insert(packed.end(), indices_.begin(), indices_.end());
  packed.insert(packed.end(), lens_.begin(), lens_.end());
  Tensor host(packed.data(), DType::kI32, {need});
  ICECACHE_RETURN_IF_ERROR(backend_->Copy(host, table_dev_.Slice(0, need)));
  auto* base = table_dev_.data_as<int32_t>();
  table->indptr = base;
  table->indices = base + indptr_.size();
  table->lens = base + indptr_.size() + indices_.size();
  return Status::Ok();
}

}  // namespace icecache
