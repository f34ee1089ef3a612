// Builds a sample's prompt tokens within a token limit. A document that is too long is cut in
// the middle (its first and last halves are kept: the LongBench convention), since the start
// and end of a document usually hold its most important parts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/sample.h"
#include "eval/text_codec.h"
#include "icecache/status.h"

namespace icecache::eval {

struct FittedPrompt {
  std::vector<int32_t> tokens;
  int64_t document_tokens = 0;  // tokens of the document before any cut
  int64_t cut_tokens = 0;       // document tokens removed from the middle
};

// REQUIRES max_tokens > 0. Fails (OutOfRange) when even an empty document does not fit.
Result<FittedPrompt> FitPrompt(const TextCodec& codec, const PromptParts& parts, int max_tokens);

// Tokens of the prompt with an empty document: what a generator must leave room for.
Result<int> PromptOverhead(const TextCodec& codec, const PromptParts& parts);

// For generators: builds the document from a size (list entries, haystack tokens, ...) so that
// the whole prompt (`parts` with that document) fits in `budget` tokens and comes within 1% of
// it when the size steps allow. `guess` is a first size to try. Fails when even size 1 is too
// long.
Result<std::string> FitDocument(const TextCodec& codec, const PromptParts& parts, int budget,
                                int guess,
                                const std::function<Result<std::string>(int size)>& build);

}  // namespace icecache::eval
