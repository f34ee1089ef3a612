// A PCRE2 regular expression compiled for Unicode text (PCRE2_UTF | PCRE2_UCP, JIT when
// available), used by pre-tokenizer splits and Replace normalizers/decoders.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "icecache/status.h"

namespace icecache::tok {

class Regex {
 public:
  struct Match {
    size_t start;
    size_t end;
  };

  // Compiles `pattern` with Oniguruma's meaning of \s, \S, \w, \W, \h, \H (Hugging Face
  // tokenizers uses Oniguruma); a syntax error is InvalidArgument naming the pattern and position.
  static Result<std::shared_ptr<const Regex>> Compile(std::string_view pattern);
  // A regex matching `literal` exactly.
  static Result<std::shared_ptr<const Regex>> CompileLiteral(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-overlapping match in `text` (valid UTF-8), left to right. An empty match
  // is skipped and the search resumes one character later.
  void FindAll(std::string_view text, std::vector<Match>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  // Compiles `pattern` as PCRE2 syntax; `display` is what errors and pattern() show.
  static Result<std::shared_ptr<const Regex>> CompileRaw(std::string_view display,
                                                         std::string_view pattern);
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// Rewrites Oniguruma escapes whose PCRE2 meaning differs into explicit classes (exposed for
// tests).
std::string TranslateOnigurumaPattern(std::string_view pattern);

}  // namespace icecache::tok
