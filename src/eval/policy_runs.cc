#include "eval/policy_runs.h"

#include <algorithm>

namespace icecache::eval {

std::string PolicyRun::Label() const {
  return policy == "full" ? policy : policy + "/" + std::to_string(budget);
}

std::vector<PolicyRun> ExpandPolicies(const std::vector<std::string>& policies,
                                      const std::vector<int>& budgets, const KvConfig& base) {
  std::vector<std::string> names = {"full"};
  for (const std::string& p : policies) {
    if (std::find(names.begin(), names.end(), p) == names.end()) names.push_back(p);
  }
  std::vector<PolicyRun> runs;
  for (const std::string& p : names) {
    if (p == "full") {
      PolicyRun r{p, 0, base};
      r.kv.policy = p;
      runs.push_back(r);
      continue;
    }
    // NAME:RANK runs policy NAME with --kv-rank RANK (its rows keep the whole label).
    const size_t colon = p.find(':');
    for (int b : budgets) {
      PolicyRun r{p, b, base};
      r.kv.policy = p.substr(0, colon);
      if (colon != std::string::npos) r.kv.rank = p.substr(colon + 1);
      r.kv.budget = b;
      runs.push_back(r);
    }
  }
  return runs;
}

Result<PolicyAvailability> ProbePolicies(Engine& engine, const std::vector<PolicyRun>& runs) {
  PolicyAvailability out;
  for (const PolicyRun& r : runs) {
    Result<std::unique_ptr<Session>> s = engine.NewSession(&r.kv);
    if (s.ok()) {
      out.available.push_back(r);
    } else if (s.status().code() == StatusCode::kUnsupported) {
      out.unavailable.emplace_back(r, s.status().message());
    } else {
      return InvalidArgument("KV policy " + r.Label() + ": " + s.status().message());
    }
  }
  return out;
}

}  // namespace icecache::eval
