// How one forward pass attends, layer by layer. The transformer calls Prepare once per forward
// (after the sequences have grown and before any layer runs), then Attend for each layer once
// that layer's new K/V are in the pool. Dense attention (every page) is the default; the KV
// policies supply a sparse strategy for decode steps.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "icecache/status.h"
#include "kv/kv_sequence.h"

namespace icecache {

// What a strategy knows of the current forward pass.
struct StepContext {
  std::span<KvSequence* const> seqs;
  std::span<const int32_t> counts;  // new tokens per sequence
  std::span<const int64_t> start;   // each sequence's length before this step
  int64_t n_tokens = 0;
  Tensor positions;  // i32 [n_tokens], backend memory
  Tensor row_base;   // i32 [n_tokens], backend memory: sequence index * n_kv_heads
};

class LayerAttention {
 public:
  virtual ~LayerAttention() = default;
  // Runs between the transformer's Backend::WaitFence and RecordFence of the step's input copies:
  // host staging memory that it copies with CopyBlocksQueued stays untouched until the next
  // forward's Prepare, by which time those copies have run.
  virtual Status Prepare(const StepContext& step) = 0;
  // out[t, h, :] = attention of q[t, h, :] over this strategy's pages of `layer`.
  virtual Status Attend(int layer, const Tensor& q, const Tensor& out) = 0;

  // Prefetch from an early estimate of a layer's queries (design brief section 3): whether this
  // strategy wants one for `layer`, and the prefetch itself. The transformer computes the
  // estimate from the residual stream before `layer` runs (its own projection of the previous
  // layer's state after attention) and calls Prefetch as side work (Backend::BeginSideWork),
  // joined before Attend(layer). A prefetch may only move pages into a working set: what Attend
  // selects and computes must not depend on it. `defer_copy`: the pages are chosen and placed
  // but not copied until FinishPrefetch(layer), also side work, queued before the join (so that
  // the copies may wait until the work between the two calls is done with the host link).
  virtual bool WantsPrefetch(int layer) const { return false; }
  virtual Status Prefetch(int layer, const Tensor& q_estimate, bool defer_copy) {
    return Status::Ok();
  }
  virtual Status FinishPrefetch(int layer) { return Status::Ok(); }

  // Batch halves (the transformer's ICECACHE_BATCH_HALVES=1): whether `layer` may attend for a
  // part of a decode step's sequences at a time, queued as side work (Backend::BeginSideWork:
  // backend operations only, no copies, waits or reads of the queries on the host), and that
  // attention: out rows of the tokens of sequences [begin, end) of the step (one token each).
  virtual bool AttendsInParts(int layer) const { return false; }
  virtual Status AttendPart(int layer, const Tensor& q, const Tensor& out, size_t begin,
                            size_t end) {
    return Unsupported("this attention does not attend in parts");
  }
};

}  // namespace icecache
