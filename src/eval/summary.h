// The markdown summary of an eval: per policy and budget, the mean score at each length and its
// share of the full-KV score; rows for configurations that are not available yet; notes on
// documents cut to fit and on lengths beyond the trained context.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "eval/policy_runs.h"
#include "eval/record.h"

namespace icecache::eval {

struct SummaryInput {
  std::string task;
  std::string model;
  uint64_t seed = 0;
  std::string variant;
  int trained_context = 0;
  std::vector<EvalRecord> records;  // this task, model, seed and variant
  std::vector<PolicyRun> planned;   // rows shown even before they have results
  std::vector<std::pair<PolicyRun, std::string>> unavailable;
  std::vector<std::string> notes;  // extra lines under the title (commands, skipped documents)
};

// Records of `all` that belong to the task, model, seed and variant.
std::vector<EvalRecord> SelectRecords(const std::vector<EvalRecord>& all, const std::string& task,
                                      const std::string& model, uint64_t seed,
                                      const std::string& variant);

std::string SummaryMarkdown(const SummaryInput& in);

// (policy, budget) pairs in display order: full first, then by policy order of first
// appearance in `planned`, then any others, budgets ascending.
std::vector<std::pair<std::string, int>> DisplayConfigs(const SummaryInput& in);

}  // namespace icecache::eval
