// Normalizers: text rewrites applied before pre-tokenization (Hugging Face `normalizers`): Unicode
// normalization forms, Prepend, Replace, and Sequence.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "icecache/status.h"
#include "tokenizer/regex.h"

namespace icecache::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `s` (valid UTF-8) in place.
  virtual void Normalize(std::string& s) const = 0;
};

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };

std::unique_ptr<Normalizer> MakeUnicodeNormalizer(UnicodeForm form);
// Prepends `prefix` to non-empty strings.
std::unique_ptr<Normalizer> MakePrependNormalizer(std::string prefix);
// Replaces every non-overlapping occurrence of `literal` by `content`.
std::unique_ptr<Normalizer> MakeReplaceNormalizer(std::string literal, std::string content);
// Replaces every match of `regex` by `content`.
std::unique_ptr<Normalizer> MakeRegexReplaceNormalizer(std::shared_ptr<const Regex> regex,
                                                       std::string content);
std::unique_ptr<Normalizer> MakeSequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps);

// Replaces every non-overlapping occurrence of `from` in `s` by `to` (left to right).
std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to);

}  // namespace icecache::tok
