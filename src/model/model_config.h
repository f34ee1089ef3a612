// The hyper-parameters of a loaded model, independent of the file format it came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace icecache {

struct ArchSpec;

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  // Llama 3.1 scaling (ignored otherwise).
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

struct ModelConfig {
  const ArchSpec* arch = nullptr;  // never null once loaded
  std::string name;                // human name (general.name or the folder name)
  int n_layers = 0;
  int hidden = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn = 0;
  int vocab = 0;
  int max_context = 0;     // trained context length
  int sliding_window = 0;  // 0: none (full attention in every layer)
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  // Per-frequency divisors of inv_freq (GGUF's rope_freqs tensor, how llama.cpp stores Llama
  // 3.1 scaling); empty if none. Size head_dim / 2 when present.
  std::vector<float> rope_freq_factors;
  float norm_eps = 1e-5f;
  bool tie_embeddings = false;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Bytes of K and V for one token across all layers at element type `kv_dtype`.
  int64_t KvBytesPerToken(DType kv_dtype) const {
    return static_cast<int64_t>(n_layers) * kv_dim() * 2 * BlockBytes(kv_dtype);
  }
};

// RoPE inverse frequencies (head_dim / 2 values) as transformers computes them in f32,
// including Llama-3.1 and linear scaling.
void ComputeRopeInvFreq(const ModelConfig& config, float* inv_freq);

}  // namespace icecache
