// The weight tensors of a decoder-only Llama-family transformer, by role. Empty tensors mark
// parts an architecture does not have (biases, q/k norms, an untied output matrix).
//
// Matrices are [out_features, in_features] row-major (each output row contiguous), in their file
// dtype (possibly block-quantized) until a backend prepares them.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace icecache {

struct LayerWeights {
  Tensor attn_norm;
  Tensor wq, wk, wv, wo;
  Tensor bq, bk, bv;      // qwen2
  Tensor q_norm, k_norm;  // qwen3: per-head RMSNorm over head_dim
  Tensor ffn_norm;
  Tensor w_gate, w_up, w_down;
  // Backend forms only (Backend::PrepareStacked): [wq; wk; wv] and [w_gate; w_up] as one matrix
  // each, whose row blocks are then wq, wk, wv, w_gate and w_up. Empty where not stacked.
  Tensor wqkv, w_gate_up;
};

struct ModelWeights {
  Tensor tok_embd;     // [vocab, hidden]
  Tensor output_norm;  // [hidden]
  Tensor output;       // [vocab, hidden]; the same storage as tok_embd when tied
  std::vector<LayerWeights> layers;
};

}  // namespace icecache
