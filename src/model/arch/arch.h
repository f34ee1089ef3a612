// Architecture families: what differs between llama, qwen2 and qwen3 (one file each).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace icecache {

struct ArchSpec {
  std::string_view name;                     // "llama", "qwen2", "qwen3"
  std::vector<std::string_view> gguf_names;  // general.architecture values
  std::vector<std::string_view> hf_classes;  // config.json "architectures" entries
  bool qkv_bias = false;                     // q/k/v projections carry a bias
  bool qk_norm = false;                      // per-head RMSNorm of q and k before RoPE
  // GGUF converters permute the rows of Q and K per head (llama.cpp's "normal" RoPE layout);
  // the loader undoes it so every model uses the rotate_half form.
  bool gguf_permutes_qk = false;
};

const ArchSpec& LlamaArch();
const ArchSpec& Qwen2Arch();
const ArchSpec& Qwen3Arch();

// nullptr if unknown.
const ArchSpec* FindArchByGgufName(std::string_view name);
const ArchSpec* FindArchByHfClass(std::string_view hf_class);
// "llama (LlamaForCausalLM, MistralForCausalLM), qwen2 (...), ..." for error messages.
std::string SupportedArchList();

}  // namespace icecache
