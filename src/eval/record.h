// One finished evaluation run (a sample under one KV policy and budget at one length), as kept
// in the results JSONL.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "icecache/status.h"

namespace icecache::eval {

struct EvalRecord {
  // Identity: together these are the key a rerun uses to skip finished work.
  std::string task;     // needle, ruler, leval, jsonl, fidelity
  std::string subtask;  // needle, niah_single, quality, ...
  std::string id;       // sample id within the subtask
  std::string policy;   // full, streaming, quest, oracle, icecache, lychee
  int budget = 0;       // tokens attended per (layer, KV head); 0 for full
  int length = 0;       // context length asked for (tokens)
  double depth = -1;    // needle depth (0..1), -1 if none
  uint64_t seed = 0;
  std::string model;    // model name
  std::string variant;  // settings that change the samples or scores ("haystack=pg_essays")

  // Outcome.
  double score = 0;  // 0..1 (fidelity: top-1 agreement with full KV)
  std::string reply;
  std::string extracted;  // what the scorer read from the reply
  std::vector<std::string> answers;
  std::string scorer;
  int64_t prompt_tokens = 0;
  int64_t cut_tokens = 0;  // document tokens cut from the middle to fit the length
  int64_t generated_tokens = 0;
  bool extrapolated = false;  // length beyond the model's trained context (RoPE extrapolation)
  // Numbers that are not the same for every task: timings, KV statistics, fidelity metrics
  // (kl_mean, top1_agreement, ppl, ppl_full, first_divergence, ...).
  std::map<std::string, double> metrics;

  std::string Key() const;
};

// The key fields of a run: depth as a fixed 4-digit fraction so that it compares exactly.
std::string RecordKey(const std::string& task, const std::string& subtask, const std::string& id,
                      const std::string& policy, int budget, int length, double depth,
                      uint64_t seed, const std::string& model, const std::string& variant);

// One JSON object (no newline).
std::string RecordToJson(const EvalRecord& r);
// Fails with a message (without file or line: the caller adds them).
Result<EvalRecord> RecordFromJson(const std::string& line);

}  // namespace icecache::eval
