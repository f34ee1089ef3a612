// Parsing of the comma lists that `icecache eval` takes (--lengths 2K,4K --budgets 64,128 ...).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "icecache/status.h"

namespace icecache::eval {

// Splits "a,b,,c" into {"a","b","c"} (empty items and surrounding spaces dropped).
std::vector<std::string> SplitList(std::string_view list);

// "2K,4K,1500,128k" -> {2048, 4096, 1500, 131072}; K = 1024 tokens. Each must be in [min, max].
Result<std::vector<int>> ParseLengths(std::string_view list, int min_tokens, int max_tokens);
// 2048 -> "2K", 1536 -> "1.5K", 1000 -> "1000".
std::string FormatLength(int tokens);

// "64,128" -> {64, 128}; every item a positive integer. `what` names the option in errors.
Result<std::vector<int>> ParsePositiveInts(std::string_view list, std::string_view what);
// "0,0.5,1" -> {0, 0.5, 1}; every item in [0, 1].
Result<std::vector<double>> ParseFractions(std::string_view list, std::string_view what);

}  // namespace icecache::eval
