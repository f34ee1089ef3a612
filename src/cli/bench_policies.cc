#include "cli/bench_policies.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "cli/stats_json.h"
#include "core/process.h"
#include "engine/engine_impl.h"

namespace icecache::cli {

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// What one policy measured in one round.
struct Sample {
  double tokens_per_second = 0;
  double fork_seconds = 0;  // KV copy plus index build (not part of decode)
  KvStats kv;
  std::vector<double> step_ms;    // every decode step's time
  std::vector<double> update_ms;  // the index update after each step
};

}  // namespace

Result<std::vector<PolicySpec>> ParsePolicyList(const std::string& list, const KvConfig& base) {
  std::vector<PolicySpec> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    PolicySpec spec{item, base};
    std::string name = item;
    if (const size_t at = name.find('@'); at != std::string::npos) {
      const std::string b = name.substr(at + 1);
      name.resize(at);
      if (b.empty() || b.find_first_not_of("0123456789") != std::string::npos || b.size() > 9) {
        return InvalidArgument("--kv-policies: '" + item + "': the budget after @ must be a " +
                               "positive number of tokens");
      }
      spec.kv.budget = std::stoi(b);
    }
    if (const size_t colon = name.find(':'); colon != std::string::npos) {
      spec.kv.rank = name.substr(colon + 1);
      name.resize(colon);
    }
    spec.kv.policy = name;
    if (Status s = spec.kv.Validate(); !s.ok()) {
      return InvalidArgument("--kv-policies: '" + item + "': " + s.message());
    }
    for (const PolicySpec& o : out) {
      if (o.label == item) return InvalidArgument("--kv-policies: '" + item + "' is listed twice");
    }
    out.push_back(std::move(spec));
  }
  if (out.empty()) return InvalidArgument("--kv-policies is empty");
  return out;
}

std::vector<std::string> PolicyNames(const std::vector<PolicySpec>& specs) {
  std::vector<std::string> names;
  for (const PolicySpec& s : specs) names.push_back(s.kv.policy);
  return names;
}

int RunPolicyBench(Engine& engine, const std::vector<int32_t>& tokens,
                   const PolicyBenchParams& params) {
  auto* impl = dynamic_cast<EngineImpl*>(&engine);
  if (impl == nullptr) return ReportError(Internal("--kv-policies needs the built-in engine"));
  // Policies this build does not implement are reported and left out.
  PolicyBenchParams p = params;
  p.policies.clear();
  for (const PolicySpec& spec : params.policies) {
    KvConfig kv = spec.kv;
    auto probe = impl->NewState(&kv);
    if (!probe.ok() && probe.status().code() == StatusCode::kUnsupported) {
      std::fprintf(stderr, "skipping policy %s: %s\n", spec.label.c_str(),
                   probe.status().message().c_str());
      continue;
    }
    if (!probe.ok()) return ReportError(probe.status());
    p.policies.push_back(spec);
  }
  if (p.policies.empty()) return ReportError(Unsupported("no policy of --kv-policies can run"));
  KvConfig full = p.policies.front().kv;
  full.policy = "full";
  if (!p.json) {
    std::printf(
        "per context: one full-attention prefill of (context - %d) prompt tokens, forked into "
        "each policy every round; %d decode steps per policy and round; %d rounds, policies "
        "interleaved (order rotating); medians over rounds\n\n",
        p.decode, p.decode, p.repeats);
    for (const PolicySpec& spec : p.policies) {
      std::printf("- %s: %s\n", spec.label.c_str(), spec.kv.Describe().c_str());
    }
    std::printf("\n");
    std::printf(
        "| context | policy | decode tok/s | ms/step | select ms | fetch ms | attend ms | "
        "rest ms | tokens attended | nodes visited | fork + index s | tok/s of each round |\n");
    std::printf(
        "|--------:|:-------|-------------:|--------:|----------:|---------:|----------:|"
        "--------:|----------------:|--------------:|---------------:|:--------------------|\n");
    std::fflush(stdout);
  }
  nlohmann::json rows = nlohmann::json::array();
  for (int ctx : p.contexts) {
    auto base = impl->NewState(&full);
    if (!base.ok()) return ReportError(base.status());
    GenerateRequest req;
    req.prompt_tokens.assign(tokens.begin(), tokens.begin() + (ctx - p.decode));
    req.ignore_eos = true;
    GenerateRequest prefill = req;
    prefill.max_tokens = 0;
    auto pre = impl->RunOn(**base, prefill, {});
    if (!pre.ok()) return ReportError(pre.status());
    req.max_tokens = p.decode + 1;  // the last sampled token needs no forward pass
    std::map<std::string, std::vector<Sample>> samples;
    const int n = static_cast<int>(p.policies.size());
    for (int r = 0; r < p.repeats; ++r) {
      for (int i = 0; i < n; ++i) {
        const std::string& name = p.policies[(i + r) % n].label;
        KvConfig kv = p.policies[(i + r) % n].kv;
        const double t0 = NowSeconds();
        auto fork = impl->ForkState(**base, kv);
        if (!fork.ok()) return ReportError(fork.status());
        Sample s;
        s.fork_seconds = NowSeconds() - t0;
        auto out = impl->RunOn(**fork, req, {});
        if (!out.ok()) return ReportError(out.status());
        s.tokens_per_second = out->stats.decode_tokens_per_second;
        s.kv = out->stats.kv;
        s.step_ms = out->stats.decode_step_ms;
        s.update_ms = out->stats.decode_step_update_ms;
        samples[name].push_back(s);
      }
    }
    for (const PolicySpec& spec : p.policies) {
      const std::string& name = spec.label;
      const std::vector<Sample>& v = samples[name];
      auto med = [&](auto field) {
        std::vector<double> x;
        for (const Sample& s : v) x.push_back(field(s));
        return Median(x);
      };
      const double tps = med([](const Sample& s) { return s.tokens_per_second; });
      const double sel = med([](const Sample& s) { return s.kv.select_seconds; });
      const double fetch = med([](const Sample& s) { return s.kv.fetch_seconds; });
      const double attend = med([](const Sample& s) { return s.kv.attend_seconds; });
      const double rest = med([](const Sample& s) { return s.kv.other_seconds; });
      const double fork = med([](const Sample& s) { return s.fork_seconds; });
      const KvStats& kv = v.back().kv;
      const double attended = kv.sparse_layers > 0 ? kv.tokens_attended : kv.tokens_attended_dense;
      std::string each;
      nlohmann::json runs = nlohmann::json::array();
      for (const Sample& s : v) {
        each += (each.empty() ? "" : " ") + fmt::format("{:.1f}", s.tokens_per_second);
        runs.push_back(s.tokens_per_second);
      }
      rows.push_back({{"context", ctx},
                      {"policy", name},
                      {"config", spec.kv.Describe()},
                      {"budget", spec.kv.budget},
                      {"decode_tokens_per_second", tps},
                      {"decode_ms_per_step", tps > 0 ? 1000.0 / tps : 0.0},
                      {"select_seconds", sel},
                      {"fetch_seconds", fetch},
                      {"attend_seconds", attend},
                      {"other_seconds", rest},
                      {"tokens_attended", attended},
                      {"nodes_visited", kv.nodes_visited},
                      {"fork_seconds", fork},
                      {"rounds_tokens_per_second", runs},
                      {"decode_step_ms", v.back().step_ms},  // the last round, step by step
                      {"decode_step_update_ms", v.back().update_ms},
                      {"kv", KvStatsToJson(kv)}});
      if (!p.json) {
        std::printf(
            "| %7d | %s | %12.2f | %7.2f | %9.3f | %8.3f | %9.3f | %7.2f | %15.1f | %13.1f | "
            "%14.2f | %s |\n",
            ctx, name.c_str(), tps, tps > 0 ? 1000.0 / tps : 0.0, 1e3 * sel, 1e3 * fetch,
            1e3 * attend, 1e3 * rest, attended, kv.nodes_visited, fork, each.c_str());
        std::fflush(stdout);
      }
    }
  }
  if (p.json) {
    nlohmann::json j;
    j["model"] = ModelInfoToJson(engine.info());
    j["results"] = rows;
    std::printf("%s\n", j.dump(2).c_str());
  }
  return 0;
}

}  // namespace icecache::cli
