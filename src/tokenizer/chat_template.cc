#include "tokenizer/chat_template.h"

#include <ctime>

#include "tokenizer/utf8.h"

namespace icecache {
namespace {

// Python's str.isspace() set, which Jinja's trim filter and str.strip() remove.
bool IsPythonSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// `s` without leading and trailing Python whitespace (invalid UTF-8 is kept as is).
std::string PyStrip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const size_t n = tok::ValidSequenceLength(s, begin);
    if (n == 0 || !IsPythonSpace(tok::DecodeAt(s, begin, n))) break;
    begin += n;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t i = end - 1;
    while (i > begin && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    const size_t n = tok::ValidSequenceLength(s, i);
    if (n != end - i || !IsPythonSpace(tok::DecodeAt(s, i, n))) break;
    end = i;
  }
  return std::string(s.substr(begin, end - begin));
}

// Undoes the escapes of a Jinja string literal (\n, \t, \', \", \\).
std::string UnescapeJinja(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char e = s[++i];
    switch (e) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      default:
        out.push_back(e);
        break;
    }
  }
  return out;
}

// The default system prompt written in a ChatML template: the text of a string literal
// '<|im_start|>system\n...<|im_end|>' that contains no expression. Empty if there is none.
std::string ChatMlDefaultSystem(std::string_view jinja) {
  constexpr std::string_view kStart = "<|im_start|>system";
  constexpr std::string_view kEnd = "<|im_end|>";
  size_t pos = 0;
  while ((pos = jinja.find(kStart, pos)) != std::string_view::npos) {
    size_t body = pos + kStart.size();
    pos = body;
    if (jinja.substr(body, 1) == "\n") {
      body += 1;
    } else if (jinja.substr(body, 2) == "\\n") {
      body += 2;
    } else {
      continue;
    }
    const size_t end = jinja.find(kEnd, body);
    if (end == std::string_view::npos) break;
    const std::string_view text = jinja.substr(body, end - body);
    // A quote would close the literal: the content is an expression, not a fixed prompt.
    if (text.empty() || text.find_first_of("'\"{}") != std::string_view::npos) continue;
    return UnescapeJinja(text);
  }
  return "";
}

Status CheckRoles(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return InvalidArgument("chat template: the conversation is empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant") {
      return InvalidArgument("chat template: message " + std::to_string(i) + " has unknown role '" +
                             r + "' (expected system, user or assistant)");
    }
  }
  return Status::Ok();
}

// The text after `marker` up to the next backslash or double quote (a Jinja string literal's
// content, e.g. the "December 2023" of "Cutting Knowledge Date: December 2023\n").
std::string QuotedAfter(std::string_view text, std::string_view marker) {
  const size_t at = text.find(marker);
  if (at == std::string_view::npos) return "";
  const size_t begin = at + marker.size();
  const size_t end = text.find_first_of("\\\"", begin);
  return std::string(text.substr(begin, end == std::string_view::npos ? 0 : end - begin));
}

// Today's date as strftime("%d %b %Y") writes it (what transformers' strftime_now gives).
std::string Today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%d %b %Y", &tm);
  return buf;
}

Status AlternationError(size_t i) {
  return InvalidArgument("chat template: message " + std::to_string(i) +
                         ": roles must alternate user/assistant/user/assistant/...");
}

}  // namespace

Result<ChatTemplate> ChatTemplate::FromJinja(std::string_view jinja, std::string bos_token,
                                             std::string eos_token) {
  if (jinja.find("<|im_start|>") != std::string_view::npos) {
    return Make(ChatFormat::kChatMl, std::move(bos_token), std::move(eos_token),
                ChatMlDefaultSystem(jinja));
  }
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) {
    if (jinja.find("Cutting Knowledge Date: ") != std::string_view::npos) {
      ChatTemplate t = Make(ChatFormat::kLlama31, std::move(bos_token), std::move(eos_token));
      t.knowledge_date_ = QuotedAfter(jinja, "Cutting Knowledge Date: ");
      // Llama 3.2 asks for today's date when the renderer offers strftime_now (transformers
      // does); Llama 3.1 writes a fixed date.
      if (jinja.find("strftime_now") == std::string_view::npos) {
        t.fixed_date_ = QuotedAfter(jinja, "set date_string = \"");
        if (t.fixed_date_.empty()) t.fixed_date_ = "26 Jul 2024";
      }
      if (t.knowledge_date_.empty()) {
        return Unsupported("chat template: Llama-3.1 form without a readable knowledge date");
      }
      return t;
    }
    return Make(ChatFormat::kLlama3, std::move(bos_token), std::move(eos_token));
  }
  if (jinja.find("[INST]") != std::string_view::npos) {
    const bool llama2 = jinja.find("<<SYS>>") != std::string_view::npos;
    return Make(llama2 ? ChatFormat::kLlama2 : ChatFormat::kMistral, std::move(bos_token),
                std::move(eos_token));
  }
  return Unsupported(
      "chat template not recognised: it has none of '<|im_start|>' (ChatML), "
      "'<|start_header_id|>' (Llama-3) or '[INST]' (Llama-2 / Mistral)");
}

ChatTemplate ChatTemplate::Make(ChatFormat format, std::string bos_token, std::string eos_token,
                                std::string default_system) {
  ChatTemplate t;
  t.format_ = format;
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  t.default_system_ = std::move(default_system);
  return t;
}

Result<std::string> ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) const {
  ICECACHE_RETURN_IF_ERROR(CheckRoles(messages));
  std::string out;
  switch (format_) {
    case ChatFormat::kChatMl:
      if (!default_system_.empty() && messages[0].role != "system") {
        out.append("<|im_start|>system\n").append(default_system_).append("<|im_end|>\n");
      }
      for (const auto& m : messages) {
        out.append("<|im_start|>").append(m.role).append("\n").append(m.content);
        out.append("<|im_end|>\n");
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::kLlama3:
      out = bos_;
      for (const auto& m : messages) {
        out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n");
        out.append(PyStrip(m.content)).append("<|eot_id|>");
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::kLlama31: {
      // The system header always comes first; a leading system message goes into it.
      size_t first = 0;
      std::string system;
      if (!messages.empty() && messages[0].role == "system") {
        system = PyStrip(messages[0].content);
        first = 1;
      }
      out = bos_;
      out.append("<|start_header_id|>system<|end_header_id|>\n\n");
      out.append("Cutting Knowledge Date: ").append(knowledge_date_).append("\n");
      out.append("Today Date: ").append(fixed_date_.empty() ? Today() : fixed_date_);
      out.append("\n\n").append(system).append("<|eot_id|>");
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n");
        out.append(PyStrip(m.content)).append("<|eot_id|>");
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    }
    case ChatFormat::kLlama2: {
      // An optional leading system message goes into the first user turn.
      const bool has_system = messages[0].role == "system";
      const size_t first = has_system ? 1 : 0;
      for (size_t i = first; i < messages.size(); ++i) {
        const size_t k = i - first;
        const ChatMessage& m = messages[i];
        if ((m.role == "user") != (k % 2 == 0)) return AlternationError(i);
        std::string content = m.content;
        if (k == 0 && has_system) {
          content = std::string("<<SYS>>\n")
                        .append(messages[0].content)
                        .append("\n<</SYS>>\n\n")
                        .append(content);
        }
        if (m.role == "user") {
          out.append(bos_).append("[INST] ").append(PyStrip(content)).append(" [/INST]");
        } else if (m.role == "assistant") {
          out.append(" ").append(PyStrip(content)).append(" ").append(eos_);
        }
        // A later system message in an assistant slot renders nothing, as in the template.
      }
      return out;
    }
    case ChatFormat::kMistral:
      out = bos_;
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if ((m.role == "user") != (i % 2 == 0)) return AlternationError(i);
        if (m.role == "user") {
          out.append("[INST] ").append(m.content).append(" [/INST]");
        } else if (m.role == "assistant") {
          out.append(m.content).append(eos_);
        } else {
          return InvalidArgument("chat template: message " + std::to_string(i) +
                                 ": this template supports only user and assistant roles");
        }
      }
      return out;
  }
  return Internal("chat template: unknown format");
}

}  // namespace icecache
