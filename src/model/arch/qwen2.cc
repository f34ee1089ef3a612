// Qwen2 / Qwen2.5: Llama layout plus biases on the q, k and v projections.
#include "model/arch/arch.h"

namespace icecache {

const ArchSpec& Qwen2Arch() {
  static const ArchSpec spec{
      .name = "qwen2",
      .gguf_names = {"qwen2"},
      .hf_classes = {"Qwen2ForCausalLM"},
      .qkv_bias = true,
      .qk_norm = false,
      .gguf_permutes_qk = false,
  };
  return spec;
}

}  // namespace icecache
