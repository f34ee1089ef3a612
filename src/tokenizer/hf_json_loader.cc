// Tokenizer::FromHfJson / FromHfFiles: a Hugging Face tokenizer.json (BPE model) and, optionally,
// tokenizer_config.json for bos/eos and add_bos_token.
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "tokenizer/hf_json_components.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace icecache {
namespace {

using nlohmann::json;
using tok::PipelineSpec;

Result<json> ParseJson(std::string_view text, const std::string& what) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Corrupt(what + ": not valid JSON");
  if (!j.is_object()) return Corrupt(what + ": expected a JSON object at the top level");
  return j;
}

Status ParseAddedTokens(const json& root, PipelineSpec& spec) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return Corrupt("tokenizer.json: added_tokens: expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string where = "tokenizer.json: added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer()) {
      return Corrupt(where + ": expected an object with an integer \"id\"");
    }
    tok::AddedToken a;
    a.id = t["id"].get<int32_t>();
    if (a.id < 0) return Corrupt(where + ": negative id");
    ICECACHE_ASSIGN_OR_RETURN(a.content, tok::GetString(t, "content", where));
    ICECACHE_ASSIGN_OR_RETURN(a.special, tok::GetBool(t, "special", false, where));
    ICECACHE_ASSIGN_OR_RETURN(a.lstrip, tok::GetBool(t, "lstrip", false, where));
    ICECACHE_ASSIGN_OR_RETURN(a.rstrip, tok::GetBool(t, "rstrip", false, where));
    ICECACHE_ASSIGN_OR_RETURN(a.single_word, tok::GetBool(t, "single_word", false, where));
    ICECACHE_ASSIGN_OR_RETURN(a.normalized, tok::GetBool(t, "normalized", !a.special, where));
    // Hugging Face gives a token that is also in the model vocabulary the model's id.
    const int32_t model_id = spec.vocab->Find(a.content);
    if (model_id >= 0) a.id = model_id;
    spec.added.Add(std::move(a));
  }
  return Status::Ok();
}

// The BPE model: vocab, merges ("a b" strings or ["a", "b"] pairs) and options.
Status ParseModel(const json& root, PipelineSpec& spec) {
  auto it = root.find("model");
  if (it == root.end() || it->is_null()) return Corrupt("tokenizer.json: missing \"model\"");
  const json& m = *it;
  const std::string where = "tokenizer.json: model";
  if (!m.is_object()) return Corrupt(where + ": expected an object");
  std::string type = "BPE";  // old files have no type; BPE is recognised by its merges
  if (m.contains("type")) {
    ICECACHE_ASSIGN_OR_RETURN(type, tok::GetString(m, "type", where));
  } else if (!m.contains("merges")) {
    return Unsupported(where + ": no \"type\" and no \"merges\"; only BPE models are supported");
  }
  if (type != "BPE") {
    return Unsupported(where + ": model type '" + type + "' is not supported (only BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m[key].is_null() &&
        !(m[key].is_string() && m[key].get<std::string>().empty())) {
      return Unsupported(where + ": \"" + key + "\" is not supported");
    }
  }
  if (!m.contains("vocab") || !m["vocab"].is_object()) {
    return Corrupt(where + ": missing object \"vocab\"");
  }
  auto vocab = std::make_shared<tok::Vocab>();
  for (const auto& [text, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return Corrupt(
          fmt::format("{}.vocab[\"{}\"]: expected a non-negative integer id", where, text));
    }
    vocab->Add(id.get<int32_t>(), text);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (m.contains("merges") && !m["merges"].is_null()) {
    if (!m["merges"].is_array()) return Corrupt(where + ".merges: expected an array");
    const json& list = m["merges"];
    merges.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const json& e = list[i];
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return Corrupt(where + ".merges[" + std::to_string(i) + "]: expected \"a b\"");
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        return Corrupt(where + ".merges[" + std::to_string(i) + "]: expected \"a b\" or [a, b]");
      }
    }
  }
  tok::BpeOptions opt;
  ICECACHE_ASSIGN_OR_RETURN(opt.byte_fallback, tok::GetBool(m, "byte_fallback", false, where));
  ICECACHE_ASSIGN_OR_RETURN(opt.fuse_unk, tok::GetBool(m, "fuse_unk", false, where));
  ICECACHE_ASSIGN_OR_RETURN(opt.ignore_merges, tok::GetBool(m, "ignore_merges", false, where));
  if (m.contains("unk_token") && !m["unk_token"].is_null()) {
    ICECACHE_ASSIGN_OR_RETURN(std::string unk, tok::GetString(m, "unk_token", where));
    opt.unk_id = vocab->Find(unk);
    if (opt.unk_id < 0) return Corrupt(where + ": unk_token '" + unk + "' is not in the vocab");
  }
  auto model = tok::BpeModel::FromMerges(*vocab, merges, opt);
  if (!model.ok()) return model.status().WithContext(where);
  spec.model = std::move(model).value();
  spec.vocab = std::move(vocab);
  return Status::Ok();
}

// Ids of a special token named in a post-processor.
Result<int32_t> SpecialId(const PipelineSpec& spec, const json& special_tokens,
                          const std::string& name, const std::string& where) {
  if (special_tokens.is_object() && special_tokens.contains(name)) {
    const json& e = special_tokens[name];
    if (e.contains("ids") && e["ids"].is_array() && e["ids"].size() == 1 &&
        e["ids"][0].is_number_integer()) {
      return e["ids"][0].get<int32_t>();
    }
  }
  if (const tok::AddedToken* t = spec.added.FindByContent(name)) return t->id;
  const int32_t id = spec.vocab->Find(name);
  if (id < 0) return Corrupt(where + ": special token '" + name + "' is unknown");
  return id;
}

Status ParsePostProcessor(const json& p, const std::string& where, PipelineSpec& spec) {
  if (p.is_null()) return Status::Ok();
  ICECACHE_ASSIGN_OR_RETURN(std::string type, tok::ComponentType(p, where));
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  if (type == "Sequence") {
    if (!p.contains("processors") || !p["processors"].is_array()) {
      return Corrupt(where + ": missing array \"processors\"");
    }
    for (size_t i = 0; i < p["processors"].size(); ++i) {
      ICECACHE_RETURN_IF_ERROR(ParsePostProcessor(
          p["processors"][i], where + ".processors[" + std::to_string(i) + "]", spec));
    }
    return Status::Ok();
  }
  if (type == "TemplateProcessing") {
    if (!p.contains("single") || !p["single"].is_array()) {
      return Corrupt(where + ": missing array \"single\"");
    }
    const json special = p.contains("special_tokens") ? p["special_tokens"] : json();
    bool seen_sequence = false;
    for (const json& item : p["single"]) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id")) {
        return Corrupt(where + ".single: expected Sequence or SpecialToken items");
      }
      ICECACHE_ASSIGN_OR_RETURN(std::string name,
                                tok::GetString(item["SpecialToken"], "id", where + ".single"));
      ICECACHE_ASSIGN_OR_RETURN(int32_t id, SpecialId(spec, special, name, where));
      (seen_sequence ? spec.suffix_ids : spec.prefix_ids).push_back(id);
    }
    return Status::Ok();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      if (!p.contains(key) || !p[key].is_array() || p[key].size() != 2 ||
          !p[key][1].is_number_integer()) {
        return Corrupt(where + ": expected \"" + key + "\": [token, id]");
      }
    }
    spec.prefix_ids.push_back(p["cls"][1].get<int32_t>());
    spec.suffix_ids.push_back(p["sep"][1].get<int32_t>());
    return Status::Ok();
  }
  return Unsupported(where + ": post-processor type '" + type + "' is not supported");
}

bool MentionsByteLevel(const json& j) {
  if (j.is_object()) {
    auto t = j.find("type");
    if (t != j.end() && t->is_string() && t->get<std::string>() == "ByteLevel") return true;
    for (const auto& [k, v] : j.items()) {
      if (MentionsByteLevel(v)) return true;
    }
  } else if (j.is_array()) {
    for (const auto& v : j) {
      if (MentionsByteLevel(v)) return true;
    }
  }
  return false;
}

// "bos_token": "<s>" or {"content": "<s>", ...}; empty if absent.
std::string ConfigToken(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

int32_t FindId(const PipelineSpec& spec, std::string_view text) {
  if (text.empty()) return -1;
  if (const tok::AddedToken* t = spec.added.FindByContent(text)) return t->id;
  return spec.vocab->Find(text);
}

Status ApplyConfig(const json& config, PipelineSpec& spec) {
  const std::string bos = ConfigToken(config, "bos_token");
  const std::string eos = ConfigToken(config, "eos_token");
  if (!bos.empty()) spec.bos_id = FindId(spec, bos);
  if (!eos.empty()) spec.eos_id = FindId(spec, eos);
  // transformers rebuilds the post-processor from add_bos_token / add_eos_token when present.
  auto set_flag = [&](const char* key, int32_t id, std::vector<int32_t>& ids) -> Status {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return Status::Ok();
    if (!it->is_boolean())
      return Corrupt(std::string("tokenizer_config.json: ") + key + ": expected true or false");
    if (id < 0) return Status::Ok();
    std::erase(ids, id);
    if (it->get<bool>()) ids.insert(ids.begin(), id);
    return Status::Ok();
  };
  ICECACHE_RETURN_IF_ERROR(set_flag("add_bos_token", spec.bos_id, spec.prefix_ids));
  ICECACHE_RETURN_IF_ERROR(set_flag("add_eos_token", spec.eos_id, spec.suffix_ids));
  return Status::Ok();
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError(path + ": read failed");
  return ss.str();
}

Result<std::unique_ptr<Tokenizer>> Build(std::string_view tokenizer_json,
                                         std::string_view config_json) {
  ICECACHE_ASSIGN_OR_RETURN(json root, ParseJson(tokenizer_json, "tokenizer.json"));
  PipelineSpec spec;
  ICECACHE_RETURN_IF_ERROR(ParseModel(root, spec));
  ICECACHE_RETURN_IF_ERROR(ParseAddedTokens(root, spec));
  const json none;
  auto field = [&](const char* key) -> const json& {
    auto it = root.find(key);
    return it == root.end() ? none : *it;
  };
  ICECACHE_ASSIGN_OR_RETURN(
      spec.normalizer, tok::ParseNormalizer(field("normalizer"), "tokenizer.json: normalizer"));
  ICECACHE_ASSIGN_OR_RETURN(
      spec.pre_tokenizer,
      tok::ParsePreTokenizer(field("pre_tokenizer"), "tokenizer.json: pre_tokenizer"));
  ICECACHE_ASSIGN_OR_RETURN(spec.decoder,
                            tok::ParseDecoder(field("decoder"), "tokenizer.json: decoder"));
  ICECACHE_RETURN_IF_ERROR(
      ParsePostProcessor(field("post_processor"), "tokenizer.json: post_processor", spec));
  spec.kind = MentionsByteLevel(field("pre_tokenizer")) || MentionsByteLevel(field("decoder"))
                  ? TokenizerKind::kByteLevelBpe
                  : TokenizerKind::kSentencePieceBpe;

  // Without a config, guess bos/eos from the post-processor and well-known names.
  if (!spec.prefix_ids.empty()) spec.bos_id = spec.prefix_ids.front();
  for (std::string_view name : {"<s>", "<|begin_of_text|>", "<bos>"}) {
    if (spec.bos_id < 0) spec.bos_id = FindId(spec, name);
  }
  for (std::string_view name : {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>"}) {
    if (spec.eos_id < 0) spec.eos_id = FindId(spec, name);
  }
  if (!config_json.empty()) {
    ICECACHE_ASSIGN_OR_RETURN(json config, ParseJson(config_json, "tokenizer_config.json"));
    ICECACHE_RETURN_IF_ERROR(ApplyConfig(config, spec));
  }
  return tok::MakePipelineTokenizer(std::move(spec));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromHfJson(std::string_view tokenizer_json,
                                                         std::string_view config_json) {
  try {
    return Build(tokenizer_json, config_json);
  } catch (const json::exception& e) {
    // Field access on an unexpected JSON type.
    return Corrupt(std::string("tokenizer.json: unexpected structure: ") + e.what());
  }
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromHfFiles(const std::string& tokenizer_json_path,
                                                          const std::string& config_path) {
  ICECACHE_ASSIGN_OR_RETURN(std::string text, ReadFile(tokenizer_json_path));
  std::string config;
  if (!config_path.empty()) {
    ICECACHE_ASSIGN_OR_RETURN(config, ReadFile(config_path));
  }
  auto r = FromHfJson(text, config);
  if (!r.ok()) return r.status().WithContext(tokenizer_json_path);
  return r;
}

}  // namespace icecache
