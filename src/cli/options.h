// Command-line options shared by the subcommands that run a model.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "icecache/engine.h"

namespace icecache::cli {

// Checks for whole-number options with plain messages ("--kv-budget: '0' is not a positive
// whole number"; CLI11's PositiveNumber prints its range as 308-digit floats).
const CLI::Validator& PositiveInt();
const CLI::Validator& NonNegativeInt();

struct ModelOptions {
  std::string model = "default";
  std::string device = "cpu";
  int threads = 0;
  int ctx_size = 0;
  int prefill_chunk = 512;
  KvConfig kv;
  std::string kv_offload = "auto";
  std::string kv_select = "auto";
  std::string kv_prefetch = "auto";
  std::string kv_route = "host";
  std::string index_update = "auto";
  bool kv_timing = false;
  int64_t device_mem_limit = 0;  // bytes; 0: no cap
  std::string synthetic;         // a random-weight model of this shape instead of --model

  EngineOptions ToEngineOptions() const;
};

// Commands that fork one prefill into several policies (eval, bench --kv-policies): with
// --kv-offload auto, turns the host tier on when a listed policy is sparse (it selects there).
void OffloadForPolicies(const std::vector<std::string>& policies, EngineOptions* options);

struct SamplingOptions {
  float temp = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  uint64_t seed = 0;

  SamplingParams ToParams() const;
};

// -m/--model, --synthetic, --device, --threads, --ctx-size, --prefill-chunk and the --kv-*
// options.
void AddModelOptions(CLI::App& app, ModelOptions* o);
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --seed.
void AddSamplingOptions(CLI::App& app, SamplingOptions* o);

// Prints "error: <message>" to stderr and returns the process exit code for it.
int ReportError(const Status& status);

}  // namespace icecache::cli
