// icecache: the command-line front end (generate, chat, inspect, bench, demo).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace {

int Run(int argc, char** argv) {
  using namespace icecache::cli;
  CLI::App app{"IceCache: long-context LLM inference with a tiered, indexed KV cache"};
  app.require_subcommand(1);
  // One error line, then a non-zero exit (CLI11's default adds a second line).
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("error: ") + e.what() + " (see --help)\n";
  });
  app.set_version_flag("--version", "icecache 0.1.0");
  std::vector<Command> commands = {AddGenerateCommand(app), AddChatCommand(app),
                                   AddInspectCommand(app),  AddBenchCommand(app),
                                   AddDemoCommand(app),     AddEvalCommand(app)};
  const bool known =
      argc > 1 && std::any_of(commands.begin(), commands.end(),
                              [&](const Command& c) { return c.app->check_name(argv[1]); });
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::string names;
    for (const Command& c : commands) names += (names.empty() ? "" : ", ") + c.app->get_name();
    std::fprintf(stderr, "error: unknown command '%s' (expected one of: %s)\n", argv[1],
                 names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is a usage error, exit status 2 like
    // an unknown command or a bad combination of options (CLI11's own codes run from 101 up).
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const Command& c : commands) {
      if (c.app->parsed()) return c.run();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Anything that escapes a command (the commands' own errors are handled inside Run) ends in
  // one error line rather than std::terminate.
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "error: unknown exception\n");
  }
  return 1;
}
