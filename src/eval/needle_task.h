// The `needle` task: one fact hidden at a list of depths of a haystack, for each context length;
// the model is asked for it and the reply is scored by containment of the answer.
#pragma once

#include <cstdint>
#include <vector>

#include "eval/haystack.h"
#include "eval/sample.h"
#include "eval/text_codec.h"

namespace icecache::eval {

struct NeedleTaskOptions {
  int samples = 5;             // depths evenly spaced over 0..1 (when `depths` is empty)
  std::vector<double> depths;  // explicit depths in 0..1
  uint64_t seed = 0;
  int max_new_tokens = 32;
};

// The depths the options ask for: `depths`, else `samples` points from 0 to 1.
std::vector<double> NeedleDepths(const NeedleTaskOptions& options);

// One sample per depth whose prompt plus max_new_tokens fits in `length` tokens (and comes
// within a few percent of it). The same depth gets the same fact at every length.
Result<std::vector<Sample>> MakeNeedleSamples(const TextCodec& codec, Haystack& haystack,
                                              int length, const NeedleTaskOptions& options);

}  // namespace icecache::eval
