// Chat templates of the supported families, chosen from the model's Jinja template string:
// ChatML (SmolLM2, Qwen), Llama-3 headers, and Llama-2/Mistral [INST]. We do not run Jinja; we
// recognise the family and reproduce its output exactly for system/user/assistant turns.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "icecache/status.h"

namespace icecache {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatFormat { kChatMl, kLlama3, kLlama2 };

class ChatTemplate {
 public:
  // Recognises the family of `jinja` (the tokenizer.chat_template / chat_template string). A
  // default system prompt written into the template (as SmolLM2's and Qwen2.5's are) is kept.
  // Fails with a message naming what was not recognised.
  static Result<ChatTemplate> FromJinja(std::string_view jinja, std::string bos_token,
                                        std::string eos_token);
  static ChatTemplate Make(ChatFormat format, std::string bos_token, std::string eos_token,
                           std::string default_system = "");

  ChatFormat format() const { return format_; }
  // The prompt text for `messages`; with add_generation_prompt the assistant header follows.
  // Fails on unknown roles or a conversation the family cannot express.
  Result<std::string> Apply(const std::vector<ChatMessage>& messages,
                            bool add_generation_prompt) const;

 private:
  ChatFormat format_ = ChatFormat::kChatMl;
  std::string bos_;
  std::string eos_;
  std::string default_system_;
};

}  // namespace icecache
