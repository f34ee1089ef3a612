#include "eval/task_source.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "eval/ruler.h"

namespace icecache::eval {

Result<std::unique_ptr<TaskSource>> TaskSource::Create(const TaskSpec& spec) {
  std::unique_ptr<TaskSource> src(new TaskSource());
  src->spec_ = spec;
  if (spec.task == "needle" || spec.task == "ruler") {
    if (!spec.task_files.empty()) {
      return InvalidArgument("--task FILE is for the leval and jsonl tasks");
    }
    if (!spec.haystack_dir.empty()) {
      ICECACHE_ASSIGN_OR_RETURN(src->essay_, Haystack::FromDirectory(spec.haystack_dir));
      src->notes_.push_back(fmt::format("Haystack: the text files of {}.", spec.haystack_dir));
    } else {
      src->essay_ = Haystack::Filler(spec.seed);
      src->notes_.push_back("Haystack: generated filler prose (no --haystack).");
    }
    src->noise_ = Haystack::Noise();
    for (const std::string& n : spec.subtasks) {
      const auto& all = RulerSubtasks();
      if (spec.task != "ruler") return InvalidArgument("--subtasks is for the ruler task");
      if (std::find(all.begin(), all.end(), n) == all.end()) {
        return InvalidArgument(
            fmt::format("--subtasks: unknown ruler subtask '{}' (expected one "
                        "of: {})",
                        n, fmt::join(all, ", ")));
      }
    }
    if (spec.task == "ruler" && spec.max_new_tokens > 0) {
      return InvalidArgument("--max-new-tokens: ruler subtasks size their own answers");
    }
    return src;
  }
  if (spec.task != "leval" && spec.task != "jsonl") {
    return InvalidArgument("unknown task '" + spec.task + "'");
  }
  if (spec.task_files.empty()) {
    return InvalidArgument(fmt::format("{} needs --task FILE (a JSONL task file)", spec.task));
  }
  for (const std::string& path : spec.task_files) {
    ICECACHE_ASSIGN_OR_RETURN(TaskFile f, LoadTaskFile(path));
    ScoreKind kind = ChooseScoreKind(f);
    if (!spec.scorer.empty() && !ParseScoreKind(spec.scorer, &kind)) {
      return InvalidArgument("--scorer: unknown scorer '" + spec.scorer +
                             "' (contains, contains_all, option, exact, number, topic, f1)");
    }
    src->notes_.push_back(fmt::format("Task file {}: {} documents, scorer {}.", path,
                                      f.documents.size(), ScoreKindName(kind)));
    src->files_.push_back(std::move(f));
    src->kinds_.push_back(kind);
  }
  return src;
}

Result<std::vector<Sample>> TaskSource::Samples(const TextCodec& codec, int length) {
  if (spec_.task == "needle") {
    NeedleTaskOptions o;
    o.samples = spec_.limit > 0 ? spec_.limit : 5;
    o.depths = spec_.depths;
    o.seed = spec_.seed;
    if (spec_.max_new_tokens > 0) o.max_new_tokens = spec_.max_new_tokens;
    return MakeNeedleSamples(codec, *essay_, length, o);
  }
  if (spec_.task == "ruler") {
    RulerOptions o;
    o.seed = spec_.seed;
    o.samples = spec_.limit > 0 ? spec_.limit : 4;
    o.subtasks = spec_.subtasks;
    o.essay = essay_.get();
    o.noise = noise_.get();
    return MakeRulerSamples(codec, o, length);
  }
  std::vector<Sample> out;
  for (size_t i = 0; i < files_.size(); ++i) {
    std::vector<Sample> s =
        MakeTaskSamples(files_[i], kinds_[i], spec_.max_new_tokens, spec_.limit);
    out.insert(out.end(), std::make_move_iterator(s.begin()), std::make_move_iterator(s.end()));
  }
  return out;
}

}  // namespace icecache::eval
