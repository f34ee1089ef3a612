// The decoder forward pass of Llama-family models on any Backend, over the paged KV store.
//
// Per layer: RMSNorm -> Q/K/V projections (+bias) -> (q/k norm) -> RoPE -> append K/V to the
// sequence's pages -> attention over the page table -> output projection -> residual ->
// RMSNorm -> SwiGLU MLP -> residual. Then the final norm and the logits of the requested rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
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

struct ForwardInput {
  std::span<KvSequence* const> seqs;  // the batch
  std::span<const int32_t> tokens;    // every new token, grouped by sequence in `seqs` order
  std::span<const int32_t> counts;    // new tokens per sequence (sums to tokens.size())
  LogitsMode logits = LogitsMode::kLast;
  std::span<const int32_t> rows;  // kRows: indices into `tokens`, ascending
};

class Transformer {
 public:
  // Prepares `weights` on `backend` and allocates workspace for up to `max_tokens` tokens per
  // Forward call. The weights' storage must outlive the Transformer.
  static Result<std::unique_ptr<Transformer>> Create(const ModelConfig& config,
                                                     const ModelWeights& weights, Backend* backend,
                                                     int max_tokens);

  // Appends each sequence's tokens (at its next positions) and runs the model. On success the
  // returned host f32 tensor [rows, vocab] holds the requested logits; it stays valid until the
  // next call. Fails (changing nothing) if a token id is out of range, the batch is larger than
  // max_tokens(), or the KV pool is full.
  Result<Tensor> Forward(const ForwardInput& input);

  int max_tokens() const { return max_tokens_; }
  const ModelConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }

 private:
  Transformer() = default;
  Status PrepareWeights(const ModelWeights& host);
  // Forward after the sequences have grown; `start` holds their previous lengths.
  Result<Tensor> Run(const ForwardInput& input, const std::vector<int64_t>& start);
  Status AllocateWorkspace();
  void BuildPageTable(int layer, std::span<KvSequence* const> seqs);
  // Points `table` at the current page table in backend memory.
  Status SetPageTable(PageTableView* table);

  ModelConfig config_;
  Backend* backend_ = nullptr;
  int max_tokens_ = 0;
  ModelWeights w_;  // prepared for the backend

  // Workspace (backend memory), sized for max_tokens_.
  Tensor x_, xn_, q_, k_, v_, attn_, gate_, up_, logits_, logits_in_;
  Tensor inv_freq_;
  // Per-call inputs: host staging and their backend copies (aliases on the CPU).
  Tensor ids_host_, pos_host_, row_base_host_, slots_host_, rows_host_;
  Tensor ids_, pos_, row_base_, slots_, rows_;
  Tensor logits_host_;
  // Page table of the current layer (host; uploaded when the backend is not the CPU).
  std::vector<int32_t> indptr_, indices_, lens_;
  Tensor table_dev_;  // i32 device copy of [indptr | indices | lens] (non-CPU backends)
};

}  // namespace icecache
