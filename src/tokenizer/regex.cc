#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace icecache::tok {
namespace {

// Per-thread match state: one ovector pair is all FindAll needs, and a JIT stack big enough
// for long whitespace runs under patterns such as \s+(?!\S).
struct MatchState {
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  pcre2_match_data* data;
  pcre2_match_context* context;
  pcre2_jit_stack* stack;
};

MatchState& ThreadMatchState() {
  thread_local MatchState state;
  return state;
}

// Unicode White_Space, which Oniguruma's \s matches (PCRE2's \s also takes U+180E).
constexpr std::string_view kSpaceSet =
    R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
// Oniguruma's \w: letters, marks, decimal digits, connector punctuation.
constexpr std::string_view kWordSet = R"(\p{L}\p{M}\p{Nd}\p{Pc})";

}  // namespace

std::string TranslateOnigurumaPattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  int class_depth = 0;
  bool quoted = false;  // inside \Q...\E
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (quoted) {
      if (c == '\\' && i + 1 < p.size() && p[i + 1] == 'E') {
        quoted = false;
        out.append("\\E");
        ++i;
      } else {
        out.push_back(c);
      }
      continue;
    }
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      const bool in_class = class_depth > 0;
      switch (e) {
        case 's':
          out.append(in_class ? std::string(kSpaceSet) : "[" + std::string(kSpaceSet) + "]");
          continue;
        case 'S':
          if (!in_class) {
            out.append("[^" + std::string(kSpaceSet) + "]");
            continue;
          }
          break;
        case 'w':
          out.append(in_class ? std::string(kWordSet) : "[" + std::string(kWordSet) + "]");
          continue;
        case 'W':
          if (!in_class) {
            out.append("[^" + std::string(kWordSet) + "]");
            continue;
          }
          break;
        case 'h':  // Oniguruma: a hexadecimal digit
          out.append(in_class ? "0-9a-fA-F" : "[0-9a-fA-F]");
          continue;
        case 'H':
          if (!in_class) {
            out.append("[^0-9a-fA-F]");
            continue;
          }
          break;
        case 'Q':
          quoted = true;
          break;
        default:
          break;
      }
      out.push_back('\\');
      out.push_back(e);
      continue;
    }
    if (c == '[') {
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member.
      size_t j = i + 1;
      if (j < p.size() && p[j] == '^') out.push_back(p[j++]);
      if (class_depth == 0 && j < p.size() && p[j] == ']') out.push_back(p[j++]);
      i = j - 1;
      ++class_depth;
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

Result<std::shared_ptr<const Regex>> Regex::Compile(std::string_view pattern) {
  return CompileRaw(pattern, TranslateOnigurumaPattern(pattern));
}

Result<std::shared_ptr<const Regex>> Regex::CompileRaw(std::string_view display,
                                                       std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgument("bad regex '" + std::string(display) + "' at offset " +
                           std::to_string(offset) + ": " + reinterpret_cast<char*>(message));
  }
  std::shared_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(display);
  re->code_ = code;
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const Regex>(std::move(re));
}

Result<std::shared_ptr<const Regex>> Regex::CompileLiteral(std::string_view literal) {
  // \Q...\E quotes everything except a literal "\E", which is spliced in escaped.
  std::string quoted = "\\Q";
  size_t pos = 0;
  while (true) {
    const size_t e = literal.find("\\E", pos);
    if (e == std::string_view::npos) {
      quoted.append(literal.substr(pos));
      break;
    }
    quoted.append(literal.substr(pos, e - pos));
    quoted.append("\\E\\\\E\\Q");
    pos = e + 2;
  }
  quoted.append("\\E");
  return CompileRaw(literal, quoted);
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view text, std::vector<Match>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchState& st = ThreadMatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, st.data, st.context)
                  : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data,
                                st.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
      // JIT resource limits: retry with the interpreter.
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, nullptr);
    }
    if (rc < 0) return;  // no further match (or a resource limit: the rest stays unmatched)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t start = ov[0], end = ov[1];
    if (end > start) {
      out.push_back({start, end});
      pos = end;
    } else {
      if (start >= text.size()) return;
      pos = start + CharLength(static_cast<unsigned char>(text[start]));
    }
  }
}

}  // namespace icecache::tok
