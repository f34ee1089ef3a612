// Added and special tokens, found in the text before normalization and BPE (Hugging Face
// AddedVocabulary): leftmost-longest matching, with the lstrip / rstrip / single_word /
// normalized flags of tokenizer.json.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab.h"

namespace icecache::tok {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;  // matched in normalized text (after the normalizer)
};

class AddedVocab {
 public:
  // A later token with the same content replaces the earlier one.
  void Add(AddedToken token);
  // Prepares the matchers; `normalizer` (may be null) gives the pattern of normalized tokens.
  void Build(const Normalizer* normalizer);

  // A part of the searched text: an added token, or text between tokens.
  struct Split {
    size_t start, end;
    int32_t id;  // -1 for text
  };
  // Splits `text` with the non-normalized tokens (normalized == false) or the normalized ones.
  // Special tokens are skipped unless `parse_special`. Splits cover `text`, except whitespace
  // swallowed by lstrip/rstrip, which belongs to the token's split.
  void FindSplits(std::string_view text, bool normalized, bool parse_special,
                  std::vector<Split>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* FindById(int32_t id) const;
  const AddedToken* FindByContent(std::string_view content) const;
  // The text Decode uses for the token (its normalized form for normalized tokens).
  std::string_view DecodeText(const AddedToken& t) const;

 private:
  struct Matcher {
    // Indices into tokens_ by first byte of the pattern, longest pattern first.
    std::vector<std::vector<int>> by_first_byte = std::vector<std::vector<int>>(256);
    bool empty = true;
  };
  const Matcher& matcher(bool normalized) const { return normalized ? normalized_ : plain_; }

  void Reindex();

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  TokenMap by_content_;                // content -> index into tokens_
  std::vector<std::string> patterns_;  // what each token matches in the text
  Matcher plain_, normalized_;
};

}  // namespace icecache::tok
