// JSON and text renderings of generation statistics.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "icecache/engine.h"

namespace icecache::cli {

nlohmann::json StatsToJson(const GenerateStats& s);
nlohmann::json ModelInfoToJson(const ModelInfo& i);
nlohmann::json KvStatsToJson(const KvStats& s);
// A multi-line report of per-decode-step KV accounting (--kv-stats). With the prompt's prefill
// time (> 0), the prompt's index build is also shown as a share of it.
std::string KvStatsText(const KvStats& s, double prefill_seconds = 0);
// One human line: "prompt 123 tok, 456.7 tok/s | decode 32 tok, 78.9 tok/s | KV 1.2 MiB ...".
std::string StatsLine(const GenerateStats& s);
// "1.5 MiB" style sizes.
std::string HumanBytes(int64_t bytes);

}  // namespace icecache::cli
