// icecache bench --kv-policies: decode speed of several KV policies in one run. For each
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

struct PolicyBenchParams {
  std::vector<int> contexts;
  std::vector<std::string> policies;  // names; every other setting comes from `base`
  KvConfig base;
  int decode = 32;
  int repeats = 3;
  bool json = false;
};

// Splits "full,icecache,quest" and checks each name (with base's other settings).
Result<std::vector<std::string>> ParsePolicyList(const std::string& list, const KvConfig& base);

// Runs the comparison on `engine` (the built-in engine; needs max_sequences >= 3) with prompts
// taken from the front of `tokens`; prints a markdown table or JSON. Returns the exit code.
int RunPolicyBench(Engine& engine, const std::vector<int32_t>& tokens,
                   const PolicyBenchParams& params);

}  // namespace icecache::cli
