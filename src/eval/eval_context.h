// What every task runner shares: the engine, the results file, the KV configurations to run,
// and the bookkeeping of new runs (so that --max-runs can stop a matrix midway).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "eval/policy_runs.h"
#include "eval/record.h"
#include "eval/result_store.h"
#include "icecache/engine.h"

namespace icecache::eval {

struct RunSettings {
  std::string task;
  std::string model;
  uint64_t seed = 0;
  int trained_context = 0;
  int64_t max_new_runs = -1;  // stop after this many new records (-1: no limit)
  std::string variant;        // EvalRecord::variant of every record
};

class EvalContext {
 public:
  EvalContext(Engine& engine, ResultStore& store, RunSettings settings,
              std::vector<PolicyRun> runs);

  Engine& engine() { return engine_; }
  const RunSettings& settings() const { return settings_; }
  const std::vector<PolicyRun>& runs() const { return runs_; }
  const ResultStore& store() const { return store_; }

  // A record with the identity fields filled in.
  EvalRecord NewRecord(const std::string& subtask, const std::string& id, double depth, int length,
                       const PolicyRun& run) const;
  bool Done(const EvalRecord& identity) const { return store_.Has(identity.Key()); }
  // The configurations of `runs()` not yet recorded for this sample.
  std::vector<PolicyRun> Pending(const std::string& subtask, const std::string& id, double depth,
                                 int length) const;

  // Appends a finished run; afterwards stopped() tells whether --max-runs was reached.
  Status Save(const EvalRecord& record);
  bool stopped() const {
    return settings_.max_new_runs >= 0 && new_runs_ >= settings_.max_new_runs;
  }
  int64_t new_runs() const { return new_runs_; }

  // A configuration the engine refused at fork time (Unsupported): it is skipped from then on.
  void MarkUnavailable(const PolicyRun& run, const std::string& reason);
  const std::vector<std::pair<PolicyRun, std::string>>& late_unavailable() const {
    return late_unavailable_;
  }

 private:
  Engine& engine_;
  ResultStore& store_;
  RunSettings settings_;
  std::vector<PolicyRun> runs_;
  int64_t new_runs_ = 0;
  std::vector<std::pair<PolicyRun, std::string>> late_unavailable_;
};

}  // namespace icecache::eval
