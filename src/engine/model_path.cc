#include <cstdlib>
#include <filesystem>

#include "icecache/engine.h"

namespace icecache {

namespace fs = std::filesystem;

const char* const kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

Result<std::string> ResolveModelPath(const std::string& model) {
  if (!model.empty() && model != "default") return model;
  std::vector<fs::path> places;
  if (const char* dir = std::getenv("ICECACHE_MODEL_DIR")) places.emplace_back(dir);
  places.push_back(fs::path(ICECACHE_SOURCE_DIR) / ".cache" / "models");
  if (const char* home = std::getenv("HOME")) {
    places.push_back(fs::path(home) / ".cache" / "icecache" / "models");
  }
  std::string looked;
  for (const fs::path& dir : places) {
    const fs::path p = dir / kDefaultModelFile;
    std::error_code ec;
    if (fs::exists(p, ec)) return p.string();
    looked += (looked.empty() ? "" : ", ") + dir.string();
  }
  return NotFound(std::string("the default model (") + kDefaultModelFile +
                  ") is not in the model cache (looked in " + looked +
                  "); run scripts/fetch_model.sh to download it, or pass -m PATH");
}

}  // namespace icecache
