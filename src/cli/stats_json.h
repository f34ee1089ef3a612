// JSON and text renderings of generation statistics.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "icecache/engine.h"

namespace icecache::cli {

nlohmann::json StatsToJson(const GenerateStats& s);
nlohmann::json ModelInfoToJson(const ModelInfo& i);
nlohmann::json KvStatsToJson(const KvStats& s);
// A multi-line report of per-decode-step KV accounting (--kv-stats).
std::string KvStatsText(const KvStats& s);
// One human line: "prompt 123 tok, 456.7 tok/s | decode 32 tok, 78.9 tok/s | KV 1.2 MiB ...".
std::string StatsLine(const GenerateStats& s);
// "1.5 MiB" style sizes.
std::string HumanBytes(int64_t bytes);

}  // namespace icecache::cli
