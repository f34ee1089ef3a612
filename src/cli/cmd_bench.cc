// icecache bench: prefill and decode speed at several context lengths on the real path
// (Engine::Generate with a pre-tokenized prompt, greedy decoding, EOS ignored).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/demo_document.h"
#include "cli/options.h"
#include "cli/stats_json.h"

namespace icecache::cli {

namespace {

struct BenchArgs {
  ModelOptions model;
  std::string contexts = "512,2048,8192";
  int decode = 32;
  int repeats = 3;
  bool json = false;
};

Result<std::vector<int>> ParseContexts(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int mult = 1;
    if (!item.empty() && (item.back() == 'K' || item.back() == 'k')) {
      mult = 1024;
      item.pop_back();
    }
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v <= 0) throw std::invalid_argument(item);
      out.push_back(v * mult);
    } catch (const std::exception&) {
      return InvalidArgument("--contexts: '" + item + "' is not a positive number");
    }
  }
  if (out.empty()) return InvalidArgument("--contexts is empty");
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Run(const BenchArgs& a) {
  auto contexts = ParseContexts(a.contexts);
  if (!contexts.ok()) return ReportError(contexts.status());
  const int max_ctx = *std::max_element(contexts->begin(), contexts->end());
  for (int c : *contexts) {
    if (c <= a.decode + 1) return ReportError(InvalidArgument("context too short for --decode"));
  }
  EngineOptions eo = a.model.ToEngineOptions();
  if (eo.context_size == 0) eo.context_size = max_ctx + 1;
  if (eo.context_size <= max_ctx) {
    return ReportError(InvalidArgument("--ctx-size must exceed the largest bench context"));
  }
  auto engine_or = Engine::Create(eo);
  if (!engine_or.ok()) return ReportError(engine_or.status());
  Engine& engine = **engine_or;

  // Real text as prompt tokens.
  const std::string text = MakeFillerText(max_ctx, 1234);
  auto tokens = engine.Tokenize(text, true, false);
  if (!tokens.ok()) return ReportError(tokens.status());
  if (static_cast<int>(tokens->size()) < max_ctx) {
    return ReportError(Internal("filler text too short for the benchmark"));
  }
  if (!a.json) {
    std::printf("model %s (%s), %s\n", engine.info().name.c_str(), engine.info().path.c_str(),
                engine.info().backend.c_str());
    std::printf(
        "each context: prefill (context - %d) prompt tokens, then decode %d tokens; "
        "median of %d runs\n\n",
        a.decode, a.decode, a.repeats);
    std::printf("| context | prompt tokens | prefill tok/s | decode tok/s | KV bytes |\n");
    std::printf("|--------:|--------------:|--------------:|-------------:|---------:|\n");
    std::fflush(stdout);
  }
  nlohmann::json rows = nlohmann::json::array();
  for (int ctx : *contexts) {
    GenerateRequest req;
    req.prompt_tokens.assign(tokens->begin(), tokens->begin() + (ctx - a.decode));
    req.max_tokens = a.decode + 1;  // the last sampled token needs no forward pass
    req.ignore_eos = true;
    std::vector<double> prefill, decode;
    int64_t kv = 0;
    for (int r = 0; r < a.repeats; ++r) {
      auto out = engine.Generate(req);
      if (!out.ok()) return ReportError(out.status());
      prefill.push_back(out->stats.prefill_tokens_per_second);
      decode.push_back(out->stats.decode_tokens_per_second);
      kv = out->stats.kv_bytes;
    }
    const double p = Median(prefill), d = Median(decode);
    rows.push_back({{"context", ctx},
                    {"prompt_tokens", ctx - a.decode},
                    {"decode_tokens", a.decode},
                    {"prefill_tokens_per_second", p},
                    {"decode_tokens_per_second", d},
                    {"kv_bytes", kv}});
    if (!a.json) {
      std::printf("| %7d | %13d | %13.1f | %12.1f | %8s |\n", ctx, ctx - a.decode, p, d,
                  HumanBytes(kv).c_str());
      std::fflush(stdout);
    }
  }
  if (a.json) {
    nlohmann::json j;
    j["model"] = ModelInfoToJson(engine.info());
    j["results"] = rows;
    std::printf("%s\n", j.dump(2).c_str());
  }
  return 0;
}

}  // namespace

Command AddBenchCommand(CLI::App& root) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* app = root.add_subcommand("bench", "Measure prefill and decode speed");
  AddModelOptions(*app, &args->model);
  app->add_option("--contexts", args->contexts, "context lengths, e.g. 512,2K,8K")
      ->capture_default_str();
  app->add_option("--decode", args->decode, "decode tokens per context")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_option("--repeats", args->repeats, "runs per context (the median is reported)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app->add_flag("--json", args->json, "print results as JSON");
  return {app, [args]() { return Run(*args); }};
}

}  // namespace icecache::cli
