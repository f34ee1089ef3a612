// A chat message, as passed to chat templates and the engine's chat API.
#pragma once

#include <string>

namespace icecache {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

}  // namespace icecache
