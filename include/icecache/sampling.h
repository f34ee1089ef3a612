// Sampling parameters for generation.
#pragma once

#include <cstdint>

namespace icecache {

struct SamplingParams {
  // <= 0 means greedy (argmax; ties go to the lowest token id).
  float temperature = 0.0f;
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keep tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // 1: off; as in transformers (divide positive logits)
  int repetition_window = 64;       // how many recent tokens the penalty looks at (0: all)
  uint64_t seed = 0;                // equal seeds give equal outputs
};

}  // namespace icecache
