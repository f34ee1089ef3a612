// Tiny random-weight models of every supported architecture (llama, qwen2, qwen3), written as a
// Hugging Face folder (config.json, model.safetensors, tokenizer files) or as a GGUF file laid out
// the way llama.cpp's convert_hf_to_gguf.py writes it. The Python side (tools/reference/
// tiny_spec.py) builds the same models and runs them with transformers to make the reference
// fixtures in tests/data/reference/ (see docs/dev/REFERENCE.md).
//
// Weight generator (identical in C++ and Python, so weights are bit-identical). For a tensor with
// Hugging Face name N ("model.layers.0.self_attn.q_proj.weight"), element index i (row-major) and
// the model's 64-bit seed S, with all integer arithmetic modulo 2^64:
//
//   state = (Fnv1a64(UTF-8 bytes of N) XOR S) + i
//   z     = SplitMix64(state)
//   v     = int64(z >> 40) - 2^23                 signed, in [-2^23, 2^23)
//   value = float(v) * 2^e                        exact: |v| < 2^24 and 2^e is a power of two
//
//   kind        tensors                               e      range
//   embedding   model.embed_tokens.weight             -25    [-1/4, 1/4)
//   output      lm_head.weight (untied models)        -25    [-1/4, 1/4)
//   projection  *_proj.weight                         -26    [-1/8, 1/8)
//   bias        *.bias (qwen2 q/k/v)                  -26    [-1/8, 1/8)
//   norm        *norm.weight (incl. q_norm, k_norm)   1.0f + float(v) * 2^-26, one f32 rounding
//                                                            (round to nearest even) of an exact
//                                                            product, so FMA contraction cannot
//                                                            change it: [0.875, 1.125]
//
// Fnv1a64: offset basis 0xcbf29ce484222325, prime 0x100000001b3, per byte h = (h ^ b) * prime.
// SplitMix64(x): z = x + 0x9e3779b97f4a7c15; z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
//                z = (z ^ (z >> 27)) * 0x94d049bb133111eb; return z ^ (z >> 31).
// Projections are 2^-26 rather than smaller so that attention and MLP outputs dominate the
// residual stream (with small projections a tied random model just echoes its input token).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/split_mix.h"
#include "icecache/status.h"

namespace icecache::testing {

// Llama-3.1 style rope scaling (config.json "rope_scaling" with rope_type "llama3").
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  bool operator==(const Llama3RopeScaling&) const = default;
};

struct TinyModelSpec {
  std::string name;  // "tiny_llama", also general.name in the GGUF
  std::string arch;  // "llama" | "qwen2" | "qwen3"
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;  // must equal hidden / heads except for qwen3
  int64_t ffn = 0;
  int64_t vocab = 0;  // >= the tokenizer's size; extra ids become [PAD<i>] tokens in a GGUF
  double rope_theta = 10000.0;
  double rms_eps = 1e-6;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 4096;
  uint64_t seed = 0;
  std::optional<Llama3RopeScaling> rope_scaling;  // llama only
  bool operator==(const TinyModelSpec&) const = default;
};

// The presets of the reference fixtures (tests/data/reference/<name>.json records the spec the
// Python side used; tests assert equality). Keep in sync with tools/reference/tiny_spec.py.
TinyModelSpec TinyLlamaSpec();  // llama3 rope scaling, untied, GQA 4:2, 3 layers
TinyModelSpec TinyQwen2Spec();  // q/k/v bias, tied
TinyModelSpec TinyQwen3Spec();  // q_norm/k_norm, head_dim 128 != hidden / heads, tied
std::vector<TinyModelSpec> AllTinySpecs();

// The committed tokenizer of a preset's family: tests/data/reference/tiny_tok_llama3.json for
// llama, tiny_tok_qwen2.json for qwen2 and qwen3.
std::string TinyTokenizerPath(const TinyModelSpec& spec);

// The spec object of a fixture ("spec" in tests/data/reference/tiny_*.json).
Result<TinyModelSpec> ParseTinyModelSpec(std::string_view json);
// Checks arch, sizes and divisibility; the writers call it.
Status ValidateTinyModelSpec(const TinyModelSpec& spec);

// ---- weight generator ----------------------------------------------------------------------

uint64_t Fnv1a64(std::span<const uint8_t> bytes, uint64_t h = 0xcbf29ce484222325ull);
uint64_t Fnv1a64(std::string_view s);

enum class TinyTensorKind { kEmbedding, kOutput, kProjection, kBias, kNorm };
// The kind of a Hugging Face tensor name; NotFound for names outside the table above.
Result<TinyTensorKind> TinyTensorKindOf(std::string_view hf_name);
// Fills out[0..n) with elements 0..n-1 of tensor `hf_name`. REQUIRES: a name with a kind.
void FillTinyTensor(std::string_view hf_name, TinyTensorKind kind, uint64_t seed,
                    std::span<float> out);

struct TinyTensor {
  std::string name;            // Hugging Face name
  std::vector<int64_t> shape;  // row-major ([out, in] for projections)
};
// Every tensor of the model with its HF name and shape, in a stable order.
std::vector<TinyTensor> TinyHfTensors(const TinyModelSpec& spec);
// The generated data of one tensor of TinyHfTensors(spec).
std::vector<float> TinyTensorData(const TinyModelSpec& spec, const TinyTensor& t);

// ---- GGUF layout -----------------------------------------------------------------------------

// "model.layers.3.mlp.down_proj.weight" -> "blk.3.ffn_down.weight" (llama.cpp names); NotFound
// for names without a GGUF counterpart.
Result<std::string> GgufTensorName(std::string_view hf_name);

// llama.cpp stores the Q and K projections of arch "llama" with the rows of each head reordered
// from Hugging Face's rotate-half layout (first half of the head dims, then the second half) to
// interleaved pairs: within each head of d rows, GGUF row 2j + s is HF row s * d/2 + j
// (s in {0, 1}, j < d/2). `rows` = n_head * d; Q uses the attention heads, K the KV heads.
void LlamaPermuteQkRows(const float* src, float* dst, int64_t rows, int64_t cols, int64_t n_head);
void LlamaUnpermuteQkRows(const float* src, float* dst, int64_t rows, int64_t cols, int64_t n_head);

// The rope_freqs.weight values llama.cpp writes for llama3 rope scaling (head_dim / 2 divisors
// of the rotary frequencies). REQUIRES: spec.rope_scaling.
std::vector<float> Llama3RopeFreqs(const TinyModelSpec& spec);

// ---- writers -------------------------------------------------------------------------------

// The tokenizer_config.json that goes with a tokenizer.json: "<dir>/tokenizer_config.json" next
// to a file named tokenizer.json, else "<path without .json>_config.json"
// (tests/data/reference/tiny_tok_llama3.json -> tiny_tok_llama3_config.json).
std::string TokenizerConfigPathFor(const std::string& tokenizer_json_path);

// config.json of the model (the keys the real checkpoints of each family have: llama with
// "rope_scaling" {rope_type llama3, ...}; qwen2 with sliding-window keys; qwen3 with head_dim).
// bos/eos ids come from the tokenizer files (Qwen convention: bos_token_id is <|endoftext|>
// when tokenizer_config has no bos_token).
Result<std::string> TinyHfConfigJson(const TinyModelSpec& spec,
                                     const std::string& tokenizer_json_path);

// Writes <dir>/config.json, model.safetensors (all F32, HF names), tokenizer.json and
// tokenizer_config.json (copied). Creates `dir` if needed.
Status WriteTinyHfModel(const TinyModelSpec& spec, const std::string& dir,
                        const std::string& tokenizer_json_path);

// Writes the same model as a GGUF v3 file as llama.cpp's converter would: <arch>.* hyper-
// parameters, general.file_type, tokenizer.ggml.* (model "gpt2", pre "llama-bpe" / "qwen2" /
// "smollm" detected from the tokenizer.json pre-tokenizer, tokens, token_type, merges, bos/eos/
// pad ids, add_bos_token, chat template), llama.cpp tensor names, the llama Q/K permutation and,
// for llama3 rope scaling, a rope_freqs.weight tensor (llama.cpp writes no scaling keys for it).
// 2-D weights are stored as `weight_dtype` (quantized with QuantizeRow) when their rows divide
// into its blocks, else F32; 1-D tensors (norms, biases, rope_freqs) stay F32.
Status WriteTinyGgufModel(const TinyModelSpec& spec, const std::string& path,
                          const std::string& tokenizer_json_path, DType weight_dtype);

}  // namespace icecache::testing
