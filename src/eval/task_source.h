// Where the samples of a generation task come from: generated needles and RULER-style tasks, or
// task files. Files and haystack folders are read when the source is created, so bad input fails
// before any model is loaded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eval/haystack.h"
#include "eval/needle_task.h"
#include "eval/sample.h"
#include "eval/task_file.h"
#include "eval/text_codec.h"

namespace icecache::eval {

struct TaskSpec {
  std::string task;  // needle, ruler, leval, jsonl
  uint64_t seed = 0;
  int limit = 0;                        // samples per length and subtask/file; 0: task default
  std::vector<double> depths;           // needle: explicit depths
  std::vector<std::string> subtasks;    // ruler: subset of RulerSubtasks()
  std::vector<std::string> task_files;  // leval, jsonl
  std::string haystack_dir;             // needle, ruler: essay haystack (else generated filler)
  std::string scorer;                   // leval, jsonl: override the chosen scorer
  int max_new_tokens = 0;               // 0: the task's default answer budget
};

class TaskSource {
 public:
  static Result<std::unique_ptr<TaskSource>> Create(const TaskSpec& spec);

  // The samples of one length (prompt plus answer budget within `length` tokens).
  Result<std::vector<Sample>> Samples(const TextCodec& codec, int length);
  // Lines for the summary: haystack, files and their scorers.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  TaskSource() = default;

  TaskSpec spec_;
  std::unique_ptr<Haystack> essay_;
  std::unique_ptr<Haystack> noise_;
  std::vector<TaskFile> files_;
  std::vector<ScoreKind> kinds_;
  std::vector<std::string> notes_;
};

}  // namespace icecache::eval
