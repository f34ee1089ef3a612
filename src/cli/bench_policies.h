// icecache bench --kv-policies: decode speed of several KV policies (or one policy at several
// ranks and budgets) in one run. For each
// context one sequence is prefilled with full attention; each round forks it into every policy
// (a copy of its KV, the policy's index built over it) and times --decode greedy steps. Rounds
// interleave the policies (the order rotates each round) so a noisy machine hits them alike;
// medians over the rounds are reported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "icecache/engine.h"

namespace icecache::cli {

// One entry of --kv-policies: NAME, NAME:RANK, NAME@BUDGET or NAME:RANK@BUDGET (for example
// icecache:centroid@2048); what it leaves out comes from the other --kv-* options.
struct PolicySpec {
  std::string label;  // as written
  KvConfig kv;
};

struct PolicyBenchParams {
  std::vector<int> contexts;
  std::vector<PolicySpec> policies;
  int decode = 32;
  int repeats = 3;
  bool json = false;
};

// Splits "full,icecache,quest@1024,lychee:centroid@256" and checks each entry (with base's other
// settings).
Result<std::vector<PolicySpec>> ParsePolicyList(const std::string& list, const KvConfig& base);
// The policy names of `specs` (for OffloadForPolicies).
std::vector<std::string> PolicyNames(const std::vector<PolicySpec>& specs);

// Runs the comparison on `engine` (the built-in engine; needs max_sequences >= 3) with prompts
// taken from the front of `tokens`; prints a markdown table or JSON. Returns the exit code.
int RunPolicyBench(Engine& engine, const std::vector<int32_t>& tokens,
                   const PolicyBenchParams& params);

}  // namespace icecache::cli
