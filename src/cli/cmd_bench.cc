// icecache bench: prefill and decode speed at several context lengths on the real path
// (Engine::GenerateBatch with pre-tokenized prompts, greedy decoding, EOS ignored). With
// --batch N, N sequences are prefilled one after another and then decode in lockstep.
// Synthetic models (--synthetic) get seeded random token ids instead of tokenized text.
// --kv-policies compares the decode speed of several KV policies in one run (bench_policies.h).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "cli/bench_policies.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/stats_json.h"
#include "engine/engine_impl.h"
#include "eval/demo_document.h"

namespace icecache::cli {

namespace {

struct BenchArgs {
  ModelOptions model;
  std::string contexts = "512,2048,8192";
  int decode = 32;
  int repeats = 3;
  int batch = 1;
  bool shared_prompt = false;
  bool json = false;
  bool kv_stats = false;  // print each context's KV accounting (last run)
  std::string policies;   // --kv-policies: compare these policies
  std::string text_file;  // prompt text instead of the built-in filler
};

// --shared-prompt: one sequence is prefilled, then forked (a device copy of its KV) into the
// batch, which decodes in lockstep. Decode at batch N without N long prefills. Uses the
// engine's internal state API (EngineImpl) until the public API has batched sessions.
Result<std::vector<GenerateResult>> RunSharedPrompt(Engine& engine, const GenerateRequest& req,
                                                    int batch, double* prefill_tps) {
  auto* impl = dynamic_cast<EngineImpl*>(&engine);
  if (impl == nullptr) return Internal("--shared-prompt needs the built-in engine");
  ICECACHE_ASSIGN_OR_RETURN(auto base, impl->NewState(nullptr));
  GenerateRequest prefill_only = req;
  prefill_only.max_tokens = 0;
  ICECACHE_ASSIGN_OR_RETURN(GenerateResult first, impl->RunOn(*base, prefill_only, {}));
  *prefill_tps = first.stats.prefill_tokens_per_second;
  std::vector<std::unique_ptr<SequenceState>> owned;
  std::vector<SequenceState*> states = {base.get()};
  for (int i = 1; i < batch; ++i) {
    ICECACHE_ASSIGN_OR_RETURN(auto fork, impl->ForkState(*base, base->kv));
    states.push_back(fork.get());
    owned.push_back(std::move(fork));
  }
  // Every state holds the prompt: each re-feeds only its last token, then all decode together.
  const std::vector<GenerateRequest> reqs(static_cast<size_t>(batch), req);
  return impl->RunBatch(states, reqs, nullptr);
}

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
  std::vector<PolicySpec> policies;
  if (!a.policies.empty()) {
    auto list = ParsePolicyList(a.policies, a.model.kv);
    if (!list.ok()) return ReportError(list.status());
    policies = std::move(*list);
    if (a.batch != 1 || a.shared_prompt) {
      return ReportError(InvalidArgument("--kv-policies runs one sequence (no --batch)"));
    }
  }
  EngineOptions eo = a.model.ToEngineOptions();
  if (eo.context_size == 0) eo.context_size = max_ctx + 1;
  if (eo.context_size <= max_ctx) {
    return ReportError(InvalidArgument("--ctx-size must exceed the largest bench context"));
  }
  eo.max_sequences = std::max(eo.max_sequences, a.batch);
  // --kv-policies: the full prefill plus one fork, which may need twice the positional pages.
  if (!policies.empty()) eo.max_sequences = std::max(eo.max_sequences, 3);
  OffloadForPolicies(PolicyNames(policies), &eo);
  auto engine_or = Engine::Create(eo);
  if (!engine_or.ok()) return ReportError(engine_or.status());
  Engine& engine = **engine_or;

  std::vector<int32_t> tokens;
  if (!eo.synthetic.empty()) {
    // No tokenizer: seeded random ids (the speed of a step does not depend on them).
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> id(0, engine.info().vocab - 1);
    tokens.resize(static_cast<size_t>(max_ctx));
    for (int32_t& t : tokens) t = id(rng);
  } else {
    // Real text as prompt tokens: the built-in filler prose or --text-file.
    std::string text;
    if (a.text_file.empty()) {
      text = MakeFillerText(max_ctx, 1234);
    } else {
      std::ifstream in(a.text_file, std::ios::binary);
      if (!in) return ReportError(NotFound(a.text_file + ": cannot open text file"));
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    auto ids = engine.Tokenize(text, true, false);
    if (!ids.ok()) return ReportError(ids.status());
    if (static_cast<int>(ids->size()) < max_ctx) {
      return ReportError(InvalidArgument(
          (a.text_file.empty() ? std::string("filler text") : a.text_file) + " has " +
          std::to_string(ids->size()) + " tokens, fewer than the largest context (" +
          std::to_string(max_ctx) + ")"));
    }
    tokens = std::move(*ids);
  }
  if (!a.json) {
    std::printf("model %s (%s), %s\n", engine.info().name.c_str(), engine.info().path.c_str(),
                engine.info().backend.c_str());
  }
  if (!policies.empty()) {
    PolicyBenchParams p{*contexts, policies, a.decode, a.repeats, a.json};
    return RunPolicyBench(engine, tokens, p);
  }
  if (!a.json) {
    std::printf(
        "each context: %d sequence(s), each prefilled with (context - %d) prompt tokens, then "
        "%d decode steps; median of %d runs\n\n",
        a.batch, a.decode, a.decode, a.repeats);
    std::printf(
        "| context | batch | prompt tokens | prefill tok/s | decode ms/step | steady ms/step | "
        "decode tok/s | KV bytes |\n");
    std::printf(
        "|--------:|------:|--------------:|--------------:|---------------:|---------------:|"
        "-------------:|---------:|\n");
    std::fflush(stdout);
  }
  // One untimed pass of the same shape (short prompt): loads kernels, makes GEMM plans and
  // captures the decode graph of this batch size, so the timed runs measure steady state.
  {
    GenerateRequest warm;
    const int min_ctx = *std::min_element(contexts->begin(), contexts->end());
    warm.prompt_tokens.assign(tokens.begin(), tokens.begin() + std::min(256, min_ctx - a.decode));
    warm.max_tokens = 4;
    warm.ignore_eos = true;
    double unused = 0;
    auto out = a.shared_prompt ? RunSharedPrompt(engine, warm, a.batch, &unused)
                               : engine.GenerateBatch(std::vector<GenerateRequest>(a.batch, warm));
    if (!out.ok()) return ReportError(out.status());
  }
  nlohmann::json rows = nlohmann::json::array();
  for (int ctx : *contexts) {
    GenerateRequest req;
    req.prompt_tokens.assign(tokens.begin(), tokens.begin() + (ctx - a.decode));
    req.max_tokens = a.decode + 1;  // the last sampled token needs no forward pass
    req.ignore_eos = true;
    const std::vector<GenerateRequest> reqs(static_cast<size_t>(a.batch), req);
    std::vector<double> prefill, decode, steady, last_steps, last_updates;
    int64_t kv = 0;
    KvStats kv_stats;
    double prefill_seconds = 0;  // the last run's first sequence (its prompt's index belongs to it)
    for (int r = 0; r < a.repeats; ++r) {
      double shared_tps = 0;
      auto out = a.shared_prompt ? RunSharedPrompt(engine, req, a.batch, &shared_tps)
                                 : engine.GenerateBatch(reqs);
      if (!out.ok()) return ReportError(out.status());
      double p = 0;
      for (const GenerateResult& g : *out) p += g.stats.prefill_tokens_per_second;
      prefill.push_back(a.shared_prompt ? shared_tps : p / static_cast<double>(out->size()));
      // Steps per second of the shared lockstep decode (every sequence advances per step).
      decode.push_back(out->front().stats.decode_tokens_per_second);
      steady.push_back(out->front().stats.decode_step_ms_steady);
      kv = 0;
      for (const GenerateResult& g : *out) kv += g.stats.kv_bytes;
      kv_stats = out->front().stats.kv;
      prefill_seconds = out->front().stats.prefill_seconds;
      last_steps = out->front().stats.decode_step_ms;
      last_updates = out->front().stats.decode_step_update_ms;
    }
    const double p = Median(prefill), d = Median(decode);
    const double ms = d > 0 ? 1000.0 / d : 0.0, steady_ms = Median(steady);
    rows.push_back({{"context", ctx},
                    {"batch", a.batch},
                    {"prompt_tokens", ctx - a.decode},
                    {"decode_tokens", a.decode},
                    {"prefill_tokens_per_second", p},
                    {"decode_tokens_per_second", d},
                    {"decode_ms_per_step", ms},
                    {"decode_ms_per_step_steady", steady_ms},
                    {"decode_step_ms", last_steps},  // the last run's first sequence, step by step
                    {"decode_step_update_ms", last_updates},  // the index update after each
                    {"decode_tokens_per_second_all", d * a.batch},
                    {"kv_bytes", kv}});
    if (a.kv_stats) rows.back()["kv"] = KvStatsToJson(kv_stats);
    if (!a.json) {
      std::printf("| %7d | %5d | %13d | %13.1f | %14.3f | %14.3f | %12.1f | %8s |\n", ctx, a.batch,
                  ctx - a.decode, p, ms, steady_ms, d * a.batch, HumanBytes(kv).c_str());
      std::fflush(stdout);
    }
    if (a.kv_stats) {
      std::fprintf(stderr, "context %d, sequence 1 of the last run:\n%s\n", ctx,
                   KvStatsText(kv_stats, prefill_seconds).c_str());
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
  app->add_option("--contexts,--context", args->contexts, "context lengths, e.g. 512,2K,8K")
      ->capture_default_str();
  app->add_option("--decode", args->decode, "decode tokens per context")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_option("--repeats", args->repeats, "runs per context (the median is reported)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app->add_option("--batch", args->batch,
                  "sequences decoding in lockstep (each prefilled on its own first)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_flag("--shared-prompt", args->shared_prompt,
                "prefill one sequence and fork it into the batch (decode speed at large batches "
                "without a prefill per sequence)");
  app->add_flag("--json", args->json, "print results as JSON");
  app->add_flag("--kv-stats", args->kv_stats,
                "print the KV accounting of each context's last run (stderr; \"kv\" in --json)");
  app->add_option("--kv-policies", args->policies,
                  "compare the decode speed of these KV policies in one run, each written NAME, "
                  "NAME:RANK, NAME@BUDGET or NAME:RANK@BUDGET (e.g. "
                  "full,quest@2048,icecache@256,lychee:centroid@2048; the other --kv-* options "
                  "fill in the rest)");
  app->add_option("--text-file", args->text_file,
                  "prompt text from this file (instead of built-in filler prose)");
  return {app, [args]() { return Run(*args); }};
}

}  // namespace icecache::cli
