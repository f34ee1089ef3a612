// icecache chat: an interactive conversation; the session keeps its KV between turns, so each
// turn prefills only the new messages.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <unistd.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/stats_json.h"

namespace icecache::cli {

namespace {

struct ChatArgs {
  ModelOptions model;
  SamplingOptions sampling;
  std::string system;
  int max_tokens = 512;
  bool stats = false;
};

int Run(const ChatArgs& a) {
  auto engine = Engine::Create(a.model.ToEngineOptions());
  if (!engine.ok()) return ReportError(engine.status());
  if (!(*engine)->info().has_chat_template) {
    return ReportError(Unsupported("this model has no supported chat template; use generate"));
  }
  auto session = (*engine)->NewSession();
  if (!session.ok()) return ReportError(session.status());
  const bool tty = isatty(fileno(stdin)) != 0;
  std::vector<ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  if (tty) {
    std::fprintf(stderr, "%s on %s. /reset clears the conversation, /exit or Ctrl-D quits.\n",
                 (*engine)->info().name.c_str(), (*engine)->info().backend.c_str());
  }
  std::string line;
  while (true) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.resize(a.system.empty() ? 0 : 1);
      (*session)->Reset();
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({"user", line});
    GenerateRequest req;
    req.messages = messages;
    req.max_tokens = a.max_tokens;
    req.sampling = a.sampling.ToParams();
    ProgressBar bar("prefill", ProgressMode::kAuto);
    GenerateCallbacks cb;
    cb.on_prefill = [&](int64_t done, int64_t total) { bar.Update(done, total); };
    cb.on_text = [&](std::string_view t) {
      bar.Finish();
      std::fwrite(t.data(), 1, t.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    auto out = (*session)->Generate(req, cb);
    bar.Finish();
    if (!out.ok()) {
      ReportError(out.status());
      messages.pop_back();
      continue;  // a bad turn does not end the conversation
    }
    std::printf("\n");
    std::fflush(stdout);
    messages.push_back({"assistant", out->text});
    if (a.stats) std::fprintf(stderr, "[%s]\n", StatsLine(out->stats).c_str());
  }
  return 0;
}

}  // namespace

Command AddChatCommand(CLI::App& root) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* app = root.add_subcommand("chat", "Chat with a model interactively (stdin)");
  AddModelOptions(*app, &args->model);
  AddSamplingOptions(*app, &args->sampling);
  app->add_option("--system", args->system, "system message");
  app->add_option("-n,--max-tokens", args->max_tokens, "tokens per reply at most")
      ->check(NonNegativeInt())
      ->capture_default_str();
  app->add_flag("--stats", args->stats, "print statistics after each reply");
  return {app, [args]() { return Run(*args); }};
}

}  // namespace icecache::cli
