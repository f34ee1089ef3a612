// Random-weight models of real shapes, built directly in a backend's memory: for speed
// measurements only (no file, no tokenizer; callers feed token ids).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "model/loader.h"

namespace icecache {

// "llama-3.1-8b, llama-3.2-3b, qwen2.5-7b, smollm2-135m, tiny" for help and error messages.
std::string SyntheticPresetList();

// The config of a preset (its exact shape), or InvalidArgument naming the presets.
Result<ModelConfig> SyntheticConfig(const std::string& preset);

// A model of `preset`'s shape whose weights are made by Backend::FillRandom in `backend`'s
// memory (matrices bf16 with HF-like scale, norms one, biases small; the same values on every
// backend for one seed). Its tokenizer knows the vocabulary size only: Decode gives "" and
// text cannot be encoded. format is "synthetic", path "synthetic:<preset>".
Result<std::unique_ptr<LoadedModel>> MakeSyntheticModel(const std::string& preset, Backend& backend,
                                                        uint64_t seed = 1);

}  // namespace icecache
