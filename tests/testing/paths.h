// Paths of test inputs: the repository, committed fixtures, and the (ignored) model cache.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace icecache::testing {

// The repository root: $ICECACHE_SOURCE_DIR if set, else compiled in.
std::string SourceDir();
// tests/data/<rel>.
std::string DataPath(const std::string& rel);
// tests/data/<rel> parsed as JSON (the reference fixtures).
nlohmann::json ReadDataJson(const std::string& rel);
// The default model GGUF if present ($ICECACHE_MODEL_DIR, then <repo>/.cache/models), else "".
std::string DefaultModelPath();
// A fresh empty directory under the system temp dir, unique per call.
std::string MakeTempDir(const std::string& prefix);
// The whole contents of a file ("" when it cannot be read).
std::string ReadFileText(const std::string& path);

}  // namespace icecache::testing
