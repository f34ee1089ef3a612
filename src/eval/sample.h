// One evaluation sample: a prompt built around a long document, the expected answers and the
// way to score a reply.
#pragma once

#include <string>
#include <vector>

namespace icecache::eval {

// How a reply is compared with the expected answers (see scorer.h).
enum class ScoreKind {
  kContains,     // any expected answer appears in the reply (whole words, not negated)
  kContainsAll,  // fraction of the expected answers that appear in the reply
  kOption,       // multiple choice: the one option the reply picks (letter or option text)
  kExact,        // the reply (or its stated answer) equals an expected answer
  kNumber,       // the number the reply states equals the expected number
  kTopic,        // the expected topic is named and no other topic of the same record is
  kF1,           // best unigram F1 against the expected answers
};

const char* ScoreKindName(ScoreKind kind);
// "contains", "contains_all", "option", "exact", "number", "topic", "f1"; false if unknown.
bool ParseScoreKind(const std::string& name, ScoreKind* out);

// The user turn is before + document + after; only `document` is ever cut to fit a length.
struct PromptParts {
  std::string before;
  std::string document;
  std::string after;
  std::string answer_prefix;  // start of the assistant's reply (RULER style); may be empty
};

struct Sample {
  std::string subtask;  // "needle", "niah_single", "quality", ...
  std::string id;       // unique within the subtask and length
  double depth = -1;    // needle depth 0..1; -1 where it does not apply
  PromptParts prompt;
  std::vector<std::string> answers;
  ScoreKind score_kind = ScoreKind::kContains;
  // kOption: the option texts (index 0 = A); kTopic: the other topics of the record.
  std::vector<std::string> choices;
  int max_new_tokens = 32;
};

}  // namespace icecache::eval
