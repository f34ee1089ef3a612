#include "testing/paths.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace icecache::testing {

namespace fs = std::filesystem;

std::string SourceDir() {
  // A copy of the tree elsewhere (prebuilt test binaries run on another machine) names itself.
  if (const char* dir = std::getenv("ICECACHE_SOURCE_DIR")) return dir;
  return ICECACHE_SOURCE_DIR;
}

std::string DataPath(const std::string& rel) { return SourceDir() + "/tests/data/" + rel; }

nlohmann::json ReadDataJson(const std::string& rel) {
  return nlohmann::json::parse(ReadFileText(DataPath(rel)));
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DefaultModelPath() {
  const char* kFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (const char* dir = std::getenv("ICECACHE_MODEL_DIR")) {
    fs::path p = fs::path(dir) / kFile;
    if (fs::exists(p)) return p.string();
  }
  fs::path p = fs::path(SourceDir()) / ".cache" / "models" / kFile;
  return fs::exists(p) ? p.string() : std::string();
}

std::string MakeTempDir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  fs::path p = fs::temp_directory_path() /
               (prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

}  // namespace icecache::testing
