// The decoder forward pass of Llama-family models on any Backend, over the paged KV store.
//
// Per layer: RMSNorm -> Q/K/V projections (+bias) -> (q/k norm) -> RoPE -> append K/V to the
// sequences' pages -> attention (a LayerAttention strategy: dense by default) -> output
// projection -> residual -> RMSNorm -> SwiGLU MLP -> residual. Then the final norm and the
// logits of the requested rows.
//
// A forward pass has three phases: host preparation (grow the sequences, fill one staging
// buffer with token ids, positions, row bases, logit rows and the K/V slots of every layer, and
// upload it), the layers (backend ops only, at fixed device addresses: capturable as a graph),
// and reading the logits.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/dense_attention.h"
#include "engine/layer_attention.h"
#include "kv/kv_sequence.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace icecache {

enum class LogitsMode {
  kNone,  // no logits (an intermediate prefill chunk)
  kLast,  // one row per sequence: its last token
  kAll,   // one row per token (teacher-forced scoring)
  kRows,  // the batch rows listed in ForwardInput::rows
};

// Work the host runs beside a forward pass (ForwardInput::beside).
class BesideWork {
 public:
  virtual ~BesideWork() = default;
  virtual void Start() = 0;
  virtual void Join() = 0;
};

struct ForwardInput {
  std::span<KvSequence* const> seqs;  // the batch (all in one pool)
  std::span<const int32_t> tokens;    // every new token, grouped by sequence in `seqs` order
  std::span<const int32_t> counts;    // new tokens per sequence (sums to tokens.size())
  LogitsMode logits = LogitsMode::kLast;
  std::span<const int32_t> rows;  // kRows: indices into `tokens`, ascending
  // Attention strategy for this pass; null: dense attention over every page.
  LayerAttention* attention = nullptr;
  // Return the logits in backend memory (for a device sampler) instead of copying them to the
  // host; the same as usual on the CPU.
  bool logits_in_backend = false;
  // The batch's token ids are already in backend memory at StepIds(), put there by the device
  // sampler of the step before; `tokens` then only gives the count (one per sequence).
  bool ids_on_device = false;
  // Host work to run beside the pass's device work (may be null): Forward calls Start() once the
  // sequences' new slots exist and the attention is prepared, and, should the pass then fail,
  // Join() before it truncates the sequences back; the caller joins it otherwise. Only for an
  // attention whose host side reads no page list after Prepare (selection on the device).
  BesideWork* beside = nullptr;
};

class Transformer {
 public:
  // Prepares `weights` on `backend` and allocates workspace for up to `max_tokens` tokens per
  // Forward call and up to `max_seqs` sequences whose pages come from a pool of
  // `pool_capacity` pages. The weights' storage must outlive the Transformer.
  static Result<std::unique_ptr<Transformer>> Create(const ModelConfig& config,
                                                     const ModelWeights& weights, Backend* backend,
                                                     int max_tokens, int max_seqs,
                                                     int64_t pool_capacity);

  // Appends each sequence's tokens (at its next positions) and runs the model. On success the
  // returned f32 tensor [rows, vocab] (host memory unless input.logits_in_backend) holds the
  // requested logits; it stays valid until the next call. Fails (changing nothing) if a token id is
  // out of range, the batch is larger than the limits, or the KV pool is full.
  Result<Tensor> Forward(const ForwardInput& input);

  // Where a step reads its first `n` token ids in backend memory (i32 [n]): a device sampler
  // writes the next step's ids here for ForwardInput::ids_on_device.
  Tensor StepIds(int64_t n) const;

  // Host wall time of the last Forward's phases, in seconds: appending the KV pages (grow),
  // filling and queueing the inputs (stage), the attention's Prepare, queueing (or, on the CPU,
  // running) the layers, and reading the logits back (a wait for the device where the logits go
  // to the host). For ICECACHE_TRACE_STEPS.
  struct PhaseTimes {
    double grow = 0, stage = 0, prepare = 0, layers = 0, logits = 0;
  };
  const PhaseTimes& last_phases() const { return phases_; }

  int max_tokens() const { return max_tokens_; }
  const ModelConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }

 private:
  Transformer() = default;
  Status PrepareWeights(const ModelWeights& host);
  Status AllocateWorkspace(int max_seqs, int64_t pool_capacity);
  Status CheckInput(const ForwardInput& in) const;
  // Fills and uploads the step inputs; returns the number of logit rows.
  Result<int64_t> StageInputs(const ForwardInput& in, std::span<const int64_t> start);
  // The layers and the logits (backend ops only).
  Status RunLayers(const ForwardInput& in, int64_t n, int64_t n_rows, LayerAttention& attention);
  // A step's tokens [begin, end), and the activations of those rows.
  struct TokenRange {
    int64_t begin = 0, end = 0;
  };
  struct Rows {
    Tensor x, xn, q, k, v, attn, gate, up;
  };
  Rows RowsOf(TokenRange r) const;
  // One layer for the tokens of `r` (their activations `t`, RowsOf(r)): up to its attention
  // (norm, projections, RoPE, K/V written into `pool`); from the attention's output to the MLP's
  // input (output projection, residual, norm); the MLP.
  void LayerIn(int l, TokenRange r, const Rows& t, const Tensor& pos_t, const KvPoolView& pool);
  // `attn_out`: where the output projection goes (rows of qe_attn_ to keep it), or empty: t.xn.
  void LayerOut(int l, const Rows& t, const Tensor& attn_out = Tensor());
  void LayerMlp(int l, const Rows& t);
  // Queues the early query estimate of `layer` for the step's `n` tokens and the strategy's
  // prefetch from it as side work (LayerAttention::Prefetch).
  Status QueuePrefetch(int layer, int64_t n, const Tensor& pos_t, LayerAttention& attention,
                       bool defer_copy);

  ModelConfig config_;
  Backend* backend_ = nullptr;
  int max_tokens_ = 0;
  int max_seqs_ = 0;
  // ICECACHE_BATCH_HALVES=1: decode steps whose attention runs in parts run each layer in two
  // halves of the batch, the second as side work (RunLayers). Off until measured on a GPU.
  bool halves_ = false;
  // ICECACHE_PREFETCH_EARLY=1: a layer's prefetch chooses and places its pages before the layer
  // before it attends (from the residual stream before that attention, plus that attention's
  // output of the last step: qe_attn_) rather than after, so
  // that this side work has that layer's attention as well as its MLP to hide behind; its
  // copies wait for that attention, whose fetch would share the host link with them. Off until
  // measured on a GPU.
  bool prefetch_early_ = false;
  // ICECACHE_PREFETCH_CHAIN_STOP (developer A/B, docs/PERF.md): 0 (default) the whole prefetch;
  // 1 its forks and joins of side work with nothing in them; 2 also the estimate of the query,
  // but no selection, map or copy. 1 and 2 bring in no page: they time the chain's parts.
  int prefetch_stop_ = 0;
  // ICECACHE_PREFETCH_HEADS (developer A/B): the prefetch estimates one query row per KV group
  // instead of all the group's heads, reading 1/group of the query weights (wq_est_, bq_est_,
  // prepared only with the switch), and the selection ranks by that row: 1 the group's first
  // head, 2 the mean of its heads. 0 (default): all heads.
  int prefetch_heads_ = 0;
  std::vector<Tensor> wq_est_, bq_est_;
  ModelWeights w_;  // prepared for the backend

  // Activations (backend memory), sized for max_tokens_.
  Tensor x_, xn_, q_, k_, v_, attn_, gate_, up_, logits_, logits_in_;
  // The next layer's early query estimate (LayerAttention::Prefetch), one row per sequence.
  Tensor qe_xn_, qe_;
  Tensor qe_one_;  // with ICECACHE_PREFETCH_HEADS: [max_seqs, n_kv_heads, head_dim]
  // With ICECACHE_PREFETCH_EARLY: each layer's attention output (after the output projection)
  // of the last decode step, [n_layers * max_seqs, hidden], row (l, token) at l * max_seqs +
  // token; the early estimate adds it to the residual stream (QueuePrefetch). Empty otherwise.
  Tensor qe_attn_;
  // Layer l's rows of qe_attn_ for a step of `n` tokens, or empty when it keeps none.
  Tensor KeptAttnOut(int l, int64_t n) const;
  Tensor inv_freq_;
  // Step inputs, i32: [ids | positions | row_base | rows] (4 x max_tokens), then the K/V slots
  // of every layer ([n_layers][max_tokens][n_kv_heads]). Host staging and backend copy (the
  // same tensor on the CPU).
  Tensor inputs_host_, inputs_;
  Tensor logits_host_;
  std::unique_ptr<DenseAttention> dense_;
  PhaseTimes phases_;
};

}  // namespace icecache
