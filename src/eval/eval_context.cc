#include "eval/eval_context.h"

#include <algorithm>
#include <cstdio>

namespace icecache::eval {

EvalContext::EvalContext(Engine& engine, ResultStore& store, RunSettings settings,
                         std::vector<PolicyRun> runs)
    : engine_(engine), store_(store), settings_(std::move(settings)), runs_(std::move(runs)) {}

EvalRecord EvalContext::NewRecord(const std::string& subtask, const std::string& id, double depth,
                                  int length, const PolicyRun& run) const {
  EvalRecord r;
  r.task = settings_.task;
  r.subtask = subtask;
  r.id = id;
  r.policy = run.policy;
  r.budget = run.budget;
  r.length = length;
  r.depth = depth;
  r.seed = settings_.seed;
  r.model = settings_.model;
  r.variant = settings_.variant;
  r.extrapolated = settings_.trained_context > 0 && length > settings_.trained_context;
  return r;
}

std::vector<PolicyRun> EvalContext::Pending(const std::string& subtask, const std::string& id,
                                            double depth, int length) const {
  std::vector<PolicyRun> out;
  for (const PolicyRun& run : runs_) {
    if (!Done(NewRecord(subtask, id, depth, length, run))) out.push_back(run);
  }
  return out;
}

Status EvalContext::Save(const EvalRecord& record) {
  ICECACHE_RETURN_IF_ERROR(store_.Append(record));
  ++new_runs_;
  return Status::Ok();
}

void EvalContext::MarkUnavailable(const PolicyRun& run, const std::string& reason) {
  std::fprintf(stderr, "note: KV policy %s is not available: %s\n", run.Label().c_str(),
               reason.c_str());
  late_unavailable_.emplace_back(run, reason);
  const std::string label = run.Label();
  std::erase_if(runs_, [&](const PolicyRun& r) { return r.Label() == label; });
}

}  // namespace icecache::eval
