// Hugging Face folder -> LoadedModel: config.json, safetensors (single or sharded),
// tokenizer.json, tokenizer_config.json (chat template, special tokens).
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/arch/arch.h"
#include "model/loader.h"
#include "model/safetensors/safetensors_file.h"
#include "model/weight_convert.h"

namespace icecache {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

Result<Json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Corrupt(path + ": invalid JSON");
  if (!j.is_object()) return Corrupt(path + ": expected a JSON object");
  return j;
}

// Reads an optional number; errors if present with a wrong type.
template <typename T>
Status GetNumber(const Json& j, const std::string& file, const char* key, T* out, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return NotFound(file + ": missing \"" + key + "\"");
    return Status::Ok();
  }
  if (!it->is_number()) return Corrupt(file + ": \"" + key + "\" is not a number");
  *out = it->get<T>();
  return Status::Ok();
}

Result<ModelConfig> ParseHfConfig(const Json& j, const std::string& file) {
  ModelConfig c;
  auto archs = j.find("architectures");
  if (archs == j.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return Corrupt(file + ": missing \"architectures\"");
  }
  const std::string cls = (*archs)[0].get<std::string>();
  c.arch = FindArchByHfClass(cls);
  if (c.arch == nullptr) {
    return Unsupported(file + ": architecture '" + cls +
                       "' is not supported (supported: " + SupportedArchList() + ")");
  }
  ICECACHE_RETURN_IF_ERROR(GetNumber(j, file, "hidden_size", &c.hidden, true));
  ICECACHE_RETURN_IF_ERROR(GetNumber(j, file, "intermediate_size", &c.ffn, true));
  ICECACHE_RETURN_IF_ERROR(GetNumber(j, file, "num_hidden_layers", &c.n_layers, true));
  ICECACHE_RETURN_IF_ERROR(GetNumber(j, file, "num_attention_heads", &c.n_heads, true));
  c.n_kv_heads = c.n_heads;
  ICECACHE_RETURN_IF_ERROR(GetNumber(j, file, "num_key_value_heads", &c.n_kv_heads, false));
  ICECACHE_RETURN_IF_ERROR(GetNumber(j, file, "vocab_size", &c.vocab, true));
  if (c.n_heads <= 0 || c.hidden <= 0) return Corrupt(file + ": non-positive dimensions");
  c.head_dim = c.hidden / c.n_heads;
  ICECACHE_RETURN_IF_ERROR(GetNumber(j, file, "head_dim", &c.head_dim, false));
  c.max_context = 2048;
  ICECACHE_RETURN_IF_ERROR(GetNumber(j, file, "max_position_embeddings", &c.max_context, false));
  c.norm_eps = 1e-6f;
  ICECACHE_RETURN_IF_ERROR(GetNumber(j, file, "rms_norm_eps", &c.norm_eps, false));
  c.tie_embeddings = j.value("tie_word_embeddings", false);

  // transformers 5 nests RoPE settings under "rope_parameters"; older files use rope_theta and
  // rope_scaling at the top level.
  const Json* rope = &j;
  Json scaling = j.value("rope_scaling", Json());
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    rope = &*rp;
    scaling = *rp;
  }
  c.rope_theta = 10000.0f;
  ICECACHE_RETURN_IF_ERROR(GetNumber(*rope, file, "rope_theta", &c.rope_theta, false));
  if (scaling.is_object()) {
    std::string type = scaling.value("rope_type", scaling.value("type", std::string("default")));
    if (type == "llama3") {
      RopeScaling& s = c.rope_scaling;
      s.type = RopeScaling::Type::kLlama3;
      ICECACHE_RETURN_IF_ERROR(GetNumber(scaling, file, "factor", &s.factor, true));
      ICECACHE_RETURN_IF_ERROR(
          GetNumber(scaling, file, "low_freq_factor", &s.low_freq_factor, true));
      ICECACHE_RETURN_IF_ERROR(
          GetNumber(scaling, file, "high_freq_factor", &s.high_freq_factor, true));
      ICECACHE_RETURN_IF_ERROR(GetNumber(scaling, file, "original_max_position_embeddings",
                                         &s.original_max_position, true));
    } else if (type == "linear") {
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      ICECACHE_RETURN_IF_ERROR(GetNumber(scaling, file, "factor", &c.rope_scaling.factor, true));
    } else if (type != "default") {
      return Unsupported(file + ": RoPE scaling type '" + type + "' is not supported");
    }
  } else if (!scaling.is_null()) {
    return Corrupt(file + ": \"rope_scaling\" is not an object");
  }
  if (j.value("attention_bias", false) && !c.arch->qkv_bias) {
    return Unsupported(file + ": attention_bias = true is not supported for " + cls);
  }
  if (j.value("mlp_bias", false)) return Unsupported(file + ": mlp_bias = true is not supported");
  if (auto sw = j.find("sliding_window"); sw != j.end() && sw->is_number_integer()) {
    const bool used = j.value("use_sliding_window", c.arch == &LlamaArch());
    if (used) c.sliding_window = sw->get<int>();
  }
  if (auto pr = j.find("partial_rotary_factor"); pr != j.end() && pr->is_number()) {
    if (pr->get<double>() != 1.0) return Unsupported(file + ": partial rotary embeddings");
  }
  return c;
}

std::string ReadChatTemplate(const std::string& dir, const Json& tok_config) {
  if (auto it = tok_config.find("chat_template"); it != tok_config.end()) {
    if (it->is_string()) return it->get<std::string>();
    if (it->is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const Json& e : *it) {
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string()) {
          return e["template"].get<std::string>();
        }
      }
    }
  }
  std::ifstream in(dir + "/chat_template.jinja");
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<std::unique_ptr<LoadedModel>> LoadHfModel(const std::string& dir) {
  auto model = std::make_unique<LoadedModel>();
  model->path = dir;
  model->format = "safetensors";
  const std::string config_path = dir + "/config.json";
  if (!fs::exists(config_path)) return NotFound(dir + ": not a model folder (no config.json)");
  ICECACHE_ASSIGN_OR_RETURN(Json config_json, ReadJson(config_path));
  ICECACHE_ASSIGN_OR_RETURN(model->config, ParseHfConfig(config_json, config_path));
  ModelConfig& c = model->config;
  c.name = fs::path(dir).filename().string();
  if (c.name.empty()) c.name = fs::path(dir).parent_path().filename().string();
  for (auto it = config_json.begin(); it != config_json.end(); ++it) {
    std::string v = it.value().dump();
    if (v.size() > 80) v = v.substr(0, 77) + "...";
    model->metadata.emplace_back(it.key(), v);
  }

  // Tokenizer.
  const std::string tok_path = dir + "/tokenizer.json";
  if (!fs::exists(tok_path)) return NotFound(dir + ": missing tokenizer (no tokenizer.json)");
  const std::string tok_config_path = dir + "/tokenizer_config.json";
  const bool has_tok_config = fs::exists(tok_config_path);
  auto tok = Tokenizer::FromHfFiles(tok_path, has_tok_config ? tok_config_path : "");
  if (!tok.ok()) return tok.status();
  model->tokenizer = std::move(tok).value();
  if (model->tokenizer->vocab_size() > c.vocab) {
    return Corrupt(dir + ": tokenizer has " + std::to_string(model->tokenizer->vocab_size()) +
                   " tokens but the model's vocab_size is " + std::to_string(c.vocab));
  }
  Json tok_config = Json::object();
  if (has_tok_config) {
    ICECACHE_ASSIGN_OR_RETURN(tok_config, ReadJson(tok_config_path));
  }
  const std::string jinja = ReadChatTemplate(dir, tok_config);
  if (jinja.empty()) {
    model->chat_template_note = "the model folder has no chat template";
  } else {
    const Tokenizer& t = *model->tokenizer;
    std::string bos = t.bos_id() >= 0 ? std::string(t.TokenText(t.bos_id())) : "";
    std::string eos = t.eos_id() >= 0 ? std::string(t.TokenText(t.eos_id())) : "";
    auto tmpl = ChatTemplate::FromJinja(jinja, bos, eos);
    if (tmpl.ok()) {
      model->chat_template = std::move(tmpl).value();
    } else {
      model->chat_template_note = tmpl.status().message();
    }
  }

  // Weights.
  ICECACHE_ASSIGN_OR_RETURN(model->hf, HfCheckpoint::Open(dir));
  const HfCheckpoint& ck = *model->hf;
  for (const SafetensorsTensorInfo* t : ck.AllTensors()) {
    model->tensors.push_back({t->name, t->dtype, t->shape, static_cast<int64_t>(t->nbytes)});
  }
  auto view = [&](const std::string& name) {
    const SafetensorsTensorInfo* info = ck.FindTensor(name);
    return info == nullptr ? Tensor() : ck.TensorView(*info);
  };
  ModelWeights& w = model->weights;
  w.tok_embd = view("model.embed_tokens.weight");
  ICECACHE_ASSIGN_OR_RETURN(w.output_norm, ToF32(view("model.norm.weight")));
  w.output = view("lm_head.weight");
  if (c.tie_embeddings || w.output.empty()) {
    if (!c.tie_embeddings) return NotFound(dir + ": missing weight lm_head.weight");
    w.output = w.tok_embd;
  }
  w.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    ICECACHE_ASSIGN_OR_RETURN(l.attn_norm, ToF32(view(p + "input_layernorm.weight")));
    l.wq = view(p + "self_attn.q_proj.weight");
    l.wk = view(p + "self_attn.k_proj.weight");
    l.wv = view(p + "self_attn.v_proj.weight");
    l.wo = view(p + "self_attn.o_proj.weight");
    ICECACHE_ASSIGN_OR_RETURN(l.bq, ToF32(view(p + "self_attn.q_proj.bias")));
    ICECACHE_ASSIGN_OR_RETURN(l.bk, ToF32(view(p + "self_attn.k_proj.bias")));
    ICECACHE_ASSIGN_OR_RETURN(l.bv, ToF32(view(p + "self_attn.v_proj.bias")));
    ICECACHE_ASSIGN_OR_RETURN(l.q_norm, ToF32(view(p + "self_attn.q_norm.weight")));
    ICECACHE_ASSIGN_OR_RETURN(l.k_norm, ToF32(view(p + "self_attn.k_norm.weight")));
    ICECACHE_ASSIGN_OR_RETURN(l.ffn_norm, ToF32(view(p + "post_attention_layernorm.weight")));
    l.w_gate = view(p + "mlp.gate_proj.weight");
    l.w_up = view(p + "mlp.up_proj.weight");
    l.w_down = view(p + "mlp.down_proj.weight");
  }
  Status st = ValidateWeights(c, w);
  if (!st.ok()) return st.WithContext(dir);
  return model;
}

}  // namespace icecache
