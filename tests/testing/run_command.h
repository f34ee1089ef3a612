// Runs a shell command for CLI tests and captures its exit code and output.
#pragma once

#include <string>

namespace icecache::testing {

struct CommandResult {
  int exit_code = -1;  // 128 + signal number if killed by a signal
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `command` with /bin/sh; stdout and stderr are captured separately.
CommandResult RunCommand(const std::string& command);
// The icecache CLI binary built with the tests.
std::string CliPath();

}  // namespace icecache::testing
