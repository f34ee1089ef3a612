#include "eval/answer_extract.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <set>

namespace icecache::eval {

namespace {

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Removes trailing characters found in `chars`.
std::string_view TrimRight(std::string_view s, std::string_view chars) {
  while (!s.empty() && chars.find(s.back()) != std::string_view::npos) s.remove_suffix(1);
  return s;
}

bool EndsWithWord(std::string_view s, std::string_view word) {
  if (s.size() < word.size() || s.substr(s.size() - word.size()) != word) return false;
  return s.size() == word.size() || !IsAlnum(s[s.size() - word.size() - 1]);
}

// The last word of lowercase text, apostrophes dropped ("isn't" -> "isnt").
std::string LastWord(std::string_view lower) {
  std::string w;
  size_t i = lower.size();
  while (i > 0 && !IsAlnum(lower[i - 1]) && lower[i - 1] != '\'') --i;
  while (i > 0 && (IsAlnum(lower[i - 1]) || lower[i - 1] == '\'')) {
    if (lower[i - 1] != '\'') w.insert(w.begin(), lower[i - 1]);
    --i;
  }
  return w;
}

constexpr std::array<std::string_view, 12> kNegations = {"not",   "never", "nor",    "isnt",
                                                         "wasnt", "arent", "werent", "doesnt",
                                                         "dont",  "didnt", "no",     "except"};

bool IsNegation(std::string_view word) {
  return std::find(kNegations.begin(), kNegations.end(), word) != kNegations.end();
}

// True when lowercase text ends with a phrase that introduces an answer ("the answer is",
// "answer:", "the correct option is").
bool EndsWithAnswerCue(std::string_view lower) {
  std::string_view s = TrimRight(lower, " \t\r\n:=-*(['\"");
  for (std::string_view verb : {"would be", "is", "was", "be"}) {
    if (EndsWithWord(s, verb)) {
      s = TrimRight(s.substr(0, s.size() - verb.size()), " \t\r\n:*");
      break;
    }
  }
  for (std::string_view cue : {"answer", "correct option", "correct choice", "best option",
                               "right option", "answer choice"}) {
    if (EndsWithWord(s, cue)) return true;
  }
  return false;
}

// End of the reply's first sentence: the first newline after some text, or a '.', '!' or '?'
// followed by a space, unless the period closes a lone option letter ("B. ...").
size_t FirstSentenceEnd(std::string_view r) {
  bool seen_text = false;
  for (size_t j = 0; j < r.size(); ++j) {
    const char c = r[j];
    if (c == '\n' && seen_text) return j;
    if (!IsSpace(c)) seen_text = true;
    if ((c == '.' || c == '!' || c == '?') && (j + 1 == r.size() || IsSpace(r[j + 1]))) {
      const bool lone_letter = j >= 1 && std::isupper(static_cast<unsigned char>(r[j - 1])) &&
                               (j < 2 || !IsAlnum(r[j - 2]));
      if (!lone_letter) return j;
    }
  }
  return r.size();
}

struct Mark {
  int index;
  int tier;  // 1 stated, 2 marked in the first sentence, 3 marked elsewhere, 4 bare mention
};

std::vector<Mark> FindOptionMarks(std::string_view r, int num_options) {
  std::vector<Mark> marks;
  const size_t sentence_end = FirstSentenceEnd(r);
  for (size_t i = 0; i < r.size(); ++i) {
    const char c = r[i];
    const bool upper = c >= 'A' && c < 'A' + num_options;
    const bool lower = c >= 'a' && c < 'a' + num_options;
    if (!upper && !lower) continue;
    const char prev = i > 0 ? r[i - 1] : ' ';
    const char next = i + 1 < r.size() ? r[i + 1] : ' ';
    if (IsAlnum(prev) || IsAlnum(next) || next == '\'' || prev == '\'') continue;
    const std::string before = Lower(r.substr(0, i));
    const std::string_view after = r.substr(i + 1);
    const size_t next_solid = after.find_first_not_of(" \t");
    const char after_char = next_solid == std::string_view::npos ? '\0' : after[next_solid];
    const std::string_view stripped = TrimRight(before, " \t*([\"'");
    const std::string_view open = TrimRight(before, " \t");
    const bool bracketed =
        (open.ends_with('(') || open.ends_with('[')) && (after_char == ')' || after_char == ']');
    if (IsNegation(LastWord(TrimRight(stripped, ":-=")))) continue;
    const int index = upper ? c - 'A' : c - 'a';
    if (EndsWithAnswerCue(before)) {
      marks.push_back({index, 1});
      continue;
    }
    if (lower && !bracketed) continue;  // a lone lowercase letter is a word ("a"), not an option
    const size_t line_start = stripped.rfind('\n');
    const bool starts_line =
        stripped.empty() || line_start == stripped.size() - 1 ||
        TrimRight(stripped.substr(line_start == std::string_view::npos ? 0 : line_start + 1),
                  " \t-")
            .empty();
    // "A good ..." is an article, not option A.
    const bool article = c == 'A' && std::islower(static_cast<unsigned char>(after_char)) &&
                         next_solid != std::string_view::npos && next_solid > 0;
    const bool punctuated = after_char == '\0' || after_char == '\n' || after_char == ')' ||
                            after_char == ']' || after_char == '.' || after_char == ':' ||
                            after_char == ',';
    const bool marked = bracketed || (starts_line && (punctuated || !article));
    if (marked) {
      marks.push_back({index, i < sentence_end ? 2 : 3});
    } else if (upper && !article) {
      marks.push_back({index, 4});
    }
  }
  return marks;
}

}  // namespace

std::vector<std::string> NormalizedWords(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty() && cur != "a" && cur != "an" && cur != "the") words.push_back(cur);
    cur.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\'') continue;
    // U+2019 (right single quotation mark) is an apostrophe too.
    if (c == 0xE2 && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x80 &&
        static_cast<unsigned char>(text[i + 2]) == 0x99) {
      i += 2;
      continue;
    }
    if (c >= 0x80 || std::isalnum(c)) {
      cur += static_cast<char>(std::tolower(c));
    } else {
      flush();
    }
  }
  flush();
  return words;
}

std::string NormalizeText(std::string_view text) {
  std::string out;
  for (const std::string& w : NormalizedWords(text)) {
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

bool MentionsPhrase(std::string_view text, std::string_view phrase) {
  const std::vector<std::string> t = NormalizedWords(text);
  const std::vector<std::string> p = NormalizedWords(phrase);
  if (p.empty() || p.size() > t.size()) return false;
  for (size_t i = 0; i + p.size() <= t.size(); ++i) {
    if (!std::equal(p.begin(), p.end(), t.begin() + static_cast<std::ptrdiff_t>(i))) continue;
    const bool negated = (i >= 1 && IsNegation(t[i - 1])) || (i >= 2 && IsNegation(t[i - 2]));
    if (!negated) return true;
  }
  return false;
}

std::optional<int> ExtractOption(std::string_view reply, int num_options,
                                 const std::vector<std::string>& options) {
  const std::vector<Mark> marks = FindOptionMarks(reply, num_options);
  // Without a stated answer, a reply that names three or more options enumerates them.
  std::set<int> mentioned;
  bool stated = false;
  for (const Mark& m : marks) {
    mentioned.insert(m.index);
    stated = stated || m.tier == 1;
  }
  if (!stated && mentioned.size() >= 3) return std::nullopt;
  for (int tier = 1; tier <= 3; ++tier) {
    std::set<int> named;
    for (const Mark& m : marks) {
      if (m.tier == tier) named.insert(m.index);
    }
    if (named.size() == 1) return *named.begin();
    if (named.size() > 1) return std::nullopt;
  }
  // No letter: the reply may quote an option's text instead.
  std::vector<int> quoted;
  for (size_t k = 0; k < options.size() && static_cast<int>(k) < num_options; ++k) {
    if (MentionsPhrase(reply, options[k])) quoted.push_back(static_cast<int>(k));
  }
  // An option whose text lies inside another quoted option's text ("Korvin" in "Korvin, Tr'en")
  // is quoted only through the longer one.
  std::vector<int> kept;
  for (int k : quoted) {
    const bool inside = std::any_of(quoted.begin(), quoted.end(), [&](int o) {
      return o != k && MentionsPhrase(options[o], options[k]) &&
             NormalizeText(options[o]) != NormalizeText(options[k]);
    });
    if (!inside) kept.push_back(k);
  }
  if (kept.size() == 1) return kept[0];
  return std::nullopt;
}

std::vector<std::string> ParseOptions(std::string_view question) {
  std::vector<std::string> options;
  size_t pos = 0;
  while (pos <= question.size()) {
    size_t end = question.find('\n', pos);
    if (end == std::string_view::npos) end = question.size();
    std::string_view line = Trim(question.substr(pos, end - pos));
    pos = end + 1;
    const char want = static_cast<char>('A' + options.size());
    size_t k = 0;
    if (!line.empty() && line[0] == '(') k = 1;
    if (line.size() > k + 1 && line[k] == want &&
        (line[k + 1] == ')' || (k == 0 && line[k + 1] == '.'))) {
      options.emplace_back(Trim(line.substr(k + 2)));
    }
    if (end == question.size()) break;
  }
  return options;
}

std::optional<int> ParseExpectedOption(std::string_view answer) {
  std::string_view a = Trim(answer);
  size_t k = 0;
  if (!a.empty() && a[0] == '(') k = 1;
  if (a.size() <= k || a[k] < 'A' || a[k] > 'Z') return std::nullopt;
  if (a.size() == k + 1) return k == 0 ? std::optional<int>(a[0] - 'A') : std::nullopt;
  const char next = a[k + 1];
  if ((k == 1 && next == ')') || (k == 0 && (next == ')' || next == '.' || next == ':'))) {
    return a[k] - 'A';
  }
  return std::nullopt;
}

namespace {

// Reads a number at r[i] (a digit) with comma thousands groups and a decimal part; returns its
// value and advances `i` past it.
double ReadNumber(std::string_view r, size_t& i) {
  std::string digits;
  while (i < r.size() && IsDigit(r[i])) digits += r[i++];
  while (i + 3 < r.size() && r[i] == ',' && IsDigit(r[i + 1]) && IsDigit(r[i + 2]) &&
         IsDigit(r[i + 3]) && (i + 4 >= r.size() || !IsDigit(r[i + 4]))) {
    digits.append(r.substr(i + 1, 3));
    i += 4;
  }
  if (i + 1 < r.size() && r[i] == '.' && IsDigit(r[i + 1])) {
    digits += r[i++];
    while (i < r.size() && IsDigit(r[i])) digits += r[i++];
  }
  return std::strtod(digits.c_str(), nullptr);
}

}  // namespace

std::optional<double> ParseNumber(std::string_view text) {
  std::string_view t = Trim(text);
  bool negative = false;
  if (!t.empty() && t[0] == '-') {
    negative = true;
    t.remove_prefix(1);
  }
  if (!t.empty() && t[0] == '$') t.remove_prefix(1);
  if (!t.empty() && (t.back() == '%' || t.back() == '.')) t.remove_suffix(1);
  if (t.empty() || !IsDigit(t[0])) return std::nullopt;
  size_t i = 0;
  const double v = ReadNumber(t, i);
  if (i != t.size()) return std::nullopt;
  return negative ? -v : v;
}

std::optional<double> ExtractNumber(std::string_view reply) {
  std::optional<double> stated, last;
  for (size_t i = 0; i < reply.size();) {
    const char prev = i > 0 ? reply[i - 1] : ' ';
    // Not inside a word, nor after the point of "1.2" (a version or a decimal already read).
    if (!IsDigit(reply[i]) || IsAlnum(prev) || (prev == '.' && i >= 2 && IsDigit(reply[i - 2]))) {
      ++i;
      continue;
    }
    size_t start = i;
    if (prev == '$') --start;
    const bool negative =
        start > 0 && reply[start - 1] == '-' && (start < 2 || !IsAlnum(reply[start - 2]));
    if (negative) --start;
    const double v = ReadNumber(reply, i) * (negative ? -1 : 1);
    const std::string before = Lower(reply.substr(0, start));
    if (IsNegation(LastWord(before))) continue;
    if (!stated &&
        (EndsWithAnswerCue(before) || TrimRight(before, " \t\r\n:*").ends_with("####"))) {
      stated = v;
    }
    last = v;
  }
  return stated ? stated : last;
}

std::string StatedAnswer(std::string_view reply) {
  const std::string lower = Lower(reply);
  for (std::string_view cue : {"answer is", "answer:"}) {
    const size_t at = lower.find(cue);
    if (at == std::string::npos) continue;
    std::string_view rest = reply.substr(at + cue.size());
    const size_t nl = rest.find('\n', rest.find_first_not_of(" \t\r\n") == std::string_view::npos
                                          ? 0
                                          : rest.find_first_not_of(" \t\r\n"));
    rest = Trim(rest.substr(0, nl));
    return std::string(TrimRight(rest, "."));
  }
  size_t pos = 0;
  while (pos < reply.size()) {
    size_t end = reply.find('\n', pos);
    if (end == std::string_view::npos) end = reply.size();
    const std::string_view line = Trim(reply.substr(pos, end - pos));
    if (!line.empty()) return std::string(line);
    pos = end + 1;
  }
  return "";
}

}  // namespace icecache::eval
