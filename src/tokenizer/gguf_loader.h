// Tokenizers from GGUF metadata (tokenizer.ggml.*).
#pragma once

#include <memory>
#include <string_view>

#include "icecache/status.h"
#include "tokenizer/tokenizer.h"

namespace icecache {
class GgufFile;
}

namespace icecache::tok {

// Tokenizer::FromGguf, but for a "gpt2" model the pre-tokenizer is the one named `pre`
// (e.g. "llama3", "qwen2", "smollm", "gpt2") instead of tokenizer.ggml.pre. An empty `pre` uses
// the file's. For tests and tools that try one vocabulary under several pre-tokenizers.
Result<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& gguf, std::string_view pre);

}  // namespace icecache::tok
