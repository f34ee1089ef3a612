// Runs generation tasks (needle, ruler, leval, jsonl) over the policy matrix: one prefill per
// sample on a full-KV session, forked into every pending KV configuration, greedy decoding, and
// each reply scored and saved as soon as it is done.
#pragma once

#include <cstdint>
#include <vector>

#include "eval/eval_context.h"
#include "eval/progress_meter.h"
#include "eval/prompt_fit.h"
#include "eval/sample.h"
#include "eval/text_codec.h"

namespace icecache::eval {

struct PreparedSample {
  Sample sample;
  FittedPrompt prompt;
  int length = 0;
};

// Prompt tokens of each sample such that prompt plus max_new_tokens fits in `length`.
Result<std::vector<PreparedSample>> PrepareSamples(const TextCodec& codec,
                                                   std::vector<Sample> samples, int length);

struct PendingWork {
  int64_t runs = 0;
  double work = 0;  // in prefill-token units (a decoded token counts as kDecodeWork)
};
inline constexpr double kDecodeWork = 8.0;

PendingWork CountPending(const EvalContext& ctx, const std::vector<PreparedSample>& samples);

// Stops early (without error) once ctx.stopped().
Status RunGeneration(EvalContext& ctx, const std::vector<PreparedSample>& samples,
                     ProgressMeter& progress);

}  // namespace icecache::eval
