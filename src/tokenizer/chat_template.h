// Chat templates of the supported families, chosen from the model's Jinja template string:
// ChatML (SmolLM2, Qwen), Llama-3 headers, Llama-2 [INST] with <<SYS>>, and Mistral [INST]
// (v0.1 form: no system role). We do not run Jinja; we recognise the family and reproduce what
// transformers' apply_chat_template renders for system/user/assistant turns.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "icecache/chat.h"
#include "icecache/status.h"

namespace icecache {

// kLlama31: Llama 3.1 / 3.2 / 3.3 (a system header with the knowledge cut-off and today's date
// always comes first).
enum class ChatFormat { kChatMl, kLlama3, kLlama31, kLlama2, kMistral };

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
  // The system prompt used when the conversation has none (ChatML only; may be empty).
  const std::string& default_system() const { return default_system_; }
  // The prompt text for `messages`; with add_generation_prompt the assistant header follows.
  // Fails (InvalidArgument) on an empty conversation, unknown roles, or a conversation the family
  // cannot express (Llama-2 / Mistral: roles must alternate user/assistant after an optional
  // system message; Mistral has no system role), as the Jinja templates do.
  Result<std::string> Apply(const std::vector<ChatMessage>& messages,
                            bool add_generation_prompt) const;

 private:
  ChatFormat format_ = ChatFormat::kChatMl;
  std::string bos_;
  std::string eos_;
  std::string default_system_;
  // kLlama31: the cut-off line's date, and the date written into the template ("" when the
  // template asks for today's date through strftime_now).
  std::string knowledge_date_;
  std::string fixed_date_;
};

}  // namespace icecache
