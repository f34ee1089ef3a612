// Qwen3 (dense): no projection biases; q and k each pass a per-head RMSNorm before RoPE, and
// head_dim is a free parameter (not hidden / heads).
#include "model/arch/arch.h"

namespace icecache {

const ArchSpec& Qwen3Arch() {
  static const ArchSpec spec{
      .name = "qwen3",
      .gguf_names = {"qwen3"},
      .hf_classes = {"Qwen3ForCausalLM"},
      .qkv_bias = false,
      .qk_norm = true,
      .gguf_permutes_qk = false,
  };
  return spec;
}

}  // namespace icecache
