#include "testing/tiny_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numbers>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "model/gguf/gguf_writer.h"
#include "model/safetensors/safetensors_file.h"
#include "testing/paths.h"

namespace icecache::testing {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

// ---- presets ---------------------------------------------------------------------------------

TinyModelSpec TinyLlamaSpec() {
  TinyModelSpec s;
  s.name = "tiny_llama";
  s.arch = "llama";
  s.hidden = 256;
  s.layers = 3;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.ffn = 512;
  s.vocab = 1024;
  s.rope_theta = 500000.0;
  s.rms_eps = 1e-5;
  s.tie_word_embeddings = false;
  s.max_position_embeddings = 32768;
  s.seed = 0x11A3A000000001ull;
  s.rope_scaling = Llama3RopeScaling{8.0, 1.0, 4.0, 8192};
  return s;
}

TinyModelSpec TinyQwen2Spec() {
  TinyModelSpec s;
  s.name = "tiny_qwen2";
  s.arch = "qwen2";
  s.hidden = 256;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.ffn = 768;
  s.vocab = 1024;
  s.rope_theta = 1000000.0;
  s.rms_eps = 1e-6;
  s.tie_word_embeddings = true;
  s.max_position_embeddings = 4096;
  s.seed = 0x0E2000000002ull;
  return s;
}

TinyModelSpec TinyQwen3Spec() {
  TinyModelSpec s;
  s.name = "tiny_qwen3";
  s.arch = "qwen3";
  s.hidden = 256;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.ffn = 512;
  s.vocab = 1024;
  s.rope_theta = 1000000.0;
  s.rms_eps = 1e-6;
  s.tie_word_embeddings = true;
  s.max_position_embeddings = 4096;
  s.seed = 0x0E3000000003ull;
  return s;
}

std::vector<TinyModelSpec> AllTinySpecs() {
  return {TinyLlamaSpec(), TinyQwen2Spec(), TinyQwen3Spec()};
}

std::string TinyTokenizerPath(const TinyModelSpec& spec) {
  return DataPath(spec.arch == "llama" ? "reference/tiny_tok_llama3.json"
                                       : "reference/tiny_tok_qwen2.json");
}

Result<TinyModelSpec> ParseTinyModelSpec(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument("tiny model spec: not a JSON object");
  try {
    TinyModelSpec s;
    s.name = j.at("name").get<std::string>();
    s.arch = j.at("arch").get<std::string>();
    s.hidden = j.at("hidden").get<int64_t>();
    s.layers = j.at("layers").get<int64_t>();
    s.heads = j.at("heads").get<int64_t>();
    s.kv_heads = j.at("kv_heads").get<int64_t>();
    s.head_dim = j.at("head_dim").get<int64_t>();
    s.ffn = j.at("ffn").get<int64_t>();
    s.vocab = j.at("vocab").get<int64_t>();
    s.rope_theta = j.at("rope_theta").get<double>();
    s.rms_eps = j.at("rms_eps").get<double>();
    s.tie_word_embeddings = j.at("tie_word_embeddings").get<bool>();
    s.max_position_embeddings = j.at("max_position_embeddings").get<int64_t>();
    const json& seed = j.at("seed");
    s.seed =
        seed.is_string() ? std::stoull(seed.get<std::string>(), nullptr, 0) : seed.get<uint64_t>();
    if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) {
      const json& r = j.at("rope_scaling");
      s.rope_scaling =
          Llama3RopeScaling{r.at("factor").get<double>(), r.at("low_freq_factor").get<double>(),
                            r.at("high_freq_factor").get<double>(),
                            r.at("original_max_position_embeddings").get<int64_t>()};
    }
    return s;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("tiny model spec: ") + e.what());
  }
}

Status ValidateTinyModelSpec(const TinyModelSpec& s) {
  const std::string where = "tiny model '" + s.name + "': ";
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "qwen3") {
    return InvalidArgument(where + "unknown arch '" + s.arch + "' (llama, qwen2, qwen3)");
  }
  if (s.hidden <= 0 || s.layers <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0 ||
      s.ffn <= 0 || s.vocab <= 0 || s.max_position_embeddings <= 0) {
    return InvalidArgument(where + "sizes must be positive");
  }
  if (s.heads % s.kv_heads != 0) return InvalidArgument(where + "heads % kv_heads != 0");
  if (s.head_dim % 2 != 0) return InvalidArgument(where + "head_dim must be even");
  if (s.arch != "qwen3" && s.head_dim * s.heads != s.hidden) {
    return InvalidArgument(where + "head_dim must be hidden / heads for " + s.arch);
  }
  if (s.rope_scaling && s.arch != "llama") {
    return InvalidArgument(where + "llama3 rope scaling is for arch llama only");
  }
  return Status::Ok();
}

// ---- weight generator ------------------------------------------------------------------------

uint64_t Fnv1a64(std::span<const uint8_t> bytes, uint64_t h) {
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t Fnv1a64(std::string_view s) {
  return Fnv1a64(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

int ScaleExponent(TinyTensorKind kind) {
  switch (kind) {
    case TinyTensorKind::kEmbedding:
    case TinyTensorKind::kOutput:
      return -25;
    case TinyTensorKind::kProjection:
    case TinyTensorKind::kBias:
    case TinyTensorKind::kNorm:
      return -26;
  }
  return 0;
}

}  // namespace

Result<TinyTensorKind> TinyTensorKindOf(std::string_view name) {
  if (name == "model.embed_tokens.weight") return TinyTensorKind::kEmbedding;
  if (name == "lm_head.weight") return TinyTensorKind::kOutput;
  if (EndsWith(name, ".bias")) return TinyTensorKind::kBias;
  if (EndsWith(name, "norm.weight")) return TinyTensorKind::kNorm;
  if (EndsWith(name, "_proj.weight")) return TinyTensorKind::kProjection;
  return NotFound("no tiny-model weight kind for tensor '" + std::string(name) + "'");
}

void FillTinyTensor(std::string_view hf_name, TinyTensorKind kind, uint64_t seed,
                    std::span<float> out) {
  const uint64_t base = Fnv1a64(hf_name) ^ seed;
  const float scale = std::ldexp(1.0f, ScaleExponent(kind));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t z = SplitMix64(base + i);
    const int64_t v = static_cast<int64_t>(z >> 40) - (int64_t{1} << 23);
    const float x = static_cast<float>(v) * scale;  // exact
    out[i] = kind == TinyTensorKind::kNorm ? 1.0f + x : x;
  }
}

std::vector<TinyTensor> TinyHfTensors(const TinyModelSpec& s) {
  const int64_t h = s.hidden, q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
  const bool bias = s.arch == "qwen2", qk_norm = s.arch == "qwen3";
  std::vector<TinyTensor> out;
  out.push_back({"model.embed_tokens.weight", {s.vocab, h}});
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {q_dim, h}});
    if (bias) out.push_back({p + "self_attn.q_proj.bias", {q_dim}});
    out.push_back({p + "self_attn.k_proj.weight", {kv_dim, h}});
    if (bias) out.push_back({p + "self_attn.k_proj.bias", {kv_dim}});
    out.push_back({p + "self_attn.v_proj.weight", {kv_dim, h}});
    if (bias) out.push_back({p + "self_attn.v_proj.bias", {kv_dim}});
    out.push_back({p + "self_attn.o_proj.weight", {h, q_dim}});
    if (qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {s.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {s.head_dim}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    out.push_back({p + "mlp.gate_proj.weight", {s.ffn, h}});
    out.push_back({p + "mlp.up_proj.weight", {s.ffn, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, s.ffn}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (!s.tie_word_embeddings) out.push_back({"lm_head.weight", {s.vocab, h}});
  return out;
}

std::vector<float> TinyTensorData(const TinyModelSpec& spec, const TinyTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> data(static_cast<size_t>(n));
  Result<TinyTensorKind> kind = TinyTensorKindOf(t.name);
  ICECACHE_CHECK_MSG(kind.ok(), t.name.c_str());
  FillTinyTensor(t.name, *kind, spec.seed, data);
  return data;
}

// ---- GGUF layout -----------------------------------------------------------------------------

Result<std::string> GgufTensorName(std::string_view hf_name) {
  if (hf_name == "model.embed_tokens.weight") return std::string("token_embd.weight");
  if (hf_name == "model.norm.weight") return std::string("output_norm.weight");
  if (hf_name == "lm_head.weight") return std::string("output.weight");
  static const std::map<std::string, std::string, std::less<>> kLayer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  constexpr std::string_view kPrefix = "model.layers.";
  if (hf_name.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view rest = hf_name.substr(kPrefix.size());
    const size_t dot = rest.find('.');
    if (dot != std::string_view::npos && dot > 0) {
      auto it = kLayer.find(rest.substr(dot + 1));
      if (it != kLayer.end()) return "blk." + std::string(rest.substr(0, dot)) + "." + it->second;
    }
  }
  return NotFound("no GGUF name for tensor '" + std::string(hf_name) + "'");
}

void LlamaPermuteQkRows(const float* src, float* dst, int64_t rows, int64_t cols, int64_t n_head) {
  const int64_t d = rows / n_head, half = d / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t s = 0; s < 2; ++s) {
        std::memcpy(dst + (h * d + 2 * j + s) * cols, src + (h * d + s * half + j) * cols,
                    sizeof(float) * cols);
      }
    }
  }
}

void LlamaUnpermuteQkRows(const float* src, float* dst, int64_t rows, int64_t cols,
                          int64_t n_head) {
  const int64_t d = rows / n_head, half = d / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t s = 0; s < 2; ++s) {
        std::memcpy(dst + (h * d + s * half + j) * cols, src + (h * d + 2 * j + s) * cols,
                    sizeof(float) * cols);
      }
    }
  }
}

std::vector<float> Llama3RopeFreqs(const TinyModelSpec& spec) {
  ICECACHE_CHECK(spec.rope_scaling.has_value());
  const Llama3RopeScaling& r = *spec.rope_scaling;
  const double old_ctx = static_cast<double>(r.original_max_position_embeddings);
  const double low_wavelen = old_ctx / r.low_freq_factor;
  const double high_wavelen = old_ctx / r.high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < spec.head_dim; i += 2) {
    const double freq = 1.0 / std::pow(spec.rope_theta,
                                       static_cast<double>(i) / static_cast<double>(spec.head_dim));
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = r.factor;
    } else {
      const double smooth =
          (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / r.factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

// ---- tokenizer files -------------------------------------------------------------------------

namespace {

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return IoError(path + ": read error");
  return s;
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return IoError(path + ": write failed");
  return Status::Ok();
}

Result<json> ReadJsonFile(const std::string& path) {
  ICECACHE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(path + ": not a JSON object");
  return j;
}

// j[key], or null when j is not an object or has no such key (const operator[] would be UB).
const json& Member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

struct TokenizerFiles {
  std::string json_path;
  std::string config_path;
  json tok;
  json config;
};

Result<TokenizerFiles> LoadTokenizerFiles(const std::string& tokenizer_json_path) {
  TokenizerFiles f;
  f.json_path = tokenizer_json_path;
  f.config_path = TokenizerConfigPathFor(tokenizer_json_path);
  ICECACHE_ASSIGN_OR_RETURN(f.tok, ReadJsonFile(f.json_path));
  ICECACHE_ASSIGN_OR_RETURN(f.config, ReadJsonFile(f.config_path));
  const json& model = Member(f.tok, "model");
  if (!model.is_object() || model.value("type", "") != "BPE" ||
      !Member(model, "vocab").is_object() || !Member(model, "merges").is_array()) {
    return Unsupported(tokenizer_json_path + ": only BPE tokenizers with vocab and merges");
  }
  return f;
}

// A special-token entry of tokenizer_config.json: a string, {"content": ...} or null/absent.
std::optional<std::string> ConfigToken(const json& config, const char* key) {
  const json& v = Member(config, key);
  if (v.is_string()) return v.get<std::string>();
  if (Member(v, "content").is_string()) return Member(v, "content").get<std::string>();
  return std::nullopt;
}

int64_t TokenIdOf(const json& tok, const std::string& text) {
  const json& added = Member(tok, "added_tokens");
  if (added.is_array()) {
    for (const json& t : added) {
      if (t.is_object() && t.value("content", "") == text) return t.value("id", int64_t{-1});
    }
  }
  const json& vocab = Member(Member(tok, "model"), "vocab");
  auto it = vocab.find(text);
  return it == vocab.end() ? -1 : it->get<int64_t>();
}

// Qwen convention: without a bos_token, config.json's bos_token_id is <|endoftext|>.
int64_t BosIdOf(const TokenizerFiles& f) {
  std::optional<std::string> bos = ConfigToken(f.config, "bos_token");
  return TokenIdOf(f.tok, bos ? *bos : std::string("<|endoftext|>"));
}

int64_t EosIdOf(const TokenizerFiles& f) {
  std::optional<std::string> eos = ConfigToken(f.config, "eos_token");
  return eos ? TokenIdOf(f.tok, *eos) : -1;
}

// tokenizer.ggml.pre from the tokenizer.json pre-tokenizer, as llama.cpp names them.
Result<std::string> DetectPreTokenizer(const TokenizerFiles& f) {
  const json& pre = Member(f.tok, "pre_tokenizer");
  std::vector<json> parts;
  if (pre.is_object() && pre.value("type", "") == "Sequence") {
    const json& seq = Member(pre, "pretokenizers");
    if (seq.is_array()) parts.assign(seq.begin(), seq.end());
  } else if (pre.is_object()) {
    parts.push_back(pre);
  }
  std::string regex;
  bool digits = false, byte_level_regex = false;
  for (const json& p : parts) {
    if (!p.is_object()) continue;
    const std::string type = p.value("type", "");
    const json& pattern = Member(Member(p, "pattern"), "Regex");
    if (type == "Split" && pattern.is_string()) {
      regex = pattern.get<std::string>();
    } else if (type == "Digits") {
      digits = p.value("individual_digits", false);
    } else if (type == "ByteLevel") {
      byte_level_regex = p.value("use_regex", true);
    }
  }
  const json& norm = Member(f.tok, "normalizer");
  const bool nfc = norm.is_object() && norm.value("type", "") == "NFC";
  if (regex.find("\\p{N}{1,3}") != std::string::npos && !nfc) return std::string("llama-bpe");
  if (regex.find("\\p{N}|") != std::string::npos && nfc) return std::string("qwen2");
  if (regex.empty() && digits && byte_level_regex) return std::string("smollm");
  if (regex.empty() && !digits && byte_level_regex) return std::string("gpt-2");
  return Unsupported(f.json_path +
                     ": pre-tokenizer not recognised as llama-bpe, qwen2, smollm "
                     "or gpt-2");
}

uint32_t LlamaFileType(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ8_0:
      return 7;
    case DType::kQ4_K:
      return 15;  // Q4_K_M
    case DType::kQ5_K:
      return 17;  // Q5_K_M
    case DType::kQ6_K:
      return 18;
    case DType::kBF16:
      return 32;
    case DType::kI32:
      break;
  }
  return 0;
}

Status AddTokenizerMetadata(const TinyModelSpec& spec, const TokenizerFiles& f, GgufWriter& w) {
  ICECACHE_ASSIGN_OR_RETURN(std::string pre, DetectPreTokenizer(f));
  constexpr int64_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;
  std::vector<std::string> tokens(static_cast<size_t>(spec.vocab));
  std::vector<int64_t> types(static_cast<size_t>(spec.vocab), 0);
  auto place = [&](int64_t id, const std::string& text, int64_t type) -> Status {
    if (id < 0 || id >= spec.vocab) {
      return InvalidArgument(f.json_path + ": token '" + text + "' has id " + std::to_string(id) +
                             " outside the model vocab of " + std::to_string(spec.vocab));
    }
    tokens[id] = text;
    types[id] = type;
    return Status::Ok();
  };
  const json& model = Member(f.tok, "model");
  for (const auto& [text, id] : Member(model, "vocab").items()) {
    if (!id.is_number_integer()) return Corrupt(f.json_path + ": vocab id of '" + text + "'");
    ICECACHE_RETURN_IF_ERROR(place(id.get<int64_t>(), text, kNormal));
  }
  const json& added = Member(f.tok, "added_tokens");
  if (added.is_array()) {
    for (const json& t : added) {
      if (!t.is_object()) return Corrupt(f.json_path + ": an added token is not an object");
      ICECACHE_RETURN_IF_ERROR(place(t.value("id", int64_t{-1}), t.value("content", ""),
                                     t.value("special", false) ? kControl : kUserDefined));
    }
  }
  for (int64_t i = 0; i < spec.vocab; ++i) {
    if (types[i] == 0) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = kUnused;
    }
  }
  std::vector<std::string> merges;
  for (const json& m : Member(model, "merges")) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return Corrupt(f.json_path + ": a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", pre);
  w.Add("tokenizer.ggml.tokens", GgufValue::StringArray(std::move(tokens)));
  w.Add("tokenizer.ggml.token_type", GgufValue::IntArray(GgufType::kInt32, std::move(types)));
  w.Add("tokenizer.ggml.merges", GgufValue::StringArray(std::move(merges)));
  const int64_t bos = BosIdOf(f), eos = EosIdOf(f);
  if (bos >= 0) w.AddU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
  if (eos >= 0) w.AddU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
  if (std::optional<std::string> pad = ConfigToken(f.config, "pad_token")) {
    const int64_t id = TokenIdOf(f.tok, *pad);
    if (id >= 0) w.AddU32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(id));
  }
  const json& add_bos = Member(f.config, "add_bos_token");
  w.AddBool("tokenizer.ggml.add_bos_token", add_bos.is_boolean() && add_bos.get<bool>());
  const json& add_eos = Member(f.config, "add_eos_token");
  if (add_eos.is_boolean()) w.AddBool("tokenizer.ggml.add_eos_token", add_eos.get<bool>());
  const json& chat_template = Member(f.config, "chat_template");
  if (chat_template.is_string()) {
    w.AddString("tokenizer.chat_template", chat_template.get<std::string>());
  }
  return Status::Ok();
}

}  // namespace

std::string TokenizerConfigPathFor(const std::string& tokenizer_json_path) {
  const fs::path p(tokenizer_json_path);
  if (p.filename() == "tokenizer.json") return (p.parent_path() / "tokenizer_config.json").string();
  std::string s = tokenizer_json_path;
  if (EndsWith(s, ".json")) s.resize(s.size() - 5);
  return s + "_config.json";
}

// ---- writers ---------------------------------------------------------------------------------

Result<std::string> TinyHfConfigJson(const TinyModelSpec& spec,
                                     const std::string& tokenizer_json_path) {
  ICECACHE_RETURN_IF_ERROR(ValidateTinyModelSpec(spec));
  ICECACHE_ASSIGN_OR_RETURN(TokenizerFiles f, LoadTokenizerFiles(tokenizer_json_path));
  const int64_t bos = BosIdOf(f), eos = EosIdOf(f);
  ordered_json c;
  c["architectures"] = ordered_json::array({spec.arch == "llama"   ? "LlamaForCausalLM"
                                            : spec.arch == "qwen2" ? "Qwen2ForCausalLM"
                                                                   : "Qwen3ForCausalLM"});
  c["model_type"] = spec.arch;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = bos >= 0 ? ordered_json(bos) : ordered_json(nullptr);
  c["eos_token_id"] = eos >= 0 ? ordered_json(eos) : ordered_json(nullptr);
  c["hidden_act"] = "silu";
  c["hidden_size"] = spec.hidden;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = spec.ffn;
  c["max_position_embeddings"] = spec.max_position_embeddings;
  c["num_attention_heads"] = spec.heads;
  c["num_hidden_layers"] = spec.layers;
  c["num_key_value_heads"] = spec.kv_heads;
  c["rms_norm_eps"] = spec.rms_eps;
  c["rope_theta"] = spec.rope_theta;
  c["tie_word_embeddings"] = spec.tie_word_embeddings;
  c["torch_dtype"] = "float32";
  c["use_cache"] = true;
  c["vocab_size"] = spec.vocab;
  if (spec.arch == "llama") {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
    if (spec.rope_scaling) {
      const Llama3RopeScaling& r = *spec.rope_scaling;
      c["rope_scaling"] = {{"factor", r.factor},
                           {"low_freq_factor", r.low_freq_factor},
                           {"high_freq_factor", r.high_freq_factor},
                           {"original_max_position_embeddings", r.original_max_position_embeddings},
                           {"rope_type", "llama3"}};
    }
  } else {
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = spec.layers;
  }
  if (spec.arch == "qwen3") {
    c["head_dim"] = spec.head_dim;
    c["attention_bias"] = false;
  }
  return c.dump(2) + "\n";
}

Status WriteTinyHfModel(const TinyModelSpec& spec, const std::string& dir,
                        const std::string& tokenizer_json_path) {
  ICECACHE_ASSIGN_OR_RETURN(std::string config, TinyHfConfigJson(spec, tokenizer_json_path));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError(dir + ": cannot create directory: " + ec.message());
  ICECACHE_RETURN_IF_ERROR(WriteTextFile(dir + "/config.json", config));

  SafetensorsWriter st;
  st.AddMetadata("format", "pt");
  for (const TinyTensor& t : TinyHfTensors(spec)) {
    const std::vector<float> data = TinyTensorData(spec, t);
    st.AddTensor(t.name, DType::kF32, t.shape, data.data());
  }
  ICECACHE_RETURN_IF_ERROR(st.WriteFile(dir + "/model.safetensors"));

  const std::pair<std::string, std::string> copies[] = {
      {tokenizer_json_path, dir + "/tokenizer.json"},
      {TokenizerConfigPathFor(tokenizer_json_path), dir + "/tokenizer_config.json"}};
  for (const auto& [from, to] : copies) {
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) return IoError("copy " + from + " -> " + to + ": " + ec.message());
  }
  return Status::Ok();
}

Status WriteTinyGgufModel(const TinyModelSpec& spec, const std::string& path,
                          const std::string& tokenizer_json_path, DType weight_dtype) {
  ICECACHE_RETURN_IF_ERROR(ValidateTinyModelSpec(spec));
  if (weight_dtype == DType::kI32) return InvalidArgument("tiny GGUF: weight dtype i32");
  ICECACHE_ASSIGN_OR_RETURN(TokenizerFiles tok, LoadTokenizerFiles(tokenizer_json_path));

  GgufWriter w;
  const std::string a = spec.arch;
  w.AddString("general.architecture", a);
  w.AddString("general.type", "model");
  w.AddString("general.name", spec.name);
  w.AddU32(a + ".block_count", static_cast<uint32_t>(spec.layers));
  w.AddU32(a + ".context_length", static_cast<uint32_t>(spec.max_position_embeddings));
  w.AddU32(a + ".embedding_length", static_cast<uint32_t>(spec.hidden));
  w.AddU32(a + ".feed_forward_length", static_cast<uint32_t>(spec.ffn));
  w.AddU32(a + ".attention.head_count", static_cast<uint32_t>(spec.heads));
  w.AddU32(a + ".attention.head_count_kv", static_cast<uint32_t>(spec.kv_heads));
  w.AddF32(a + ".rope.freq_base", static_cast<float>(spec.rope_theta));
  w.AddF32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(spec.rms_eps));
  if (a == "qwen3") {  // llama.cpp writes these when config.json has head_dim
    w.AddU32(a + ".attention.key_length", static_cast<uint32_t>(spec.head_dim));
    w.AddU32(a + ".attention.value_length", static_cast<uint32_t>(spec.head_dim));
  }
  if (a == "llama") {
    w.AddU32(a + ".vocab_size", static_cast<uint32_t>(spec.vocab));
    w.AddU32(a + ".rope.dimension_count", static_cast<uint32_t>(spec.head_dim));
  }
  w.AddU32("general.file_type", LlamaFileType(weight_dtype));
  if (IsQuantized(weight_dtype)) w.AddU32("general.quantization_version", 2);
  ICECACHE_RETURN_IF_ERROR(AddTokenizerMetadata(spec, tok, w));

  if (spec.rope_scaling) {
    const std::vector<float> freqs = Llama3RopeFreqs(spec);
    const int64_t shape[] = {static_cast<int64_t>(freqs.size())};
    w.AddTensor("rope_freqs.weight", DType::kF32, shape, freqs.data());
  }
  for (const TinyTensor& t : TinyHfTensors(spec)) {
    ICECACHE_ASSIGN_OR_RETURN(std::string name, GgufTensorName(t.name));
    std::vector<float> data = TinyTensorData(spec, t);
    const bool is_q = EndsWith(t.name, "q_proj.weight"), is_k = EndsWith(t.name, "k_proj.weight");
    if (a == "llama" && (is_q || is_k)) {
      std::vector<float> permuted(data.size());
      LlamaPermuteQkRows(data.data(), permuted.data(), t.shape[0], t.shape[1],
                         is_q ? spec.heads : spec.kv_heads);
      data = std::move(permuted);
    }
    const bool matrix = t.shape.size() == 2;
    const DType dtype =
        matrix && t.shape.back() % BlockElems(weight_dtype) == 0 ? weight_dtype : DType::kF32;
    if (dtype == DType::kF32) {
      w.AddTensor(name, DType::kF32, t.shape, data.data());
    } else {
      w.AddTensorF32(name, dtype, t.shape, data.data());
    }
  }
  return w.WriteFile(path);
}

}  // namespace icecache::testing
