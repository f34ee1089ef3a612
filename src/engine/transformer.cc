#include "engine/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/check.h"
#include "core/env_switch.h"
#include "core/process.h"
#include "model/arch/arch.h"
#include "model/weight_convert.h"

namespace icecache {

namespace {

// The fence after a step's queued input copies (Backend::RecordFence).
constexpr int kInputsFence = 0;

// Prepares one weight (empty stays empty).
Status Prepare(Backend& b, const Tensor& host, Tensor* out) {
  if (host.empty()) {
    *out = Tensor();
    return Status::Ok();
  }
  ICECACHE_ASSIGN_OR_RETURN(*out, b.PrepareWeight(host));
  return Status::Ok();
}

// Prepares matrices that read one input: as one stacked matrix (*stacked) whose row blocks
// become `outs` where the backend stacks them (and `stack` allows it), else one by one.
Status PrepareRows(Backend& b, std::span<const Tensor* const> parts, std::span<Tensor* const> outs,
                   bool stack, Tensor* stacked) {
  if (stack) {
    ICECACHE_ASSIGN_OR_RETURN(*stacked, b.PrepareStacked(parts));
  }
  int64_t row = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (stacked->empty()) {
      ICECACHE_RETURN_IF_ERROR(Prepare(b, *parts[i], outs[i]));
      continue;
    }
    *outs[i] = stacked->Slice(row, row + parts[i]->dim(0));
    row += parts[i]->dim(0);
  }
  return Status::Ok();
}

// One query row per KV group from `host` (a matrix of n_kv * group * head_dim rows, or a vector
// of as many values), in f32: the group's first head (`mean` false), or the mean of its heads,
// which gives the group's mean query (the rotation is linear, so it commutes with the mean).
Result<Tensor> GroupRows(Backend& b, const Tensor& weight, int n_kv, int group, int head_dim,
                         bool mean) {
  if (weight.empty()) return Tensor();
  // A synthetic model's weights are made in the backend's memory: read them on the host.
  Tensor host = weight;
  if (weight.device() != Device::kCpu) {
    std::vector<int64_t> shape(weight.ndim());
    for (int i = 0; i < weight.ndim(); ++i) shape[i] = weight.dim(i);
    ICECACHE_ASSIGN_OR_RETURN(host, Tensor::Host(weight.dtype(), shape));
    ICECACHE_RETURN_IF_ERROR(b.Copy(weight, host));
    b.Synchronize();
  }
  ICECACHE_ASSIGN_OR_RETURN(Tensor f, ToF32(host));
  const int64_t cols = f.ndim() == 1 ? 1 : f.dim(1);
  const int64_t rows = int64_t{n_kv} * head_dim;
  ICECACHE_ASSIGN_OR_RETURN(Tensor out, Tensor::Host(DType::kF32, {rows, cols}));
  const float* src = f.data_as<const float>();
  float* dst = out.data_as<float>();
  const int heads = mean ? group : 1;
  for (int g = 0; g < n_kv; ++g) {
    for (int64_t r = 0; r < head_dim; ++r) {
      float* o = dst + (int64_t{g} * head_dim + r) * cols;
      std::fill(o, o + cols, 0.0f);
      for (int j = 0; j < heads; ++j) {
        const float* in = src + ((int64_t{g} * group + j) * head_dim + r) * cols;
        for (int64_t c = 0; c < cols; ++c) o[c] += in[c] / static_cast<float>(heads);
      }
    }
  }
  return f.ndim() == 1 ? out.Reshape({rows}) : out;
}

}  // namespace

Result<std::unique_ptr<Transformer>> Transformer::Create(const ModelConfig& config,
                                                         const ModelWeights& weights,
                                                         Backend* backend, int max_tokens,
                                                         int max_seqs, int64_t pool_capacity) {
  if (max_tokens <= 0 || max_seqs <= 0) {
    return InvalidArgument("max tokens and sequences per forward must be positive");
  }
  std::unique_ptr<Transformer> t(new Transformer());
  t->config_ = config;
  t->backend_ = backend;
  t->max_tokens_ = max_tokens;
  t->max_seqs_ = max_seqs;
  t->halves_ = EnvSwitch("ICECACHE_BATCH_HALVES", false);
  t->prefetch_early_ = EnvSwitch("ICECACHE_PREFETCH_EARLY", false);
  t->prefetch_stop_ = std::clamp(EnvInt("ICECACHE_PREFETCH_CHAIN_STOP", 0), 0, 2);
  t->prefetch_heads_ = config.n_heads > config.n_kv_heads
                           ? std::clamp(EnvInt("ICECACHE_PREFETCH_HEADS", 0), 0, 2)
                           : 0;
  ICECACHE_RETURN_IF_ERROR(t->PrepareWeights(weights));
  ICECACHE_RETURN_IF_ERROR(t->AllocateWorkspace(max_seqs, pool_capacity));
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
    // Projections that read the same input go through one stacked matrix where the backend
    // stacks them (biased projections stay apart).
    const Tensor* qkv[] = {&h.wq, &h.wk, &h.wv};
    Tensor* qkv_out[] = {&d.wq, &d.wk, &d.wv};
    const bool unbiased = h.bq.empty() && h.bk.empty() && h.bv.empty();
    ICECACHE_RETURN_IF_ERROR(PrepareRows(b, qkv, qkv_out, unbiased, &d.wqkv));
    const Tensor* gate_up[] = {&h.w_gate, &h.w_up};
    Tensor* gate_up_out[] = {&d.w_gate, &d.w_up};
    ICECACHE_RETURN_IF_ERROR(PrepareRows(b, gate_up, gate_up_out, true, &d.w_gate_up));
    for (auto [src, dst] : {std::pair{&h.attn_norm, &d.attn_norm},
                            {&h.wo, &d.wo},
                            {&h.bq, &d.bq},
                            {&h.bk, &d.bk},
                            {&h.bv, &d.bv},
                            {&h.q_norm, &d.q_norm},
                            {&h.k_norm, &d.k_norm},
                            {&h.ffn_norm, &d.ffn_norm},
                            {&h.w_down, &d.w_down}}) {
      ICECACHE_RETURN_IF_ERROR(Prepare(b, *src, dst));
    }
  }
  if (prefetch_heads_ != 0) {
    const ModelConfig& c = config_;
    const bool mean = prefetch_heads_ == 2;
    const int group = c.n_heads / c.n_kv_heads;
    wq_est_.resize(host.layers.size());
    bq_est_.resize(host.layers.size());
    for (size_t i = 0; i < host.layers.size(); ++i) {
      const LayerWeights& h = host.layers[i];
      ICECACHE_ASSIGN_OR_RETURN(Tensor wq,
                                GroupRows(b, h.wq, c.n_kv_heads, group, c.head_dim, mean));
      ICECACHE_ASSIGN_OR_RETURN(Tensor bq,
                                GroupRows(b, h.bq, c.n_kv_heads, group, c.head_dim, mean));
      ICECACHE_RETURN_IF_ERROR(Prepare(b, wq, &wq_est_[i]));
      ICECACHE_RETURN_IF_ERROR(Prepare(b, bq, &bq_est_[i]));
    }
  }
  return Status::Ok();
}

Status Transformer::AllocateWorkspace(int max_seqs, int64_t pool_capacity) {
  Backend& b = *backend_;
  const ModelConfig& c = config_;
  const int64_t n = max_tokens_;
  const DType act = b.activation_dtype();
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
  ICECACHE_ASSIGN_OR_RETURN(qe_xn_, b.Allocate(act, {max_seqs, c.hidden}));
  ICECACHE_ASSIGN_OR_RETURN(qe_, b.Allocate(act, {max_seqs, c.n_heads, c.head_dim}));
  if (prefetch_heads_ != 0) {
    ICECACHE_ASSIGN_OR_RETURN(qe_one_, b.Allocate(act, {max_seqs, c.n_kv_heads, c.head_dim}));
  }
  if (prefetch_early_) {
    ICECACHE_ASSIGN_OR_RETURN(qe_attn_,
                              b.Allocate(act, {int64_t{c.n_layers} * max_seqs, c.hidden}));
  }

  std::vector<float> inv_freq(c.head_dim / 2);
  ComputeRopeInvFreq(c, inv_freq.data());
  ICECACHE_ASSIGN_OR_RETURN(inv_freq_, b.Allocate(DType::kF32, {c.head_dim / 2}));
  Tensor inv_host(inv_freq.data(), DType::kF32, {c.head_dim / 2});
  ICECACHE_RETURN_IF_ERROR(b.Copy(inv_host, inv_freq_));

  const int64_t inputs = 4 * n + static_cast<int64_t>(c.n_layers) * n * c.n_kv_heads;
  ICECACHE_ASSIGN_OR_RETURN(inputs_host_, b.AllocateStaging(DType::kI32, {inputs}));
  if (b.device() == Device::kCpu) {
    inputs_ = inputs_host_;
    logits_host_ = logits_;
  } else {
    ICECACHE_ASSIGN_OR_RETURN(inputs_, b.Allocate(DType::kI32, {inputs}));
    ICECACHE_ASSIGN_OR_RETURN(logits_host_, b.AllocateStaging(DType::kF32, {n, c.vocab}));
  }
  // A layer lists at most the pool's pages of that layer (every page belongs to one layer).
  const int64_t rows = static_cast<int64_t>(max_seqs) * c.n_kv_heads;
  const int64_t entries = pool_capacity / c.n_layers + rows;
  ICECACHE_ASSIGN_OR_RETURN(dense_, DenseAttention::Create(&b, c, rows, entries));
  return Status::Ok();
}

Status Transformer::CheckInput(const ForwardInput& in) const {
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  if (in.seqs.size() != in.counts.size()) return InvalidArgument("one count per sequence needed");
  if (n == 0) return InvalidArgument("empty batch");
  if (n > max_tokens_) {
    return InvalidArgument("batch of " + std::to_string(n) + " tokens exceeds the limit of " +
                           std::to_string(max_tokens_));
  }
  if (static_cast<int>(in.seqs.size()) > max_seqs_) {
    return InvalidArgument("batch of " + std::to_string(in.seqs.size()) +
                           " sequences exceeds the limit of " + std::to_string(max_seqs_));
  }
  int64_t total = 0;
  for (int32_t k : in.counts) {
    if (k <= 0) return InvalidArgument("every sequence in a batch needs at least one token");
    total += k;
  }
  if (total != n) return InvalidArgument("token counts do not sum to the batch size");
  for (size_t i = 0; i < in.rows.size(); ++i) {
    if (in.rows[i] < 0 || in.rows[i] >= n || (i > 0 && in.rows[i] <= in.rows[i - 1])) {
      return InvalidArgument("logit rows must be ascending indices into the batch");
    }
  }
  // Ids on the device were written by its sampler: in range by construction.
  for (int32_t id : in.ids_on_device ? std::span<const int32_t>() : in.tokens) {
    if (id < 0 || id >= config_.vocab) {
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                             std::to_string(config_.vocab) + ")");
    }
  }
  for (KvSequence* s : in.seqs) {
    if (&s->pool() != &in.seqs.front()->pool()) {
      return InvalidArgument("all sequences of a batch must share one KV pool");
    }
  }
  return Status::Ok();
}

Result<Tensor> Transformer::Forward(const ForwardInput& in) {
  ICECACHE_RETURN_IF_ERROR(CheckInput(in));
  phases_ = PhaseTimes();
  double mark = NowSeconds();
  auto lap = [&mark](double* phase) {
    const double now = NowSeconds();
    *phase = now - mark;
    mark = now;
  };
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
  lap(&phases_.grow);
  bool beside_started = false;
  auto undo = [&](Status st) -> Result<Tensor> {
    if (beside_started) in.beside->Join();
    for (size_t s = 0; s < in.seqs.size(); ++s) in.seqs[s]->Truncate(start[s]);
    return st;
  };
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  // The step's host buffers (inputs, dense page table) reach the device by queued copies: wait
  // for the last step's copies before refilling them, and mark this step's once queued.
  backend_->WaitFence(kInputsFence);
  auto n_rows = StageInputs(in, start);
  lap(&phases_.stage);
  LayerAttention& attention = in.attention != nullptr ? *in.attention : *dense_;
  StepContext step{in.seqs, in.counts, start, n, Tensor(), Tensor()};
  // Views into the fixed [4][max_tokens] layout (see StageInputs).
  step.positions =
      Tensor(inputs_.data_as<int32_t>() + max_tokens_, DType::kI32, {n}, backend_->device());
  step.row_base =
      Tensor(inputs_.data_as<int32_t>() + 2 * max_tokens_, DType::kI32, {n}, backend_->device());
  const Status prepared = n_rows.ok() ? attention.Prepare(step) : n_rows.status();
  backend_->RecordFence(kInputsFence);
  lap(&phases_.prepare);
  if (!prepared.ok()) return undo(prepared);
  if (in.beside != nullptr) {
    in.beside->Start();
    beside_started = true;
  }
  // Dense decode steps (one token per sequence) run as a CUDA graph where the backend has
  // graphs: every buffer they touch sits at a fixed address for a given batch shape.
  auto layers = [&] { return RunLayers(in, n, *n_rows, attention); };
  const bool decode = in.attention == nullptr && n == static_cast<int64_t>(in.seqs.size());
  const uint64_t graph_key = (static_cast<uint64_t>(n) << 40) ^
                             (static_cast<uint64_t>(*n_rows) << 20) ^
                             reinterpret_cast<uintptr_t>(in.seqs.front()->pool().view().k);
  if (Status st = decode ? backend_->RunGraph(graph_key, layers) : layers(); !st.ok()) {
    return undo(st);
  }
  lap(&phases_.layers);
  if (*n_rows == 0) return Tensor();
  const Tensor logits = logits_.Slice(0, *n_rows);
  if (backend_->device() != Device::kCpu && !in.logits_in_backend) {
    const Tensor host = logits_host_.Slice(0, *n_rows);
    if (Status st = backend_->Copy(logits, host); !st.ok()) return undo(st);
    backend_->Synchronize();
    lap(&phases_.logits);
    return host;
  }
  return logits;
}

Tensor Transformer::StepIds(int64_t n) const {
  return Tensor(inputs_.data_as<int32_t>(), DType::kI32, {n}, backend_->device());
}

Result<int64_t> Transformer::StageInputs(const ForwardInput& in, std::span<const int64_t> start) {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  const int64_t m = max_tokens_;
  int32_t* base = inputs_host_.data_as<int32_t>();
  int32_t* ids = base;
  int32_t* pos = base + m;
  int32_t* row_base = base + 2 * m;
  int32_t* rows = base + 3 * m;
  int32_t* slots = base + 4 * m;  // [layer][max_tokens][n_kv_heads]
  int64_t n_rows = 0;
  if (in.logits == LogitsMode::kRows) {
    for (int32_t r : in.rows) rows[n_rows++] = r;
  }
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
  const int64_t layer_stride = m * c.n_kv_heads;
  for (int l = 0; l < c.n_layers; ++l) {
    int64_t first = 0;
    for (size_t s = 0; s < in.seqs.size(); ++s) {
      in.seqs[s]->Slots(l, start[s], in.counts[s], slots + l * layer_stride + first * c.n_kv_heads);
      first += in.counts[s];
    }
  }
  if (backend_->device() != Device::kCpu) {
    const char* src = static_cast<const char*>(inputs_host_.data());
    char* dst = static_cast<char*>(inputs_.data());
    // Ids the device sampler wrote stay; the other blocks (and the slots) are copied.
    const int first = in.ids_on_device ? 1 : 0;
    ICECACHE_RETURN_IF_ERROR(backend_->CopyBlocksQueued(src + first * m * 4, dst + first * m * 4,
                                                        4 - first, n * 4, m * 4, m * 4));
    ICECACHE_RETURN_IF_ERROR(backend_->CopyBlocksQueued(src + 4 * m * 4, dst + 4 * m * 4,
                                                        c.n_layers, n * c.n_kv_heads * 4,
                                                        layer_stride * 4, layer_stride * 4));
  }
  return n_rows;
}

Status Transformer::QueuePrefetch(int layer, int64_t n, const Tensor& pos_t,
                                  LayerAttention& attention, bool defer_copy) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const LayerWeights& lw = w_.layers[layer];
  const bool one_head = !wq_est_.empty();
  const Tensor xn = qe_xn_.Slice(0, n), q = (one_head ? qe_one_ : qe_).Slice(0, n);
  const Tensor& wq = one_head ? wq_est_[layer] : lw.wq;
  const Tensor& bq = one_head ? bq_est_[layer] : lw.bq;
  const int heads = one_head ? c.n_kv_heads : c.n_heads;
  // The residual stream after the previous layer's attention, normalized as `layer` will
  // normalize its input. With ICECACHE_PREFETCH_EARLY, the stream before that attention plus
  // its output of the last step (much closer to this step's than nothing): the kept rows take
  // the sum (LayerOut overwrites them later in this step). Read on the main stream: the
  // previous layer updates x in place.
  if (const Tensor kept = KeptAttnOut(layer - 1, n); !kept.empty()) {
    b.AddRmsNorm(x_.Slice(0, n), kept, lw.attn_norm, c.norm_eps, xn);
  } else {
    b.RmsNorm(x_.Slice(0, n), lw.attn_norm, c.norm_eps, xn);
  }
  b.BeginSideWork();
  if (prefetch_stop_ == 1) {
    b.EndSideWork();
    return Status::Ok();
  }
  b.MatMul(xn, wq, bq.empty() ? nullptr : &bq, q.Reshape({n, int64_t{heads} * c.head_dim}));
  if (!lw.q_norm.empty()) {
    const Tensor qh = q.Reshape({n * heads, c.head_dim});
    b.RmsNorm(qh, lw.q_norm, c.norm_eps, qh);
  }
  b.Rope(pos_t, inv_freq_, q);
  Status st = prefetch_stop_ == 0 ? attention.Prefetch(layer, q, defer_copy) : Status::Ok();
  b.EndSideWork();
  return st;
}

Tensor Transformer::KeptAttnOut(int l, int64_t n) const {
  if (qe_attn_.empty() || l < 0 || n > max_seqs_) return Tensor();
  const int64_t first = static_cast<int64_t>(l) * max_seqs_;
  return qe_attn_.Slice(first, first + n);
}

Transformer::Rows Transformer::RowsOf(TokenRange r) const {
  const int64_t b = r.begin, e = r.end;
  return Rows{x_.Slice(b, e), xn_.Slice(b, e),   q_.Slice(b, e),    k_.Slice(b, e),
              v_.Slice(b, e), attn_.Slice(b, e), gate_.Slice(b, e), up_.Slice(b, e)};
}

void Transformer::LayerIn(int l, TokenRange r, const Rows& t, const Tensor& pos_t,
                          const KvPoolView& pool) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const LayerWeights& lw = w_.layers[l];
  const int64_t n = r.end - r.begin;
  if (l == 0) {
    b.RmsNorm(t.x, lw.attn_norm, c.norm_eps, t.xn);
  } else {
    b.AddRmsNorm(t.xn, t.x, lw.attn_norm, c.norm_eps, t.xn);  // the previous layer's MLP residual
  }
  if (!lw.wqkv.empty()) {
    const Tensor qkv[] = {t.q.Reshape({n, c.q_dim()}), t.k.Reshape({n, c.kv_dim()}),
                          t.v.Reshape({n, c.kv_dim()})};
    b.MatMulSplit(t.xn, lw.wqkv, qkv);
  } else {
    b.MatMul(t.xn, lw.wq, lw.bq.empty() ? nullptr : &lw.bq, t.q.Reshape({n, c.q_dim()}));
    b.MatMul(t.xn, lw.wk, lw.bk.empty() ? nullptr : &lw.bk, t.k.Reshape({n, c.kv_dim()}));
    b.MatMul(t.xn, lw.wv, lw.bv.empty() ? nullptr : &lw.bv, t.v.Reshape({n, c.kv_dim()}));
  }
  if (!lw.q_norm.empty()) {
    const Tensor qh = t.q.Reshape({n * c.n_heads, c.head_dim});
    const Tensor kh = t.k.Reshape({n * c.n_kv_heads, c.head_dim});
    b.RmsNorm(qh, lw.q_norm, c.norm_eps, qh);
    b.RmsNorm(kh, lw.k_norm, c.norm_eps, kh);
  }
  const int64_t m = max_tokens_;
  int32_t* slots_at =
      inputs_.data_as<int32_t>() + 4 * m + (static_cast<int64_t>(l) * m + r.begin) * c.n_kv_heads;
  const Tensor slots(slots_at, DType::kI32, {n, c.n_kv_heads}, b.device());
  b.RopeWriteKv(inv_freq_, t.q, KvWriteArgs{t.k, t.v, slots, pos_t.Slice(r.begin, r.end), pool});
}

void Transformer::LayerOut(int l, const Rows& t, const Tensor& attn_out) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const LayerWeights& lw = w_.layers[l];
  const int64_t n = t.attn.dim(0);
  const Tensor& out = attn_out.empty() ? t.xn : attn_out;
  b.MatMul(t.attn.Reshape({n, c.q_dim()}), lw.wo, nullptr, out);
  b.AddRmsNorm(out, t.x, lw.ffn_norm, c.norm_eps, t.xn);
}

void Transformer::LayerMlp(int l, const Rows& t) {
  Backend& b = *backend_;
  const LayerWeights& lw = w_.layers[l];
  if (!lw.w_gate_up.empty()) {
    b.MatMulGlu(t.xn, lw.w_gate_up, t.up, t.gate);
  } else {
    b.MatMul(t.xn, lw.w_gate, nullptr, t.gate);
    b.MatMul(t.xn, lw.w_up, nullptr, t.up);
    b.SwiGlu(t.gate, t.up, t.gate);
  }
  b.MatMul(t.gate, lw.w_down, nullptr, t.xn);
}

Status Transformer::RunLayers(const ForwardInput& in, int64_t n, int64_t n_rows,
                              LayerAttention& attention) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const int64_t m = max_tokens_;
  const Device dev = b.device();
  int32_t* base = inputs_.data_as<int32_t>();
  const Tensor ids_t(base, DType::kI32, {n}, dev);
  const Tensor pos_t(base + m, DType::kI32, {n}, dev);
  const Tensor rows_t(base + 3 * m, DType::kI32, {n_rows}, dev);
  const Tensor x = x_.Slice(0, n), xn = xn_.Slice(0, n), q = q_.Slice(0, n),
               attn = attn_.Slice(0, n);
  const KvPoolView pool = in.seqs.front()->pool().view();
  // Batch halves: in a decode step whose layer attends in parts, the second half of the
  // sequences runs that layer as side work, queued once the first half's attention is queued,
  // so that one half's page fetch can overlap the other half's matrix products.
  const TokenRange all{0, n};
  const bool halves =
      halves_ && in.attention != nullptr && n >= 2 && n == static_cast<int64_t>(in.seqs.size());
  const TokenRange first{0, n / 2}, second{n / 2, n};
  // The rows' activations, sliced once per pass (not per layer).
  const Rows all_rows = RowsOf(all);
  const Rows first_rows = halves ? RowsOf(first) : Rows{},
             second_rows = halves ? RowsOf(second) : Rows{};

  b.Embed(w_.tok_embd, ids_t, x);
  // Whether a prefetch for the next layer was queued, to be joined before that layer attends.
  // Other side work (the attention's copies behind, --kv-fetch behind) is joined only at the
  // end of the pass, so that it may run beside every layer after its own.
  bool prefetch_queued = false;
  for (int l = 0; l < c.n_layers; ++l) {
    if (halves && attention.AttendsInParts(l)) {
      LayerIn(l, first, first_rows, pos_t, pool);
      ICECACHE_RETURN_IF_ERROR(attention.AttendPart(l, q, attn, first.begin, first.end));
      b.BeginSideWork();
      LayerIn(l, second, second_rows, pos_t, pool);
      const Status st = attention.AttendPart(l, q, attn, second.begin, second.end);
      if (st.ok()) {
        LayerOut(l, second_rows);
        LayerMlp(l, second_rows);
      }
      b.EndSideWork();
      ICECACHE_RETURN_IF_ERROR(st);
      LayerOut(l, first_rows);
      LayerMlp(l, first_rows);
      continue;
    }
    if (halves) b.JoinSideWork();  // the second half's side work of the layer before
    LayerIn(l, all, all_rows, pos_t, pool);
    if (prefetch_queued) b.JoinSideWork();  // the prefetch for this layer, queued last layer
    const bool prefetch =
        !halves && l + 1 < c.n_layers && n <= qe_.dim(0) && attention.WantsPrefetch(l + 1);
    prefetch_queued = prefetch;
    if (prefetch && prefetch_early_) {
      ICECACHE_RETURN_IF_ERROR(QueuePrefetch(l + 1, n, pos_t, attention, /*defer_copy=*/true));
    }
    const Status attended = attention.Attend(l, q, attn);
    if (prefetch && prefetch_early_) {
      // The early prefetch's copies, ordered after this layer's attention and so after its
      // fetch: they share the host link with nothing then. Queued even when the attention
      // failed, since the pages are already placed.
      b.BeginSideWork();
      const Status st = prefetch_stop_ == 0 ? attention.FinishPrefetch(l + 1) : Status::Ok();
      b.EndSideWork();
      ICECACHE_RETURN_IF_ERROR(st);
    }
    ICECACHE_RETURN_IF_ERROR(attended);
    LayerOut(l, all_rows, KeptAttnOut(l, n));
    if (prefetch && !prefetch_early_) {
      ICECACHE_RETURN_IF_ERROR(QueuePrefetch(l + 1, n, pos_t, attention, /*defer_copy=*/false));
    }
    LayerMlp(l, all_rows);
  }
  b.JoinSideWork();
  b.Add(xn, x);
  if (n_rows == 0) return Status::Ok();
  const Tensor sel = logits_in_.Slice(0, n_rows);
  b.Embed(x, rows_t, sel);
  b.RmsNorm(sel, w_.output_norm, c.norm_eps, sel);
  b.MatMul(sel, w_.output, nullptr, logits_.Slice(0, n_rows));
  return Status::Ok();
}

}  // namespace icecache
