// icecache demo: the long-context demo. A document the program writes itself hides one fact;
// the model reads the whole document and answers a question about it.
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/stats_json.h"
#include "eval/demo_document.h"

namespace icecache::cli {

namespace {

struct DemoArgs {
  ModelOptions model;
  int tokens = 4000;
  double depth = 0.4;
  uint64_t seed = 7;
  bool json = false;
};

int Run(const DemoArgs& a) {
  auto engine_or = Engine::Create(a.model.ToEngineOptions());
  if (!engine_or.ok()) return ReportError(engine_or.status());
  Engine& engine = **engine_or;
  const Needle needle = MakeNeedle(a.seed);
  // English prose runs at about 1.3 tokens per word in these tokenizers.
  const std::string filler = MakeFillerText(static_cast<int>(a.tokens / 1.3), a.seed);
  const std::string document = HideNeedle(filler, needle, a.depth);
  GenerateRequest req;
  req.messages.push_back({"user", "Read the following document carefully.\n\n<document>\n" +
                                      document + "\n</document>\n\nQuestion: " + needle.question});
  req.max_tokens = 32;
  if (!engine.info().has_chat_template) {
    req.prompt = req.messages[0].content + "\nAnswer:";
    req.messages.clear();
  }
  if (!a.json) {
    std::printf("model: %s (%s) on %s\n", engine.info().name.c_str(), engine.info().path.c_str(),
                engine.info().backend.c_str());
    std::printf("document: %zu characters, fact hidden at %.0f%% depth\n", document.size(),
                a.depth * 100);
    std::printf("question: %s\n", needle.question.c_str());
    std::fflush(stdout);
  }
  ProgressBar bar("reading", ProgressMode::kAuto);
  GenerateCallbacks cb;
  cb.on_prefill = [&](int64_t done, int64_t total) {
    bar.Update(done, total);
    if (done == total) bar.Finish();
  };
  auto out = engine.Generate(req, cb);
  bar.Finish();
  if (!out.ok()) return ReportError(out.status());
  const bool correct = out->text.find(needle.answer) != std::string::npos;
  const GenerateStats& s = out->stats;
  if (a.json) {
    nlohmann::json j;
    j["answer"] = out->text;
    j["expected"] = needle.answer;
    j["correct"] = correct;
    j["stats"] = StatsToJson(s);
    j["model"] = ModelInfoToJson(engine.info());
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("answer: %s\n", out->text.c_str());
  std::printf("expected: %s -> %s\n", needle.answer.c_str(), correct ? "correct" : "not found");
  std::printf("%s",
              fmt::format("prompt: {} tokens, prefill {:.1f} tok/s ({:.2f} s)\n"
                          "decode: {} tokens, {:.1f} tok/s\n"
                          "KV cache: {} ({} per token), peak RSS {}\n",
                          s.prompt_tokens, s.prefill_tokens_per_second, s.prefill_seconds,
                          s.generated_tokens, s.decode_tokens_per_second, HumanBytes(s.kv_bytes),
                          HumanBytes(s.kv_bytes_per_token), HumanBytes(s.peak_rss_bytes))
                  .c_str());
  return 0;
}

}  // namespace

Command AddDemoCommand(CLI::App& root) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* app = root.add_subcommand(
      "demo", "Long-context demo: answer a question about a long generated document");
  AddModelOptions(*app, &args->model);
  app->add_option("--tokens", args->tokens, "approximate document length in tokens")
      ->check(CLI::Range(100, 1 << 20))
      ->capture_default_str();
  app->add_option("--depth", args->depth, "where the fact is hidden (0 = start, 1 = end)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app->add_option("--seed", args->seed, "document and fact seed")->capture_default_str();
  app->add_flag("--json", args->json, "print the result as JSON");
  return {app, [args]() { return Run(*args); }};
}

}  // namespace icecache::cli
