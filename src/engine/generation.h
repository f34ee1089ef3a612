// One request's decoding state: its sampler, stop handling and streamed text. The engine runs
// many of these in lockstep, one batched forward pass per step.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "icecache/engine.h"
#include "tokenizer/tokenizer.h"

namespace icecache {

struct SequenceState;

class Generation {
 public:
  Generation(SequenceState* state, const GenerateRequest* request,
             const GenerateCallbacks* callbacks, Sampler sampler, const Tokenizer& tok,
             int context_size);

  // Samples the next token from `logits` and streams its text. Returns the token to feed next,
  // or nullopt when this generation has finished (finish reason recorded).
  std::optional<int32_t> Step(std::vector<float>& logits);
  // The same for a token sampled elsewhere (the device sampler, for greedy requests).
  std::optional<int32_t> Accept(int32_t next);
  // Whether the token Accept takes next could be fed to another step, as far as the token budget
  // and the context limit tell (a stop token or string may still end the request), with the
  // sequence holding `length` tokens when Accept runs.
  bool MayContinue(int64_t length) const;
  // Whether the device sampler picks the same tokens as Step would: greedy, no penalty.
  bool GreedyOnly() const;
  // Flushes held-back text and fills the statistics that do not depend on timing.
  void Finish();

  SequenceState* state() { return state_; }
  const SequenceState* state() const { return state_; }
  GenerateResult& result() { return result_; }
  std::vector<float>& logits() { return logits_; }
  int64_t forwards = 0;  // decode forward passes run for this request

 private:
  void Emit(const std::string& text);

  SequenceState* state_;
  const GenerateRequest* request_;
  const GenerateCallbacks* callbacks_;
  Sampler sampler_;
  StopMatcher stops_;
  StreamDecoder decoder_;
  std::vector<int32_t> stop_ids_;
  int context_size_;
  bool cancelled_ = false;
  GenerateResult result_;
  std::vector<float> logits_;
};

}  // namespace icecache
