#include "model/loader.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/arch/arch.h"
#include "model/gguf/gguf_file.h"
#include "model/safetensors/safetensors_file.h"

namespace icecache {

namespace fs = std::filesystem;

LoadedModel::LoadedModel() = default;
LoadedModel::~LoadedModel() = default;

Result<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFound(path + ": no such file or directory");
  if (fs::is_directory(path, ec)) return LoadHfModel(path);
  // A file: GGUF is the only single-file format we read; check the magic for a clear error.
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return LoadGgufModel(path);
  if (path.size() > 12 && path.ends_with(".safetensors")) {
    return InvalidArgument(path +
                           ": pass the model folder (with config.json and tokenizer.json), "
                           "not a single .safetensors file");
  }
  return InvalidArgument(path + ": not a GGUF file (bad magic) and not a model folder");
}

namespace {

Status CheckTensor(const Tensor& t, const std::string& what, std::initializer_list<int64_t> shape,
                   bool required) {
  if (t.empty()) {
    if (required) return NotFound("missing weight: " + what);
    return Status::Ok();
  }
  bool same = t.ndim() == static_cast<int>(shape.size());
  if (same) {
    int i = 0;
    for (int64_t d : shape) same = same && t.dim(i++) == d;
  }
  if (!same) {
    std::string want = "[";
    int i = 0;
    for (int64_t d : shape) want += (i++ ? ", " : "") + std::to_string(d);
    want += "]";
    return Corrupt("weight " + what + " has shape " + t.ShapeString() + ", expected " + want);
  }
  if (t.dtype() == DType::kI32) return Corrupt("weight " + what + " has integer type");
  return Status::Ok();
}

}  // namespace

Status ValidateWeights(const ModelConfig& c, const ModelWeights& w) {
  if (c.n_layers <= 0 || c.hidden <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 ||
      c.ffn <= 0 || c.vocab <= 0) {
    return Corrupt("model dimensions must be positive");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Corrupt("attention heads (" + std::to_string(c.n_heads) +
                   ") not a multiple of KV heads (" + std::to_string(c.n_kv_heads) + ")");
  }
  if (c.head_dim % 2 != 0) return Corrupt("head_dim must be even for RoPE");
  if (!c.rope_freq_factors.empty() &&
      c.rope_freq_factors.size() != static_cast<size_t>(c.head_dim / 2)) {
    return Corrupt("rope frequency factors: expected " + std::to_string(c.head_dim / 2) +
                   " values, got " + std::to_string(c.rope_freq_factors.size()));
  }
  if (static_cast<int>(w.layers.size()) != c.n_layers) return Internal("layer count mismatch");
  const int64_t h = c.hidden, q = c.q_dim(), kv = c.kv_dim(), f = c.ffn, v = c.vocab;
  ICECACHE_RETURN_IF_ERROR(CheckTensor(w.tok_embd, "token embedding", {v, h}, true));
  ICECACHE_RETURN_IF_ERROR(CheckTensor(w.output_norm, "output norm", {h}, true));
  ICECACHE_RETURN_IF_ERROR(CheckTensor(w.output, "output (lm head)", {v, h}, true));
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string p = "layer " + std::to_string(i) + " ";
    const bool bias = c.arch->qkv_bias, qkn = c.arch->qk_norm;
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.attn_norm, p + "attention norm", {h}, true));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.wq, p + "q projection", {q, h}, true));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.wk, p + "k projection", {kv, h}, true));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.wv, p + "v projection", {kv, h}, true));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.wo, p + "output projection", {h, q}, true));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.bq, p + "q bias", {q}, bias));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.bk, p + "k bias", {kv}, bias));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.bv, p + "v bias", {kv}, bias));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.q_norm, p + "q norm", {c.head_dim}, qkn));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.k_norm, p + "k norm", {c.head_dim}, qkn));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.ffn_norm, p + "ffn norm", {h}, true));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.w_gate, p + "ffn gate", {f, h}, true));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.w_up, p + "ffn up", {f, h}, true));
    ICECACHE_RETURN_IF_ERROR(CheckTensor(l.w_down, p + "ffn down", {h, f}, true));
    if (!bias && (!l.bq.empty() || !l.bk.empty() || !l.bv.empty())) {
      return Unsupported(p + "has q/k/v biases, which architecture " + std::string(c.arch->name) +
                         " does not use");
    }
  }
  // Norm weights are read as f32 by every backend.
  auto is_f32 = [](const Tensor& t) { return t.empty() || t.dtype() == DType::kF32; };
  for (const LayerWeights& l : w.layers) {
    if (!is_f32(l.attn_norm) || !is_f32(l.ffn_norm) || !is_f32(l.q_norm) || !is_f32(l.k_norm) ||
        !is_f32(l.bq) || !is_f32(l.bk) || !is_f32(l.bv)) {
      return Internal("norm and bias weights must be converted to f32 by the loader");
    }
  }
  if (!is_f32(w.output_norm)) return Internal("output norm must be f32");
  return Status::Ok();
}

}  // namespace icecache
