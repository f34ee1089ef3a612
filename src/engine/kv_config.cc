#include "icecache/kv_config.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string_view>

namespace icecache {

namespace {
constexpr std::array<std::string_view, 6> kPolicies = {"full",   "streaming", "quest",
                                                       "oracle", "icecache",  "lychee"};
}  // namespace

int KvConfig::ResolvedSink() const { return sink >= 0 ? sink : page_size; }

int KvConfig::ResolvedWindow() const {
  if (window >= 0) return window;
  if (policy == "streaming") return std::max(0, budget - ResolvedSink());
  // A quarter of the budget, whole pages, at least one page.
  return std::max(page_size, budget / 4 / page_size * page_size);
}

float KvConfig::ResolvedSearchRadius() const {
  if (search_radius >= 0) return search_radius;
  if (policy != "lychee") return 0.7f;
  return rank == "spread" ? 0.2f : 0.5f;
}

Status KvConfig::Validate() const {
  if (std::find(kPolicies.begin(), kPolicies.end(), policy) == kPolicies.end()) {
    return InvalidArgument("--kv-policy: unknown policy '" + policy +
                           "' (expected full, streaming, quest, oracle, icecache or lychee)");
  }
  if (page_size < 1 || page_size > 4096) return InvalidArgument("--kv-page must be in [1, 4096]");
  if (dense_layers < 0) return InvalidArgument("--kv-dense-layers must be >= 0");
  if (dtype != "auto" && dtype != "f32" && dtype != "f16" && dtype != "bf16") {
    return InvalidArgument("--kv-dtype must be auto, f32, f16 or bf16, not '" + dtype + "'");
  }
  if (fetch != "now" && fetch != "behind") {
    return InvalidArgument("--kv-fetch must be now or behind, not '" + fetch + "'");
  }
  if (working_set < 0) return InvalidArgument("--kv-working-set must be >= 0 (0: the default)");
  if (policy == "full") return Status::Ok();
  if (budget < 1) return InvalidArgument("--kv-budget must be positive");
  if (sink < -1 || window < -1) return InvalidArgument("--kv-sink and --kv-window must be >= 0");
  const int s = ResolvedSink(), w = ResolvedWindow();
  if (policy == "streaming") {
    if (s + w > budget) {
      return InvalidArgument("--kv-sink + --kv-window (" + std::to_string(s + w) +
                             ") exceed --kv-budget (" + std::to_string(budget) + ")");
    }
    return Status::Ok();
  }
  if (s + w + page_size > budget) {
    return InvalidArgument("--kv-budget " + std::to_string(budget) +
                           " leaves no room for a selected page after sink " + std::to_string(s) +
                           " and window " + std::to_string(w) + " (page " +
                           std::to_string(page_size) + ")");
  }
  if (reuse_layers < 1) return InvalidArgument("--kv-reuse-layers must be >= 1");
  if (rank != "auto" && rank != "soft" && rank != "centroid" && rank != "spread") {
    return InvalidArgument("--kv-rank must be auto, soft, centroid or spread, not '" + rank + "'");
  }
  if (policy == "lychee" && rank == "soft") {
    return InvalidArgument(
        "--kv-rank soft is icecache's tree search; lychee ranks by auto (its bound search), "
        "spread (its search ordered by the keys' spread) or centroid (page mean keys)");
  }
  if (policy != "lychee" && rank == "spread") {
    return InvalidArgument(
        "--kv-rank spread is lychee's; icecache's soft ranking (the default on the CPU) already "
        "orders its search by the keys' spread");
  }
  if (exact && (rank == "centroid" || rank == "spread")) {
    return InvalidArgument("--kv-exact is the bound search; it excludes --kv-rank " + rank);
  }
  if (search_radius != -1 && !(search_radius >= 0.0f && search_radius <= 1.0f)) {
    return InvalidArgument("--kv-search-radius must be in [0, 1]");
  }
  if (search_score != "logit" && search_score != "mass") {
    return InvalidArgument("--kv-search-score must be logit or mass, not '" + search_score + "'");
  }
  if (policy == "icecache" && search_score == "mass" && (exact || rank == "centroid")) {
    return InvalidArgument(
        "--kv-search-score mass is icecache's tree search (rank soft); it excludes " +
        std::string(exact ? "--kv-exact" : "--kv-rank centroid"));
  }
  if (search_leaves < 0) return InvalidArgument("--kv-search-leaves must be >= 0");
  if (oracle_unit != "page" && oracle_unit != "token") {
    return InvalidArgument("--kv-oracle-unit must be page or token");
  }
  if (oracle_score != "logit" && oracle_score != "mass") {
    return InvalidArgument("--kv-oracle-score must be logit or mass");
  }
  return Status::Ok();
}

std::string KvConfig::Describe() const {
  if (policy == "full") return "full (page " + std::to_string(page_size) + ", " + dtype + ")";
  std::string d = policy + " budget " + std::to_string(budget) + " (sink " +
                  std::to_string(ResolvedSink()) + ", window " + std::to_string(ResolvedWindow()) +
                  ", page " + std::to_string(page_size);
  if (dense_layers > 0) d += ", " + std::to_string(dense_layers) + " dense layers";
  if (fetch == "behind") d += ", fetch behind";
  if (working_set > 0) d += ", working set " + std::to_string(working_set) + " tokens";
  if ((policy == "icecache" || policy == "lychee") && exact) d += ", exact";
  if (policy == "icecache" && !exact && rank != "auto") d += ", rank " + rank;
  if (policy == "lychee" && rank != "auto") d += ", rank " + rank;
  const bool searches =
      (policy == "icecache" || policy == "lychee") && !exact && rank != "centroid";
  if (searches && search_radius >= 0) {
    char w[32];
    std::snprintf(w, sizeof(w), "%g", search_radius);
    d += std::string(", search radius ") + w;
  }
  if (policy == "icecache" && searches) {
    if (search_score == "mass") d += ", scored by mass";
    if (search_leaves > 0) d += ", " + std::to_string(search_leaves) + " candidate leaves";
  }
  if (policy == "icecache" && reuse_layers > 1) {
    d += ", layers share selections in groups of " + std::to_string(reuse_layers);
  }
  if (policy == "oracle") d += ", per " + oracle_unit;
  if (policy == "oracle" && oracle_unit == "token" && oracle_score == "mass") {
    d += " by attention mass";
  }
  return d + ", " + dtype + ")";
}

}  // namespace icecache
