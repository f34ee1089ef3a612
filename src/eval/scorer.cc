#include "eval/scorer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "eval/answer_extract.h"

namespace icecache::eval {

const char* ScoreKindName(ScoreKind kind) {
  switch (kind) {
    case ScoreKind::kContains:
      return "contains";
    case ScoreKind::kContainsAll:
      return "contains_all";
    case ScoreKind::kOption:
      return "option";
    case ScoreKind::kExact:
      return "exact";
    case ScoreKind::kNumber:
      return "number";
    case ScoreKind::kTopic:
      return "topic";
    case ScoreKind::kF1:
      return "f1";
  }
  return "?";
}

bool ParseScoreKind(const std::string& name, ScoreKind* out) {
  for (ScoreKind k : {ScoreKind::kContains, ScoreKind::kContainsAll, ScoreKind::kOption,
                      ScoreKind::kExact, ScoreKind::kNumber, ScoreKind::kTopic, ScoreKind::kF1}) {
    if (name == ScoreKindName(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

double WordF1(std::string_view reply, std::string_view answer) {
  const std::vector<std::string> r = NormalizedWords(reply);
  const std::vector<std::string> a = NormalizedWords(answer);
  if (r.empty() || a.empty()) return 0;
  std::map<std::string, int> counts;
  for (const std::string& w : a) ++counts[w];
  int common = 0;
  for (const std::string& w : r) {
    auto it = counts.find(w);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0;
  const double precision = static_cast<double>(common) / static_cast<double>(r.size());
  const double recall = static_cast<double>(common) / static_cast<double>(a.size());
  return 2 * precision * recall / (precision + recall);
}

namespace {

ReplyScore ScoreOption(const Sample& s, std::string_view reply) {
  ReplyScore out;
  const int n = s.choices.size() >= 2 ? static_cast<int>(s.choices.size()) : 4;
  std::optional<int> expected;
  if (!s.answers.empty()) {
    expected = ParseExpectedOption(s.answers[0]);
    for (size_t k = 0; !expected && k < s.choices.size(); ++k) {
      if (NormalizeText(s.choices[k]) == NormalizeText(s.answers[0])) {
        expected = static_cast<int>(k);
      }
    }
  }
  const std::optional<int> got = ExtractOption(reply, n, s.choices);
  if (got) out.extracted = std::string(1, static_cast<char>('A' + *got));
  out.score = expected && got && *expected == *got ? 1 : 0;
  return out;
}

ReplyScore ScoreNumber(const Sample& s, std::string_view reply) {
  ReplyScore out;
  const std::optional<double> got = ExtractNumber(reply);
  if (got) out.extracted = fmt::format("{}", *got);
  for (const std::string& a : s.answers) {
    const std::optional<double> want = ParseNumber(a);
    if (!want) {
      // Not a number after all: fall back to an exact match of the stated answer.
      if (NormalizeText(StatedAnswer(reply)) == NormalizeText(a)) out.score = 1;
      continue;
    }
    if (got && std::fabs(*got - *want) <= 1e-6 * std::max(1.0, std::fabs(*want))) out.score = 1;
  }
  return out;
}

}  // namespace

ReplyScore ScoreReply(const Sample& s, std::string_view reply) {
  ReplyScore out;
  switch (s.score_kind) {
    case ScoreKind::kContains:
      for (const std::string& a : s.answers) {
        if (MentionsPhrase(reply, a)) {
          out.score = 1;
          out.extracted = a;
          break;
        }
      }
      return out;
    case ScoreKind::kContainsAll: {
      if (s.answers.empty()) return out;
      int found = 0;
      for (const std::string& a : s.answers) {
        if (MentionsPhrase(reply, a)) {
          ++found;
          out.extracted += (out.extracted.empty() ? "" : ", ") + a;
        }
      }
      out.score = static_cast<double>(found) / static_cast<double>(s.answers.size());
      return out;
    }
    case ScoreKind::kOption:
      return ScoreOption(s, reply);
    case ScoreKind::kExact: {
      const std::string stated = NormalizeText(StatedAnswer(reply));
      const std::string whole = NormalizeText(reply);
      out.extracted = StatedAnswer(reply);
      for (const std::string& a : s.answers) {
        const std::string want = NormalizeText(a);
        if (!want.empty() && (stated == want || whole == want)) out.score = 1;
      }
      return out;
    }
    case ScoreKind::kNumber:
      return ScoreNumber(s, reply);
    case ScoreKind::kTopic:
      for (const std::string& a : s.answers) {
        if (!MentionsPhrase(reply, a)) continue;
        // Naming every topic of the conversation is not naming the right one.
        const bool other = std::any_of(s.choices.begin(), s.choices.end(), [&](const auto& c) {
          return NormalizeText(c) != NormalizeText(a) && MentionsPhrase(reply, c);
        });
        if (!other) {
          out.score = 1;
          out.extracted = a;
        }
      }
      return out;
    case ScoreKind::kF1:
      for (const std::string& a : s.answers) out.score = std::max(out.score, WordF1(reply, a));
      return out;
  }
  return out;
}

}  // namespace icecache::eval
