#include "eval/needle_task.h"

#include <fmt/format.h>

#include "eval/demo_document.h"
#include "eval/prompt_fit.h"
#include "eval/words.h"

namespace icecache::eval {

std::vector<double> NeedleDepths(const NeedleTaskOptions& options) {
  if (!options.depths.empty()) return options.depths;
  std::vector<double> depths;
  const int n = std::max(1, options.samples);
  for (int i = 0; i < n; ++i) depths.push_back(n == 1 ? 0.5 : static_cast<double>(i) / (n - 1));
  return depths;
}

Result<std::vector<Sample>> MakeNeedleSamples(const TextCodec& codec, Haystack& haystack,
                                              int length, const NeedleTaskOptions& options) {
  std::vector<Sample> out;
  const std::vector<double> depths = NeedleDepths(options);
  const int budget = length - options.max_new_tokens;
  for (size_t i = 0; i < depths.size(); ++i) {
    const Needle needle = MakeNeedle(MixSeed(options.seed, i));
    Sample s;
    s.subtask = "needle";
    s.id = fmt::format("depth{:.0f}", depths[i] * 100);
    s.depth = depths[i];
    s.prompt.before = "Read the following document carefully.\n\n<document>\n";
    s.prompt.after = "\n</document>\n\nQuestion: " + needle.question;
    s.answers = {needle.answer};
    s.score_kind = ScoreKind::kContains;
    s.max_new_tokens = options.max_new_tokens;
    ICECACHE_ASSIGN_OR_RETURN(int overhead, PromptOverhead(codec, s.prompt));
    ICECACHE_ASSIGN_OR_RETURN(std::vector<int32_t> needle_tokens, codec.Encode(needle.sentence));
    const int64_t room = budget - overhead - static_cast<int64_t>(needle_tokens.size()) - 4;
    if (room < 16) {
      return InvalidArgument(fmt::format(
          "needle: a length of {} tokens is too short (the question, the needle and {} answer "
          "tokens take {})",
          length, options.max_new_tokens, length - room));
    }
    const double depth = depths[i];
    ICECACHE_ASSIGN_OR_RETURN(s.prompt.document,
                              FitDocument(codec, s.prompt, budget, static_cast<int>(room),
                                          [&](int tokens) -> Result<std::string> {
                                            ICECACHE_ASSIGN_OR_RETURN(std::string text,
                                                                      haystack.Take(codec, tokens));
                                            return InsertAtDepths(text, {{depth, needle.sentence}});
                                          }));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace icecache::eval
