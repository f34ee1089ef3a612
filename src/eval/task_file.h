// Task files for `icecache eval leval|jsonl`: JSONL in the L-Eval format
// ({"input", "instructions": [...], "outputs": [...]}: one document, several questions) or the
// plain format ({"context", "question", "answers"}: one question per line). Errors name the
// file and line.
#pragma once

#include <string>
#include <vector>

#include "eval/sample.h"
#include "icecache/status.h"

namespace icecache::eval {

struct TaskQuestion {
  std::string question;
  std::vector<std::string> answers;
};

struct TaskDocument {
  int line = 0;  // 1-based line number in the file
  std::string id;
  std::string document;
  std::vector<TaskQuestion> questions;
  std::string evaluation;  // L-Eval "evaluation" field, if any
};

struct TaskFile {
  std::string path;
  std::string stem;  // file name without directory and extension: "quality"
  std::vector<TaskDocument> documents;
};

Result<TaskFile> LoadTaskFile(const std::string& path);

// The scorer a file calls for: by its L-Eval name (quality/tpo/coursera: option; topic_retrieval:
// topic; gsm: number), else by its "evaluation" field (rouge, f1: f1), else by its answers
// (all option letters: option; all numbers: number; otherwise contains).
ScoreKind ChooseScoreKind(const TaskFile& file);

// Default answer budget of a scorer (tokens).
int DefaultMaxNewTokens(ScoreKind kind);

// One sample per question, in file order, at most `limit` (0: all). The prompt puts the
// document first, so questions on one document share its prefill.
std::vector<Sample> MakeTaskSamples(const TaskFile& file, ScoreKind kind, int max_new_tokens,
                                    int limit);

}  // namespace icecache::eval
