// Greedy decode of one dense sequence on a GPU with each step queued before the host reads the
// token of the step before it (EngineImpl::DecodeAhead).
//
// Step k's device sampler writes its token where step k + 1's embedding reads it
// (Transformer::StepIds), and a step's inputs and page table go by queued copies, so the host
// queues step k + 1 while the GPU still runs step k and only then waits for step k's token: the
// GPU does not wait for the host between steps. Whether step k + 1 is wanted is known in advance
// for the token budget and the context limit (Generation::MayContinue); when step k's token ends
// the request otherwise (a stop token or string, a cancelled stream) the queued step is dropped
// and the KV it appended truncated. The tokens are those of the step-by-step loop: the same
// sampler on the same logits.
#include <cstdlib>
#include <optional>

#include "core/env_switch.h"
#include "core/process.h"
#include "engine/engine_impl.h"
#include "engine/generation.h"

namespace icecache {

bool EngineImpl::CanDecodeAhead(const Generation& g) const {
  static const bool enabled = EnvSwitch("ICECACHE_DECODE_AHEAD", true);
  const SequenceState& st = *g.state();
  return enabled && backend_->device() != Device::kCpu && staged_ == nullptr && g.GreedyOnly() &&
         !st.sparse() && !st.kv.recall;
}

Status EngineImpl::DecodeAhead(Generation& g) {
  SequenceState& st = *g.state();
  const SampleRowParams greedy[1] = {};
  const Tensor step_ids = transformer_->StepIds(1);
  KvSequence* seqs[] = {&st.seq};
  const int32_t counts[] = {1};
  int pending = 0;  // queued steps whose tokens are not read yet
  // Queues a step fed `token` (from the host), or the id the step before sampled on the device.
  auto queue = [&](int32_t token, bool on_device) -> Status {
    const int32_t ids[] = {token};
    ForwardInput in{seqs, ids, counts, LogitsMode::kLast, {}};
    in.logits_in_backend = true;
    in.ids_on_device = on_device;
    ICECACHE_ASSIGN_OR_RETURN(Tensor logits, transformer_->Forward(in));
    ICECACHE_RETURN_IF_ERROR(backend_->SampleTokensAsync(logits, greedy, step_ids));
    ++pending;
    return Status::Ok();
  };
  auto take = [&](int32_t* id) -> Status {
    --pending;
    return backend_->TakeSampledTokens({id, 1});
  };
  // On failure, nothing stays queued.
  auto fail = [&](Status s) -> Status {
    int32_t unused = 0;
    while (pending > 0) (void)take(&unused);
    return s;
  };

  std::optional<int32_t> fed = g.Step(g.logits());  // the first token, from the prompt's logits
  if (!fed) return Status::Ok();
  if (Status s = queue(*fed, false); !s.ok()) return fail(s);
  double t0 = NowSeconds();
  for (;;) {
    // The next step, fed the token being sampled, if that token may be fed at all.
    const bool ahead = g.MayContinue(st.seq.length() + 1);
    if (ahead) {
      if (Status s = queue(0, true); !s.ok()) return fail(s);
    }
    int32_t id = 0;
    if (Status s = take(&id); !s.ok()) return fail(s);
    const double t1 = NowSeconds();
    ChargeStep(st, *fed, t1 - t0, st.seq.length() - (ahead ? 1 : 0), false);
    t0 = t1;
    ++g.forwards;
    fed = g.Accept(id);
    if (!fed) {
      if (ahead) {  // the queued step is not wanted: drop its token and its KV
        int32_t unused = 0;
        if (Status s = take(&unused); !s.ok()) return fail(s);
        st.seq.Truncate(st.seq.length() - 1);
      }
      return Status::Ok();
    }
    if (!ahead) {
      if (Status s = queue(*fed, false); !s.ok()) return fail(s);
    }
  }
}

}  // namespace icecache
