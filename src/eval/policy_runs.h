// The KV configurations of an eval matrix (policy x budget) and which of them the engine can run.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "icecache/engine.h"
#include "icecache/kv_config.h"

namespace icecache::eval {

struct PolicyRun {
  std::string policy;
  int budget = 0;  // 0 for full (it attends everything)
  KvConfig kv;

  // "full", "icecache/256"
  std::string Label() const;
};

// Full KV first (the reference every other score is compared with; added if missing), then each
// other policy once per budget. `base` supplies page size, sink, window and the other --kv-*
// settings; a policy written NAME:RANK (lychee:centroid) runs NAME with that --kv-rank, so that
// one eval compares rankings. Duplicate names are dropped.
std::vector<PolicyRun> ExpandPolicies(const std::vector<std::string>& policies,
                                      const std::vector<int>& budgets, const KvConfig& base);

struct PolicyAvailability {
  std::vector<PolicyRun> available;
  std::vector<std::pair<PolicyRun, std::string>> unavailable;  // with the engine's reason
};

// Opens a session of each configuration. Unsupported (not implemented yet) marks it
// unavailable; any other error (a bad name or setting) fails.
Result<PolicyAvailability> ProbePolicies(Engine& engine, const std::vector<PolicyRun>& runs);

}  // namespace icecache::eval
