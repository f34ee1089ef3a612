// Text <-> tokens for the eval tasks: the model's own tokenizer and chat template (so that
// lengths are measured in the model's tokens), or a stand-in in tests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "icecache/engine.h"
#include "icecache/status.h"

namespace icecache::eval {

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // Plain text to tokens: no BOS, special-token text is not parsed.
  virtual Result<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  virtual std::string Decode(std::span<const int32_t> tokens) const = 0;
  // Plain text as a document the model reads from its start: BOS (if the model uses one) first.
  virtual Result<std::vector<int32_t>> EncodeDocument(std::string_view text) const = 0;
  // The whole prompt of one sample: `user` as the user turn of the chat template (with the
  // generation prompt), followed by `answer_prefix` (the start of the assistant's reply). Models
  // without a chat template get "BOS user\nAnswer: answer_prefix".
  virtual Result<std::vector<int32_t>> EncodePrompt(const std::string& user,
                                                    const std::string& answer_prefix) const = 0;
};

// The engine's tokenizer and chat template. The engine must outlive the codec.
std::unique_ptr<TextCodec> MakeEngineCodec(const Engine& engine);

}  // namespace icecache::eval
