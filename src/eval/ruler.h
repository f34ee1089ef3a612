// The `ruler` task: synthetic long-context tasks in the spirit of RULER (Hsieh et al. 2024),
// generated for any length from a seed: needle variants, variable tracking, common- and
// frequent-word extraction and question answering over many short documents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/haystack.h"
#include "eval/sample.h"
#include "eval/text_codec.h"

namespace icecache::eval {

struct RulerOptions {
  uint64_t seed = 0;
  int samples = 4;                    // per subtask and length
  std::vector<std::string> subtasks;  // empty: all of RulerSubtasks()
  Haystack* essay = nullptr;          // prose haystack (essays or filler); REQUIRED
  Haystack* noise = nullptr;          // repeated-sentence haystack; REQUIRED
};

// niah_single niah_essay niah_uuid niah_multikey niah_multivalue niah_multiquery vt cwe fwe qa
const std::vector<std::string>& RulerSubtasks();

// `samples` samples of each subtask whose prompt plus answer budget fits in `length` tokens.
Result<std::vector<Sample>> MakeRulerSamples(const TextCodec& codec, const RulerOptions& options,
                                             int length);

}  // namespace icecache::eval
