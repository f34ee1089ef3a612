#include "tokenizer/added_vocab.h"

#include <utf8proc.h>
#include <algorithm>

#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace icecache::tok {
namespace {

// Unicode White_Space (what Rust's regex \s matches).
bool IsWhiteSpace(uint32_t cp) {
  return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Rust regex \w: alphabetic, marks, decimal numbers, connector punctuation, joiners.
bool IsWordChar(uint32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends at s[end) (s is valid UTF-8, end > 0).
uint32_t LastChar(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return DecodeAt(s, i, end - i);
}

uint32_t FirstChar(std::string_view s, size_t start) {
  return DecodeAt(s, start, CharLength(static_cast<unsigned char>(s[start])));
}

// Start of the whitespace run that ends at `end`.
size_t WhitespaceRunStart(std::string_view s, size_t end) {
  while (end > 0) {
    size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    if (!IsWhiteSpace(DecodeAt(s, i, end - i))) break;
    end = i;
  }
  return end;
}

// End of the whitespace run that starts at `start`.
size_t WhitespaceRunEnd(std::string_view s, size_t start) {
  while (start < s.size()) {
    const size_t n = CharLength(static_cast<unsigned char>(s[start]));
    if (!IsWhiteSpace(DecodeAt(s, start, n))) break;
    start += n;
  }
  return start;
}

}  // namespace

void AddedVocab::Add(AddedToken token) {
  if (token.content.empty()) return;
  for (auto& t : tokens_) {
    if (t.id == token.id || t.content == token.content) {
      t = std::move(token);
      Reindex();
      return;
    }
  }
  tokens_.push_back(std::move(token));
  by_id_[tokens_.back().id] = tokens_.size() - 1;
  by_content_[tokens_.back().content] = static_cast<int32_t>(tokens_.size() - 1);
}

void AddedVocab::Reindex() {
  by_id_.clear();
  by_content_.clear();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_id_[tokens_[i].id] = i;
    by_content_[tokens_[i].content] = static_cast<int32_t>(i);
  }
}

void AddedVocab::Build(const Normalizer* normalizer) {
  patterns_.clear();
  plain_ = Matcher();
  normalized_ = Matcher();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    std::string pattern = tokens_[i].content;
    if (tokens_[i].normalized && normalizer != nullptr) normalizer->Normalize(pattern);
    patterns_.push_back(pattern);
    if (pattern.empty()) continue;
    Matcher& m = tokens_[i].normalized ? normalized_ : plain_;
    m.by_first_byte[static_cast<unsigned char>(pattern[0])].push_back(static_cast<int>(i));
    m.empty = false;
  }
  for (Matcher* m : {&plain_, &normalized_}) {
    for (auto& list : m->by_first_byte) {
      std::stable_sort(list.begin(), list.end(),
                       [this](int a, int b) { return patterns_[a].size() > patterns_[b].size(); });
    }
  }
}

const AddedToken* AddedVocab::FindById(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocab::FindByContent(std::string_view content) const {
  auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

std::string_view AddedVocab::DecodeText(const AddedToken& t) const {
  const size_t i = static_cast<size_t>(&t - tokens_.data());
  return i < patterns_.size() ? std::string_view(patterns_[i]) : std::string_view(t.content);
}

void AddedVocab::FindSplits(std::string_view text, bool normalized, bool parse_special,
                            std::vector<Split>& out) const {
  const Matcher& m = matcher(normalized);
  if (m.empty) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;  // end of the last emitted split
  size_t pos = 0;           // where the search for the next match resumes
  while (pos < text.size()) {
    // Leftmost-longest: the first position with any match, and the longest pattern there.
    const auto& candidates = m.by_first_byte[static_cast<unsigned char>(text[pos])];
    int hit = -1;
    for (int idx : candidates) {
      const std::string& p = patterns_[idx];
      if (text.compare(pos, p.size(), p) == 0) {
        hit = idx;
        break;
      }
    }
    if (hit < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + patterns_[hit].size();
    pos = stop;
    const AddedToken& tok = tokens_[hit];
    if (tok.special && !parse_special) continue;
    if (tok.single_word) {
      const bool start_ok = start == 0 || !IsWordChar(LastChar(text, start));
      const bool stop_ok = stop == text.size() || !IsWordChar(FirstChar(text, stop));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) start = std::max(WhitespaceRunStart(text, start), start_offset);
    if (tok.rstrip) stop = WhitespaceRunEnd(text, stop);
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace icecache::tok
