#include "tokenizer/normalizer.h"

#include <utf8proc.h>
#include <cstdlib>

namespace icecache::tok {
namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  void Normalize(std::string& s) const override {
    if (s.empty()) return;
    // ASCII is invariant under every form; skip the library call for it.
    bool ascii = true;
    for (char c : s) {
      if (static_cast<unsigned char>(c) >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return;
    int options = UTF8PROC_STABLE;
    switch (form_) {
      case UnicodeForm::kNfc:
        options |= UTF8PROC_COMPOSE;
        break;
      case UnicodeForm::kNfd:
        options |= UTF8PROC_DECOMPOSE;
        break;
      case UnicodeForm::kNfkc:
        options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        break;
      case UnicodeForm::kNfkd:
        options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        break;
    }
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                            static_cast<utf8proc_ssize_t>(s.size()), &out,
                                            static_cast<utf8proc_option_t>(options));
    // Input is valid UTF-8 (the tokenizer repairs it first), so mapping cannot fail; keep the
    // text unchanged if it somehow does.
    if (n >= 0 && out != nullptr) s.assign(reinterpret_cast<const char*>(out), n);
    std::free(out);
  }

 private:
  UnicodeForm form_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string from, std::string to)
      : from_(std::move(from)), to_(std::move(to)) {}
  void Normalize(std::string& s) const override {
    if (from_.empty() || s.find(from_) == std::string::npos) return;
    s = ReplaceAll(s, from_, to_);
  }

 private:
  std::string from_, to_;
};

class RegexReplaceNormalizer final : public Normalizer {
 public:
  RegexReplaceNormalizer(std::shared_ptr<const Regex> re, std::string to)
      : re_(std::move(re)), to_(std::move(to)) {}
  void Normalize(std::string& s) const override {
    std::vector<Regex::Match> matches;
    re_->FindAll(s, matches);
    if (matches.empty()) return;
    std::string out;
    size_t prev = 0;
    for (const auto& m : matches) {
      out.append(s, prev, m.start - prev);
      out.append(to_);
      prev = m.end;
    }
    out.append(s, prev, std::string::npos);
    s = std::move(out);
  }

 private:
  std::shared_ptr<const Regex> re_;
  std::string to_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void Normalize(std::string& s) const override {
    for (const auto& step : steps_) step->Normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = from.empty() ? std::string_view::npos : s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::unique_ptr<Normalizer> MakeUnicodeNormalizer(UnicodeForm form) {
  return std::make_unique<UnicodeNormalizer>(form);
}
std::unique_ptr<Normalizer> MakePrependNormalizer(std::string prefix) {
  return std::make_unique<PrependNormalizer>(std::move(prefix));
}
std::unique_ptr<Normalizer> MakeReplaceNormalizer(std::string literal, std::string content) {
  return std::make_unique<ReplaceNormalizer>(std::move(literal), std::move(content));
}
std::unique_ptr<Normalizer> MakeRegexReplaceNormalizer(std::shared_ptr<const Regex> regex,
                                                       std::string content) {
  return std::make_unique<RegexReplaceNormalizer>(std::move(regex), std::move(content));
}
std::unique_ptr<Normalizer> MakeSequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) {
  return std::make_unique<SequenceNormalizer>(std::move(steps));
}

}  // namespace icecache::tok
