// The subcommands of the icecache CLI. Each Add*Command registers its options on `root` and
// returns the function that runs it (returning the process exit code).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace icecache::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command AddGenerateCommand(CLI::App& root);
Command AddChatCommand(CLI::App& root);
Command AddInspectCommand(CLI::App& root);
Command AddBenchCommand(CLI::App& root);
Command AddDemoCommand(CLI::App& root);
Command AddEvalCommand(CLI::App& root);

}  // namespace icecache::cli
