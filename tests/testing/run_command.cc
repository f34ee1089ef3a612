#include "testing/run_command.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <sys/wait.h>

#include "testing/paths.h"

namespace icecache::testing {

namespace {
std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

CommandResult RunCommand(const std::string& command) {
  const std::string dir = MakeTempDir("icecache-cmd");
  const std::string out = dir + "/out", err = dir + "/err";
  const std::string full = "(" + command + ") >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(full.c_str());
  CommandResult r;
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.exit_code = 128 + WTERMSIG(status);
  }
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

std::string CliPath() { return ICECACHE_CLI_PATH; }

}  // namespace icecache::testing
