#include "tokenizer/gguf_loader.h"

#include "model/gguf/gguf_file.h"
#include "tokenizer/pipeline.h"

namespace icecache::tok {
namespace {

// GGUF token types (llama.cpp's llama_token_type).
constexpr int64_t kTypeNormal = 1;
constexpr int64_t kTypeUnknown = 2;
constexpr int64_t kTypeControl = 3;
constexpr int64_t kTypeUserDefined = 4;
constexpr int64_t kTypeUnused = 5;

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string KeyError(const GgufFile& gguf, const std::string& key, const std::string& what) {
  return gguf.path() + ": " + key + ": " + what;
}

Result<const std::vector<std::string>*> StringArray(const GgufFile& gguf, const std::string& key) {
  const GgufValue* v = gguf.Find(key);
  if (v == nullptr) return NotFound(KeyError(gguf, key, "missing key"));
  const std::vector<std::string>* a = v->AsStringArray();
  if (a == nullptr) return Corrupt(KeyError(gguf, key, "expected an array of strings"));
  return a;
}

// An optional token id key: -1 when absent; an error when out of range.
Result<int32_t> TokenIdKey(const GgufFile& gguf, const std::string& key, size_t n_tokens) {
  const GgufValue* v = gguf.Find(key);
  if (v == nullptr) return -1;
  std::optional<int64_t> id = v->AsInt();
  if (!id) return Corrupt(KeyError(gguf, key, "expected an integer"));
  if (*id == -1 || *id == 0xFFFFFFFFll) return -1;  // "none" as some converters write it
  if (*id < 0 || static_cast<uint64_t>(*id) >= n_tokens) {
    return Corrupt(KeyError(gguf, key,
                            "token id " + std::to_string(*id) + " is outside the vocabulary of " +
                                std::to_string(n_tokens)));
  }
  return static_cast<int32_t>(*id);
}

// The pre-tokenizer (and normalizer) of a byte-level vocabulary, by tokenizer.ggml.pre name.
Status ByteLevelPre(const GgufFile& gguf, std::string_view pre, PipelineSpec& spec,
                    BpeOptions& opt) {
  auto split = [](std::string_view pattern) {
    auto re = Regex::Compile(pattern);
    return MakeSplitPreTokenizer(std::move(re).value(), SplitBehavior::kIsolated, false);
  };
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    steps.push_back(MakeByteLevelPreTokenizer(false, true));
  } else if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3") {
    steps.push_back(split(kLlama3Pattern));
    steps.push_back(MakeByteLevelPreTokenizer(false, false));
    opt.ignore_merges = true;  // as Llama-3's tokenizer.json says
  } else if (pre == "qwen2") {
    spec.normalizer = MakeUnicodeNormalizer(UnicodeForm::kNfc);
    steps.push_back(split(kQwen2Pattern));
    steps.push_back(MakeByteLevelPreTokenizer(false, false));
  } else if (pre == "smollm") {
    steps.push_back(MakeDigitsPreTokenizer(true));
    steps.push_back(MakeByteLevelPreTokenizer(false, true));
  } else {
    return Unsupported(KeyError(gguf, "tokenizer.ggml.pre",
                                "pre-tokenizer '" + std::string(pre) + "' is not supported"));
  }
  spec.pre_tokenizer = MakeSequencePreTokenizer(std::move(steps));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& gguf, std::string_view pre) {
  ICECACHE_ASSIGN_OR_RETURN(std::string model, gguf.GetString("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama") {
    return Unsupported(
        KeyError(gguf, "tokenizer.ggml.model", "tokenizer model '" + model + "' is not supported"));
  }
  ICECACHE_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                            StringArray(gguf, "tokenizer.ggml.tokens"));
  const size_t n = tokens->size();
  if (n == 0 || n > INT32_MAX) {
    return Corrupt(KeyError(gguf, "tokenizer.ggml.tokens", "bad token count"));
  }
  std::vector<int64_t> types(n, kTypeNormal);
  if (const GgufValue* v = gguf.Find("tokenizer.ggml.token_type")) {
    auto t = v->AsIntArray();
    if (!t || t->size() != n) {
      return Corrupt(KeyError(gguf, "tokenizer.ggml.token_type",
                              "expected " + std::to_string(n) + " integers"));
    }
    types = std::move(*t);
  }

  PipelineSpec spec;
  auto vocab = std::make_shared<Vocab>();
  for (size_t i = 0; i < n; ++i) vocab->Add(static_cast<int32_t>(i), (*tokens)[i]);
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = types[i];
    if (t != kTypeUnknown && t != kTypeControl && t != kTypeUserDefined) continue;
    AddedToken a;
    a.id = static_cast<int32_t>(i);
    a.content = (*tokens)[i];
    a.special = t != kTypeUserDefined;
    spec.added.Add(std::move(a));
  }
  ICECACHE_ASSIGN_OR_RETURN(spec.bos_id, TokenIdKey(gguf, "tokenizer.ggml.bos_token_id", n));
  ICECACHE_ASSIGN_OR_RETURN(spec.eos_id, TokenIdKey(gguf, "tokenizer.ggml.eos_token_id", n));
  ICECACHE_ASSIGN_OR_RETURN(int32_t unk_id, TokenIdKey(gguf, "tokenizer.ggml.unknown_token_id", n));
  ICECACHE_ASSIGN_OR_RETURN(int32_t pad_id, TokenIdKey(gguf, "tokenizer.ggml.padding_token_id", n));
  (void)pad_id;  // validated only; padding is not used by generation
  ICECACHE_ASSIGN_OR_RETURN(bool add_bos,
                            gguf.GetBool("tokenizer.ggml.add_bos_token", model == "llama"));
  ICECACHE_ASSIGN_OR_RETURN(bool add_eos, gguf.GetBool("tokenizer.ggml.add_eos_token", false));
  if (add_bos && spec.bos_id >= 0) spec.prefix_ids.push_back(spec.bos_id);
  if (add_eos && spec.eos_id >= 0) spec.suffix_ids.push_back(spec.eos_id);

  BpeOptions opt;
  if (model == "gpt2") {
    ICECACHE_ASSIGN_OR_RETURN(const std::vector<std::string>* merge_strings,
                              StringArray(gguf, "tokenizer.ggml.merges"));
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merge_strings->size());
    for (size_t i = 0; i < merge_strings->size(); ++i) {
      const std::string& m = (*merge_strings)[i];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) {
        return Corrupt(KeyError(gguf, "tokenizer.ggml.merges",
                                "entry " + std::to_string(i) + " '" + m + "' is not \"a b\""));
      }
      merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
    std::string pre_name(pre);
    if (pre_name.empty()) {
      const GgufValue* v = gguf.Find("tokenizer.ggml.pre");
      if (v != nullptr && v->AsString() == nullptr) {
        return Corrupt(KeyError(gguf, "tokenizer.ggml.pre", "expected a string"));
      }
      pre_name = v != nullptr ? *v->AsString() : "default";
    }
    ICECACHE_RETURN_IF_ERROR(ByteLevelPre(gguf, pre_name, spec, opt));
    auto bpe = BpeModel::FromMerges(*vocab, merges, opt);
    if (!bpe.ok()) return bpe.status().WithContext(gguf.path() + ": tokenizer.ggml.merges");
    spec.model = std::move(bpe).value();
    spec.decoder = MakeByteLevelDecoder();
    spec.kind = TokenizerKind::kByteLevelBpe;
  } else {
    const GgufValue* sv = gguf.Find("tokenizer.ggml.scores");
    if (sv == nullptr) return NotFound(KeyError(gguf, "tokenizer.ggml.scores", "missing key"));
    auto scores = sv->AsFloatArray();
    if (!scores || scores->size() != n) {
      return Corrupt(
          KeyError(gguf, "tokenizer.ggml.scores", "expected " + std::to_string(n) + " floats"));
    }
    ICECACHE_ASSIGN_OR_RETURN(bool space_prefix,
                              gguf.GetBool("tokenizer.ggml.add_space_prefix", true));
    std::vector<bool> mergeable(n), unused(n);
    for (size_t i = 0; i < n; ++i) {
      mergeable[i] =
          types[i] == kTypeNormal || types[i] == kTypeUserDefined || types[i] == kTypeUnused;
      unused[i] = types[i] == kTypeUnused;
    }
    opt.byte_fallback = true;  // used when <0xXX> tokens exist
    opt.unk_id = unk_id;
    spec.model =
        BpeModel::FromScores(*vocab, *scores, std::move(mergeable), std::move(unused), opt);

    std::vector<std::unique_ptr<Normalizer>> norm;
    if (space_prefix) norm.push_back(MakePrependNormalizer(std::string(kSpace)));
    norm.push_back(MakeReplaceNormalizer(" ", std::string(kSpace)));
    spec.normalizer = MakeSequenceNormalizer(std::move(norm));
    std::vector<std::unique_ptr<Decoder>> dec;
    dec.push_back(MakeReplaceDecoder(Regex::CompileLiteral(kSpace).value(), " "));
    dec.push_back(MakeByteFallbackDecoder());
    dec.push_back(MakeFuseDecoder());
    if (space_prefix) dec.push_back(MakeStripDecoder(" ", 1, 0));
    spec.decoder = MakeSequenceDecoder(std::move(dec));
    spec.kind = TokenizerKind::kSentencePieceBpe;
  }
  spec.vocab = std::move(vocab);
  return MakePipelineTokenizer(std::move(spec));
}

}  // namespace icecache::tok

namespace icecache {

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  return tok::TokenizerFromGguf(gguf, "");
}

}  // namespace icecache
