// icecache generate: one prompt in, a completion out (streamed), optional JSON stats.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/stats_json.h"

namespace icecache::cli {

namespace {

struct GenerateArgs {
  ModelOptions model;
  SamplingOptions sampling;
  std::string prompt;
  std::string prompt_file;
  std::string system;
  bool chat = false;
  int max_tokens = 256;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool json = false;
  bool stats = false;
  bool kv_stats = false;
  std::string progress = "auto";
};

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open prompt file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Run(const GenerateArgs& a) {
  ProgressMode pmode;
  if (!ParseProgressMode(a.progress, &pmode)) {
    return ReportError(InvalidArgument("--progress must be auto, always or never"));
  }
  GenerateRequest req;
  std::string text = a.prompt;
  if (!a.prompt_file.empty()) {
    auto f = ReadFile(a.prompt_file);
    if (!f.ok()) return ReportError(f.status());
    text = *f;
  }
  if (a.chat) {
    if (!a.system.empty()) req.messages.push_back({"system", a.system});
    req.messages.push_back({"user", text});
  } else {
    if (!a.system.empty()) return ReportError(InvalidArgument("--system needs --chat"));
    req.prompt = text;
  }
  req.max_tokens = a.max_tokens;
  req.sampling = a.sampling.ToParams();
  req.stop = a.stop;
  req.ignore_eos = a.ignore_eos;

  auto engine = Engine::Create(a.model.ToEngineOptions());
  if (!engine.ok()) return ReportError(engine.status());

  ProgressBar bar("prefill", pmode);
  GenerateCallbacks cb;
  cb.on_prefill = [&](int64_t done, int64_t total) {
    bar.Update(done, total);
    if (done == total) bar.Finish();
  };
  if (!a.json) {
    cb.on_text = [](std::string_view t) {
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto out = (*engine)->Generate(req, cb);
  bar.Finish();
  if (!out.ok()) return ReportError(out.status());
  if (a.json) {
    nlohmann::json j;
    j["text"] = out->text;
    j["tokens"] = out->tokens;
    j["stats"] = StatsToJson(out->stats);
    j["model"] = ModelInfoToJson((*engine)->info());
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("\n");
    std::fflush(stdout);
    if (a.stats) std::fprintf(stderr, "%s\n", StatsLine(out->stats).c_str());
    if (a.kv_stats)
      std::fprintf(stderr, "%s\n", KvStatsText(out->stats.kv, out->stats.prefill_seconds).c_str());
  }
  return 0;
}

}  // namespace

Command AddGenerateCommand(CLI::App& root) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* app = root.add_subcommand("generate", "Generate a completion for a prompt");
  AddModelOptions(*app, &args->model);
  AddSamplingOptions(*app, &args->sampling);
  auto* p = app->add_option("-p,--prompt", args->prompt, "prompt text");
  auto* f = app->add_option("-f,--prompt-file", args->prompt_file, "read the prompt from a file");
  p->excludes(f);
  app->add_flag("--chat", args->chat, "format the prompt with the model's chat template");
  app->add_option("--system", args->system, "system message (with --chat)");
  app->add_option("-n,--max-tokens", args->max_tokens, "tokens to generate at most")
      ->check(NonNegativeInt())
      ->capture_default_str();
  app->add_option("--stop", args->stop, "stop before this text (repeatable)");
  app->add_flag("--ignore-eos", args->ignore_eos, "do not stop at end-of-sequence tokens");
  app->add_flag("--json", args->json, "print one JSON object: text, tokens, stats, model");
  app->add_flag("--stats", args->stats, "print a statistics line on stderr");
  app->add_flag("--kv-stats", args->kv_stats,
                "print per-decode-step KV accounting (selection, fetch, attention) on stderr");
  app->add_option("--progress", args->progress, "prefill progress bar: auto, always, never")
      ->capture_default_str();
  return {app, [args, p, f]() {
            if (p->count() == 0 && f->count() == 0) {
              return ReportError(InvalidArgument("give a prompt with -p TEXT or --prompt-file F"));
            }
            return Run(*args);
          }};
}

}  // namespace icecache::cli
