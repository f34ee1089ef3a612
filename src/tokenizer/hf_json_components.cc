#include "tokenizer/hf_json_components.h"

#include <vector>

namespace icecache::tok {

using nlohmann::json;

Result<std::string> GetString(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) return Corrupt(where + ": missing \"" + key + "\"");
  if (!it->is_string()) return Corrupt(where + "." + key + ": expected a string");
  return it->get<std::string>();
}

Result<bool> GetBool(const json& obj, const char* key, bool def, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_boolean()) return Corrupt(where + "." + key + ": expected true or false");
  return it->get<bool>();
}

Result<std::string> ComponentType(const json& j, const std::string& where) {
  if (!j.is_object()) return Corrupt(where + ": expected an object");
  return GetString(j, "type", where);
}

namespace {

Result<int> GetInt(const json& obj, const char* key, int def, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_number_integer()) return Corrupt(where + "." + key + ": expected an integer");
  return it->get<int>();
}

Result<const json*> GetArray(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) {
    return Corrupt(where + ": missing array \"" + key + "\"");
  }
  return &*it;
}

Result<SplitBehavior> ParseBehavior(const json& obj, const std::string& where) {
  ICECACHE_ASSIGN_OR_RETURN(std::string b, GetString(obj, "behavior", where));
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return Unsupported(where + ": split behavior '" + b + "' is not supported");
}

// Metaspace's prepend_scheme, or the older add_prefix_space flag.
Result<PrependScheme> ParsePrependScheme(const json& j, const std::string& where) {
  PrependScheme scheme = PrependScheme::kAlways;
  auto it = j.find("prepend_scheme");
  if (it != j.end() && !it->is_null()) {
    if (!it->is_string()) return Corrupt(where + ".prepend_scheme: expected a string");
    const std::string s = it->get<std::string>();
    if (s == "always") {
      scheme = PrependScheme::kAlways;
    } else if (s == "first") {
      scheme = PrependScheme::kFirst;
    } else if (s == "never") {
      scheme = PrependScheme::kNever;
    } else {
      return Unsupported(where + ": prepend_scheme '" + s + "' is not supported");
    }
  }
  ICECACHE_ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(j, "add_prefix_space", true, where));
  if (!add_prefix_space) scheme = PrependScheme::kNever;
  return scheme;
}

}  // namespace

Result<std::shared_ptr<const Regex>> ParsePattern(const json& j, const std::string& where) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    auto r = Regex::CompileLiteral(j["String"].get<std::string>());
    if (!r.ok()) return r.status().WithContext(where);
    return r;
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    auto r = Regex::Compile(j["Regex"].get<std::string>());
    if (!r.ok()) return r.status().WithContext(where);
    return r;
  }
  return Corrupt(where + ": expected {\"String\": ...} or {\"Regex\": ...}");
}

Result<std::unique_ptr<Normalizer>> ParseNormalizer(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  ICECACHE_ASSIGN_OR_RETURN(std::string type, ComponentType(j, where));
  if (type == "NFC") return MakeUnicodeNormalizer(UnicodeForm::kNfc);
  if (type == "NFD") return MakeUnicodeNormalizer(UnicodeForm::kNfd);
  if (type == "NFKC") return MakeUnicodeNormalizer(UnicodeForm::kNfkc);
  if (type == "NFKD") return MakeUnicodeNormalizer(UnicodeForm::kNfkd);
  if (type == "Prepend") {
    ICECACHE_ASSIGN_OR_RETURN(std::string prepend, GetString(j, "prepend", where));
    return MakePrependNormalizer(std::move(prepend));
  }
  if (type == "Replace") {
    ICECACHE_ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where));
    const json& pattern = j.contains("pattern") ? j["pattern"] : json();
    if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      return MakeReplaceNormalizer(pattern["String"].get<std::string>(), std::move(content));
    }
    ICECACHE_ASSIGN_OR_RETURN(auto re, ParsePattern(pattern, where + ".pattern"));
    return MakeRegexReplaceNormalizer(std::move(re), std::move(content));
  }
  if (type == "Sequence") {
    ICECACHE_ASSIGN_OR_RETURN(const json* list, GetArray(j, "normalizers", where));
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      ICECACHE_ASSIGN_OR_RETURN(
          auto n, ParseNormalizer((*list)[i], where + ".normalizers[" + std::to_string(i) + "]"));
      if (n) steps.push_back(std::move(n));
    }
    return MakeSequenceNormalizer(std::move(steps));
  }
  return Unsupported(where + ": normalizer type '" + type + "' is not supported");
}

Result<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  ICECACHE_ASSIGN_OR_RETURN(std::string type, ComponentType(j, where));
  if (type == "ByteLevel") {
    ICECACHE_ASSIGN_OR_RETURN(bool prefix, GetBool(j, "add_prefix_space", true, where));
    ICECACHE_ASSIGN_OR_RETURN(bool use_regex, GetBool(j, "use_regex", true, where));
    return MakeByteLevelPreTokenizer(prefix, use_regex);
  }
  if (type == "Split") {
    if (!j.contains("pattern")) return Corrupt(where + ": missing \"pattern\"");
    ICECACHE_ASSIGN_OR_RETURN(auto re, ParsePattern(j["pattern"], where + ".pattern"));
    ICECACHE_ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(j, where));
    ICECACHE_ASSIGN_OR_RETURN(bool invert, GetBool(j, "invert", false, where));
    return MakeSplitPreTokenizer(std::move(re), behavior, invert);
  }
  if (type == "Digits") {
    ICECACHE_ASSIGN_OR_RETURN(bool individual, GetBool(j, "individual_digits", false, where));
    return MakeDigitsPreTokenizer(individual);
  }
  if (type == "Metaspace") {
    ICECACHE_ASSIGN_OR_RETURN(std::string replacement, GetString(j, "replacement", where));
    ICECACHE_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(j, where));
    ICECACHE_ASSIGN_OR_RETURN(bool split, GetBool(j, "split", true, where));
    return MakeMetaspacePreTokenizer(std::move(replacement), scheme, split);
  }
  if (type == "Sequence") {
    ICECACHE_ASSIGN_OR_RETURN(const json* list, GetArray(j, "pretokenizers", where));
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      ICECACHE_ASSIGN_OR_RETURN(auto p, ParsePreTokenizer((*list)[i], where + ".pretokenizers[" +
                                                                          std::to_string(i) + "]"));
      if (p) steps.push_back(std::move(p));
    }
    return MakeSequencePreTokenizer(std::move(steps));
  }
  return Unsupported(where + ": pre-tokenizer type '" + type + "' is not supported");
}

Result<std::unique_ptr<Decoder>> ParseDecoder(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  ICECACHE_ASSIGN_OR_RETURN(std::string type, ComponentType(j, where));
  if (type == "ByteLevel") return MakeByteLevelDecoder();
  if (type == "ByteFallback") return MakeByteFallbackDecoder();
  if (type == "Fuse") return MakeFuseDecoder();
  if (type == "Replace") {
    if (!j.contains("pattern")) return Corrupt(where + ": missing \"pattern\"");
    ICECACHE_ASSIGN_OR_RETURN(auto re, ParsePattern(j["pattern"], where + ".pattern"));
    ICECACHE_ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where));
    return MakeReplaceDecoder(std::move(re), std::move(content));
  }
  if (type == "Strip") {
    ICECACHE_ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where));
    ICECACHE_ASSIGN_OR_RETURN(int start, GetInt(j, "start", 0, where));
    ICECACHE_ASSIGN_OR_RETURN(int stop, GetInt(j, "stop", 0, where));
    return MakeStripDecoder(std::move(content), start, stop);
  }
  if (type == "Metaspace") {
    ICECACHE_ASSIGN_OR_RETURN(std::string replacement, GetString(j, "replacement", where));
    ICECACHE_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(j, where));
    return MakeMetaspaceDecoder(std::move(replacement), scheme);
  }
  if (type == "Sequence") {
    ICECACHE_ASSIGN_OR_RETURN(const json* list, GetArray(j, "decoders", where));
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      ICECACHE_ASSIGN_OR_RETURN(
          auto d, ParseDecoder((*list)[i], where + ".decoders[" + std::to_string(i) + "]"));
      if (d) steps.push_back(std::move(d));
    }
    return MakeSequenceDecoder(std::move(steps));
  }
  return Unsupported(where + ": decoder type '" + type + "' is not supported");
}

}  // namespace icecache::tok
