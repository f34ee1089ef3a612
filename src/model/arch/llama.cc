// Llama 2, Llama 3/3.1 (with its RoPE scaling), SmolLM2 and Mistral: the plain family.
#include "model/arch/arch.h"

namespace icecache {

const ArchSpec& LlamaArch() {
  static const ArchSpec spec{
      .name = "llama",
      .gguf_names = {"llama"},
      .hf_classes = {"LlamaForCausalLM", "MistralForCausalLM"},
      .qkv_bias = false,
      .qk_norm = false,
      .gguf_permutes_qk = true,
  };
  return spec;
}

}  // namespace icecache
