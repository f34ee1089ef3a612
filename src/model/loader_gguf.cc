// GGUF -> LoadedModel: hyper-parameters from "<arch>.*" keys, tensors by llama.cpp's names.
#include <string>

#include "model/arch/arch.h"
#include "model/gguf/gguf_file.h"
#include "model/loader.h"
#include "model/weight_convert.h"

namespace icecache {

namespace {

// Reads a required positive integer key.
Result<int> RequiredDim(const GgufFile& f, const std::string& key) {
  ICECACHE_ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  if (v <= 0 || v > (int64_t{1} << 30)) {
    return Corrupt(f.path() + ": " + key + " = " + std::to_string(v) + " is out of range");
  }
  return static_cast<int>(v);
}

Result<ModelConfig> ReadConfig(const GgufFile& f, const ArchSpec* arch, const std::string& a) {
  ModelConfig c;
  c.arch = arch;
  if (const GgufValue* v = f.Find("general.name"); v && v->AsString()) c.name = *v->AsString();
  ICECACHE_ASSIGN_OR_RETURN(c.n_layers, RequiredDim(f, a + ".block_count"));
  ICECACHE_ASSIGN_OR_RETURN(c.hidden, RequiredDim(f, a + ".embedding_length"));
  ICECACHE_ASSIGN_OR_RETURN(c.ffn, RequiredDim(f, a + ".feed_forward_length"));
  ICECACHE_ASSIGN_OR_RETURN(c.n_heads, RequiredDim(f, a + ".attention.head_count"));
  ICECACHE_ASSIGN_OR_RETURN(int64_t kv_heads, f.GetInt(a + ".attention.head_count_kv", c.n_heads));
  c.n_kv_heads = static_cast<int>(kv_heads);
  ICECACHE_ASSIGN_OR_RETURN(int64_t head_dim,
                            f.GetInt(a + ".attention.key_length", c.hidden / c.n_heads));
  c.head_dim = static_cast<int>(head_dim);
  ICECACHE_ASSIGN_OR_RETURN(int64_t value_len, f.GetInt(a + ".attention.value_length", head_dim));
  if (value_len != head_dim) {
    return Unsupported(f.path() + ": key length " + std::to_string(head_dim) +
                       " differs from value length " + std::to_string(value_len));
  }
  ICECACHE_ASSIGN_OR_RETURN(int64_t rope_dims, f.GetInt(a + ".rope.dimension_count", head_dim));
  if (rope_dims != head_dim) {
    return Unsupported(f.path() + ": partial rotary embedding (" + std::to_string(rope_dims) +
                       " of " + std::to_string(head_dim) + " dims) is not supported");
  }
  ICECACHE_ASSIGN_OR_RETURN(c.max_context, RequiredDim(f, a + ".context_length"));
  ICECACHE_ASSIGN_OR_RETURN(double theta, f.GetFloat(a + ".rope.freq_base", 10000.0));
  c.rope_theta = static_cast<float>(theta);
  ICECACHE_ASSIGN_OR_RETURN(double eps, f.GetFloat(a + ".attention.layer_norm_rms_epsilon"));
  c.norm_eps = static_cast<float>(eps);
  ICECACHE_ASSIGN_OR_RETURN(int64_t window, f.GetInt(a + ".attention.sliding_window", 0));
  c.sliding_window = static_cast<int>(window);

  if (const GgufValue* v = f.Find(a + ".rope.scaling.type"); v != nullptr) {
    const std::string* type = v->AsString();
    if (type == nullptr) return Corrupt(f.path() + ": " + a + ".rope.scaling.type is not a string");
    if (*type == "linear") {
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      ICECACHE_ASSIGN_OR_RETURN(double factor, f.GetFloat(a + ".rope.scaling.factor"));
      c.rope_scaling.factor = static_cast<float>(factor);
    } else if (*type != "none") {
      return Unsupported(f.path() + ": RoPE scaling type '" + *type + "' is not supported");
    }
  }
  return c;
}

Tensor View(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* info = f.FindTensor(name);
  return info == nullptr ? Tensor() : f.TensorView(*info);
}

}  // namespace

Result<std::unique_ptr<LoadedModel>> LoadGgufModel(const std::string& path) {
  auto model = std::make_unique<LoadedModel>();
  ICECACHE_ASSIGN_OR_RETURN(model->gguf, GgufFile::Open(path));
  const GgufFile& f = *model->gguf;
  model->path = path;
  model->format = "gguf";

  ICECACHE_ASSIGN_OR_RETURN(std::string arch_name, f.GetString("general.architecture"));
  const ArchSpec* arch = FindArchByGgufName(arch_name);
  if (arch == nullptr) {
    return Unsupported(path + ": architecture '" + arch_name +
                       "' is not supported (supported: " + SupportedArchList() + ")");
  }
  ICECACHE_ASSIGN_OR_RETURN(model->config, ReadConfig(f, arch, arch_name));
  ModelConfig& c = model->config;

  for (const auto& [key, value] : f.metadata()) {
    model->metadata.emplace_back(key, value.ToDisplayString());
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    model->tensors.push_back({t.name, t.dtype, t.Shape(), static_cast<int64_t>(t.nbytes)});
  }

  // Tokenizer and chat template.
  auto tok = Tokenizer::FromGguf(f);
  if (!tok.ok()) return tok.status().WithContext(path);
  model->tokenizer = std::move(tok).value();
  c.vocab = model->tokenizer->vocab_size();
  if (const GgufValue* v = f.Find(arch_name + ".vocab_size"); v && v->AsInt()) {
    if (*v->AsInt() != c.vocab) {
      return Corrupt(path + ": " + arch_name + ".vocab_size is " + std::to_string(*v->AsInt()) +
                     " but the tokenizer has " + std::to_string(c.vocab) + " tokens");
    }
  }
  if (const GgufValue* v = f.Find("tokenizer.chat_template"); v && v->AsString()) {
    const Tokenizer& t = *model->tokenizer;
    std::string bos = t.bos_id() >= 0 ? std::string(t.TokenText(t.bos_id())) : "";
    std::string eos = t.eos_id() >= 0 ? std::string(t.TokenText(t.eos_id())) : "";
    auto tmpl = ChatTemplate::FromJinja(*v->AsString(), bos, eos);
    if (tmpl.ok()) {
      model->chat_template = std::move(tmpl).value();
    } else {
      model->chat_template_note = tmpl.status().message();
    }
  } else {
    model->chat_template_note = "the GGUF file has no tokenizer.chat_template";
  }

  // Weights.
  ModelWeights& w = model->weights;
  w.tok_embd = View(f, "token_embd.weight");
  ICECACHE_ASSIGN_OR_RETURN(w.output_norm, ToF32(View(f, "output_norm.weight")));
  w.output = View(f, "output.weight");
  c.tie_embeddings = w.output.empty();
  if (c.tie_embeddings) w.output = w.tok_embd;
  if (const GgufTensorInfo* rf = f.FindTensor("rope_freqs.weight")) {
    ICECACHE_ASSIGN_OR_RETURN(Tensor factors, ToF32(f.TensorView(*rf)));
    c.rope_freq_factors.assign(factors.data_as<float>(),
                               factors.data_as<float>() + factors.numel());
  }
  w.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    ICECACHE_ASSIGN_OR_RETURN(l.attn_norm, ToF32(View(f, p + "attn_norm.weight")));
    l.wq = View(f, p + "attn_q.weight");
    l.wk = View(f, p + "attn_k.weight");
    l.wv = View(f, p + "attn_v.weight");
    l.wo = View(f, p + "attn_output.weight");
    ICECACHE_ASSIGN_OR_RETURN(l.bq, ToF32(View(f, p + "attn_q.bias")));
    ICECACHE_ASSIGN_OR_RETURN(l.bk, ToF32(View(f, p + "attn_k.bias")));
    ICECACHE_ASSIGN_OR_RETURN(l.bv, ToF32(View(f, p + "attn_v.bias")));
    ICECACHE_ASSIGN_OR_RETURN(l.q_norm, ToF32(View(f, p + "attn_q_norm.weight")));
    ICECACHE_ASSIGN_OR_RETURN(l.k_norm, ToF32(View(f, p + "attn_k_norm.weight")));
    ICECACHE_ASSIGN_OR_RETURN(l.ffn_norm, ToF32(View(f, p + "ffn_norm.weight")));
    l.w_gate = View(f, p + "ffn_gate.weight");
    l.w_up = View(f, p + "ffn_up.weight");
    l.w_down = View(f, p + "ffn_down.weight");
    if (arch->gguf_permutes_qk) {
      if (!l.wq.empty() && l.wq.ndim() == 2 && l.wq.dim(0) == c.q_dim()) {
        ICECACHE_ASSIGN_OR_RETURN(l.wq, UnpermuteQkRows(l.wq, c.n_heads, c.head_dim));
      }
      if (!l.wk.empty() && l.wk.ndim() == 2 && l.wk.dim(0) == c.kv_dim()) {
        ICECACHE_ASSIGN_OR_RETURN(l.wk, UnpermuteQkRows(l.wk, c.n_kv_heads, c.head_dim));
      }
    }
  }
  Status st = ValidateWeights(c, w);
  if (!st.ok()) return st.WithContext(path);
  if (c.name.empty()) c.name = arch_name;
  return model;
}

}  // namespace icecache
