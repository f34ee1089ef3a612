// Pre-tokenizers: split normalized text into pieces that BPE encodes independently, following
// Hugging Face `pre_tokenizers` (Split, ByteLevel, Digits, Metaspace, Sequence).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "icecache/status.h"
#include "tokenizer/regex.h"

namespace icecache::tok {

struct Piece {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the original input (Metaspace "first")
};

// How matches of a split pattern become pieces (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

enum class PrependScheme { kAlways, kFirst, kNever };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits (empty pieces are dropped).
  virtual void Apply(std::vector<Piece>& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> MakeSplitPreTokenizer(std::shared_ptr<const Regex> regex,
                                                    SplitBehavior behavior, bool invert);
// GPT-2 byte-level: optional leading space, optional split by the GPT-2 regex, then every byte
// mapped to its printable code point.
std::unique_ptr<PreTokenizer> MakeByteLevelPreTokenizer(bool add_prefix_space, bool use_regex);
// Splits out digits (\p{N}): each one alone, or runs of them.
std::unique_ptr<PreTokenizer> MakeDigitsPreTokenizer(bool individual_digits);
std::unique_ptr<PreTokenizer> MakeMetaspacePreTokenizer(std::string replacement,
                                                        PrependScheme scheme, bool split);
std::unique_ptr<PreTokenizer> MakeSequencePreTokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> steps);

// The split regexes of the model families we know by name.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace icecache::tok
