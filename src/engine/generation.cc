#include "engine/generation.h"

#include <algorithm>

#include "engine/engine_impl.h"

namespace icecache {

Generation::Generation(SequenceState* state, const GenerateRequest* request,
                       const GenerateCallbacks* callbacks, Sampler sampler, const Tokenizer& tok,
                       int context_size)
    : state_(state),
      request_(request),
      callbacks_(callbacks),
      sampler_(std::move(sampler)),
      stops_(request->stop),
      decoder_(tok),
      context_size_(context_size) {
  if (!request->ignore_eos) stop_ids_ = tok.StopTokenIds();
  result_.stats.finish_reason = "length";
}

void Generation::Emit(const std::string& text) {
  if (text.empty()) return;
  result_.text += text;
  if (callbacks_ != nullptr && callbacks_->on_text && !callbacks_->on_text(text)) {
    cancelled_ = true;
  }
}

std::optional<int32_t> Generation::Step(std::vector<float>& logits) {
  if (static_cast<int>(result_.tokens.size()) >= request_->max_tokens) return std::nullopt;
  return Accept(sampler_.Sample(logits, state_->history));
}

bool Generation::MayContinue(int64_t length) const {
  return static_cast<int64_t>(result_.tokens.size()) + 1 < request_->max_tokens &&
         length + 1 < context_size_;
}

bool Generation::GreedyOnly() const {
  const SamplingParams& p = request_->sampling;
  return p.temperature <= 0.0f && p.repetition_penalty == 1.0f;
}

std::optional<int32_t> Generation::Accept(int32_t next) {
  GenerateStats& st = result_.stats;
  if (static_cast<int>(result_.tokens.size()) >= request_->max_tokens) return std::nullopt;
  if (std::find(stop_ids_.begin(), stop_ids_.end(), next) != stop_ids_.end()) {
    st.finish_reason = "stop";
    return std::nullopt;
  }
  result_.tokens.push_back(next);
  Emit(stops_.Push(decoder_.Push(next)));
  if (stops_.stopped()) {
    st.finish_reason = "stop";
    return std::nullopt;
  }
  if (cancelled_) {
    st.finish_reason = "cancelled";
    return std::nullopt;
  }
  // The last token needs no forward pass.
  if (static_cast<int>(result_.tokens.size()) == request_->max_tokens) return std::nullopt;
  if (state_->seq.length() + 1 >= context_size_) {
    st.finish_reason = "context";
    return std::nullopt;
  }
  return next;
}

void Generation::Finish() {
  if (!stops_.stopped()) Emit(stops_.Push(decoder_.Flush()) + stops_.Flush());
  GenerateStats& st = result_.stats;
  st.generated_tokens = static_cast<int64_t>(result_.tokens.size());
  st.kv_bytes = state_->seq.num_pages() * state_->seq.layout().page_bytes();
  st.kv.policy = state_->kv.Describe();
}

}  // namespace icecache
