// The `fidelity` task: how closely a KV policy follows full KV on long real text.
// Teacher-forced: the first length - steps tokens of a document are the context, the next
// `steps` tokens are fed one per decode step; per step we compare the policy's next-token
// distribution with full KV's (KL(full || policy), top-1 agreement) and the perplexity of the
// true tokens. Free generation: greedy decoding from the same context, and the position where
// the policy's tokens first differ from full KV's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/eval_context.h"
#include "eval/generation_runner.h"
#include "eval/progress_meter.h"
#include "eval/text_codec.h"

namespace icecache::eval {

struct FidelityDocument {
  std::string source;  // file stem: "gov_report_summ"
  std::string id;      // "line3", or the file name
  std::string text;
};

struct FidelityOptions {
  int steps = 128;      // teacher-forced tokens
  int gen_tokens = 64;  // greedy tokens compared with full KV (<= steps)
  int limit = 4;        // documents per length (those long enough, in order)
};

// The documents of `paths`: the "input" (L-Eval) or "context" field of every line of a .jsonl
// file, a .txt file whole, every .txt file of a folder. Errors name the file and line.
Result<std::vector<FidelityDocument>> LoadFidelityDocuments(const std::vector<std::string>& paths);

// `count` generated filler documents of about `tokens` tokens each (when no files are given).
std::vector<FidelityDocument> FillerFidelityDocuments(int count, int tokens, uint64_t seed);

// A document's tokens (BOS first); documents shorter than the length are skipped.
struct FidelityItem {
  const FidelityDocument* doc = nullptr;
  std::vector<int32_t> tokens;  // exactly `length` tokens
  int length = 0;
};

// The first options.limit documents with at least `length` tokens, for each length; `skipped`
// gets the number of documents passed over for being too short.
Result<std::vector<FidelityItem>> SelectFidelityItems(const TextCodec& codec,
                                                      const std::vector<FidelityDocument>& docs,
                                                      const std::vector<int>& lengths,
                                                      const FidelityOptions& options, int* skipped);

// Runs pending and their work estimate (prefill-token units), for the progress meter.
PendingWork CountPendingFidelity(const EvalContext& ctx, const std::vector<FidelityItem>& items,
                                 const FidelityOptions& options);

// Per item: one prefill, a full-KV reference, then every pending configuration (full included:
// full against its own reference must give KL 0 and agreement 1, a check of the harness).
Status RunFidelity(EvalContext& ctx, const std::vector<FidelityItem>& items,
                   const FidelityOptions& options, ProgressMeter& progress);

}  // namespace icecache::eval
