// Loads a model (GGUF file or Hugging Face folder) into host tensors, a tokenizer and a chat
// template, with no silent fallbacks: anything missing or unsupported is an error that names it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "icecache/status.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace icecache {

class GgufFile;
class HfCheckpoint;

// One row of `icecache inspect`'s tensor table.
struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // row-major
  int64_t bytes;
};

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;  // host tensors; borrow from the mapped files below
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;  // absent when the model has none we support
  std::string chat_template_note;             // why it is absent (for error messages)
  std::string path;
  std::string format;  // "gguf" or "safetensors"
  std::vector<TensorEntry> tensors;
  // Metadata for inspect: key -> display string (GGUF metadata or config.json entries).
  std::vector<std::pair<std::string, std::string>> metadata;
  // Storage the weights point into.
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<HfCheckpoint> hf;

  LoadedModel();
  ~LoadedModel();
};

// `path` is a .gguf file or a folder holding config.json + safetensors + tokenizer.json.
Result<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path);

// Internal steps, one per format (loader_gguf.cc, loader_hf.cc).
Result<std::unique_ptr<LoadedModel>> LoadGgufModel(const std::string& path);
Result<std::unique_ptr<LoadedModel>> LoadHfModel(const std::string& dir);
// Checks every weight's presence, dtype and shape against the config (shared by both loaders).
Status ValidateWeights(const ModelConfig& config, const ModelWeights& weights);

}  // namespace icecache
