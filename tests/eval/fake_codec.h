// A tokenizer stand-in for generator tests that need no model: every run of non-space
// characters and every whitespace character is one token.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "eval/text_codec.h"

namespace icecache::eval::testing {

class FakeCodec : public TextCodec {
 public:
  Result<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int32_t> out;
    size_t i = 0;
    while (i < text.size()) {
      size_t j = i + 1;
      if (text[i] != ' ' && text[i] != '\n') {
        while (j < text.size() && text[j] != ' ' && text[j] != '\n') ++j;
      }
      out.push_back(Id(std::string(text.substr(i, j - i))));
      i = j;
    }
    return out;
  }
  std::string Decode(std::span<const int32_t> tokens) const override {
    std::string s;
    for (int32_t t : tokens) s += pieces_[static_cast<size_t>(t)];
    return s;
  }
  Result<std::vector<int32_t>> EncodeDocument(std::string_view text) const override {
    return Encode(text);
  }
  Result<std::vector<int32_t>> EncodePrompt(const std::string& user,
                                            const std::string& answer_prefix) const override {
    return Encode("<user> " + user + " <assistant> " + answer_prefix);
  }

 private:
  int32_t Id(const std::string& piece) const {
    auto [it, inserted] = ids_.emplace(piece, static_cast<int32_t>(pieces_.size()));
    if (inserted) pieces_.push_back(piece);
    return it->second;
  }
  mutable std::map<std::string, int32_t> ids_;
  mutable std::vector<std::string> pieces_;
};

}  // namespace icecache::eval::testing
