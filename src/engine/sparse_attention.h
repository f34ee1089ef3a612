// Sparse decode attention: for each sequence of a decode step and each layer, the sequence's
// policy selects pages per KV head (select), the working set brings missing pages in with one
// batched copy (fetch), and attention runs over exactly the selected pages in the working set
// (attend). Sequences without a policy ("full") and the first kv.dense_layers layers attend
// every page of the host tier. Time and work are charged to each sequence's accounting. With
// KvConfig::recall it also measures the attention-mass recall of what each step attends (every
// layer of a "full" sequence, the selecting layers of a policy's).
//
// A sequence with a DeviceSelection (--kv-select device; quest) selects in backend memory
// instead: its pages are ranked and mapped into the working set by backend ops and the page
// table never leaves the device, so the layer's queries stay there too. Such a sequence also
// prefetches: from the transformer's early estimate of the next layer's queries it selects and
// maps that layer's pages as side work while the current layer computes, so that the real
// selection finds most of its pages resident (DeviceSelection::Prefetch).
// In a batch, the sequences that select in backend memory run each phase as one batched op over
// all of them (Backend::SelectPagesBatch, MapPagesBatch, AttentionBatch). With --kv-fetch behind
// (KvConfig::fetch), a step's map defers the selected pages that are not resident, and their
// copies run as side work beside the rest of the step (joined at its end), for the next step.

//
// Otherwise, on a GPU the host tier is pinned host memory (--kv-offload) and the working set is
// device memory: the policies select on the host from a copy of the layer's queries (one
// device-to-host copy and wait per layer), the working set's Flush gathers the missing pages into
// device slots (a kernel reading the mapped host tier), and the page table is copied to the device
// before the multi-segment decode kernel runs. Dense layers and "full" sequences read the host tier
// directly through the mapping.
#pragma once

#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "engine/attention_recall.h"
#include "engine/layer_attention.h"
#include "engine/prefetch_tuner.h"
#include "engine/sequence_state.h"
#include "model/model_config.h"

namespace icecache {

class SparseAttention : public LayerAttention {
 public:
  SparseAttention(Backend* backend, const ModelConfig& config);

  // The sequences of the next forward pass, in batch order (one decode token each). Decides
  // whether that step prefetches (--kv-prefetch).
  void SetBatch(std::span<SequenceState* const> states);

  // Threads for the host work of a batch's device-selection prepare (may be null: one thread).
  void set_workers(ThreadPool* workers) { workers_ = workers; }

  // Device-side selection waits for the device between its phases to time them (KvStats).
  void set_phase_timing(bool on) { phase_timing_ = on; }

  // Prefetch from the transformer's early query estimates for sequences that select on the
  // device (--kv-prefetch): their next layer's pages move into the working set while the
  // current layer computes. PrefetchMode::kAuto never prefetches in a batch (the prefetches of
  // all sequences queue one after another as side work, and on the H200 at batch 8 they cost
  // more than they saved, docs/PERF.md); for a step of one such sequence the tuner decides, from
  // the times of steps run with and without it (PrefetchTuner).
  enum class PrefetchMode { kOff, kOn, kAuto };
  void set_prefetch(PrefetchMode mode) { prefetch_ = mode; }
  // The time of the step just run with the batch of SetBatch (feeds the tuner when it decided).
  void EndStep(double step_seconds);
  // A decode loop starts (PrefetchTuner::NewRun).
  void BeginDecode() { tuner_.NewRun(); }
  const PrefetchTuner& prefetch_tuner() const { return tuner_; }

  Status Prepare(const StepContext& step) override;
  Status Attend(int layer, const Tensor& q, const Tensor& out) override;
  bool WantsPrefetch(int layer) const override;
  Status Prefetch(int layer, const Tensor& q_estimate, bool defer_copy) override;
  Status FinishPrefetch(int layer) override;
  // In parts when every sequence selects `layer`'s pages in backend memory (and no phase is
  // timed): a part runs as batched ops, or one sequence after another without lanes.
  bool AttendsInParts(int layer) const override;
  Status AttendPart(int layer, const Tensor& q, const Tensor& out, size_t begin,
                    size_t end) override;

 private:
  // DeviceSelection::Prepare for the batch's device-selecting sequences: the backend phases one
  // sequence after another, the host phase on the workers.
  Status PrepareDeviceSelection();
  // Attention of one sequence's token over a page table built from `lists` (one list per KV
  // head) in `pool`.
  Status AttendOne(const Tensor& q, const Tensor& out, int64_t token,
                   const std::vector<std::vector<PageRef>>& lists, const KvPoolView& pool);
  // Attention of one sequence's token over `table` (backend memory) in `pool`.
  void AttendTable(const Tensor& q, const Tensor& out, int64_t token, const PageTableView& table,
                   const KvPoolView& pool);
  AttentionArgs TableArgs(const Tensor& q, const Tensor& out, int64_t token,
                          const PageTableView& table, const KvPoolView& pool) const;
  // A sequence whose selection runs in backend memory (DeviceSelection): no host round trip,
  // backend ops only (so it may run in a lane).
  void AttendDeviceSelected(int layer, const Tensor& q, const Tensor& out, int64_t token,
                            SequenceState& st);
  // The same for all of device_selected_ at once: one SelectPagesBatch, MapPagesBatch and
  // AttentionBatch, so that a GPU runs each kernel once for the whole batch. The phases' time
  // (charged where the work runs as it is queued) is shared evenly among the sequences.
  void AttendDeviceSelectedBatch(int layer, const Tensor& q, const Tensor& out);
  // The layer's queries as host f32 [n_tokens][n_heads * head_dim] (a view of `q` on the CPU; a
  // converted copy on other backends).
  Result<const float*> HostQueries(const Tensor& q);
  // True when some sequence of the batch needs `layer`'s queries on the host.
  bool NeedsHostQueries(int layer) const;

  Backend* backend_;
  ModelConfig config_;
  std::span<SequenceState* const> states_;
  Tensor positions_;
  std::vector<std::vector<PageRef>> selected_, mapped_;
  std::vector<std::vector<int32_t>> token_slots_;
  std::vector<size_t> device_selected_;  // this layer's sequences that select in backend memory
  std::vector<PageSelectArgs> select_batch_;
  std::vector<PageMapArgs> map_batch_, behind_batch_;
  std::vector<AttentionArgs> attend_batch_;
  // Batched ops for several device-selecting sequences (ICECACHE_DEVICE_BATCH=0: one lane each).
  bool batch_ops_ = true;
  // DeviceSelection::Prepare's uploads queued instead of blocking (ICECACHE_QUEUED_UPLOADS=1).
  // Off: on the H200 at batch 20 queued uploads were no faster than blocking ones (docs/PERF.md).
  bool queued_uploads_ = false;
  // The host phase of that prepare on workers_ (ICECACHE_PARALLEL_PREPARE=0: on this thread).
  bool parallel_prepare_ = true;
  // ICECACHE_PREFETCH_PERCENT (1-100; anything else reads as 100): the share of the budget's
  // pages a prefetch brings in, the best-ranked first (DeviceSelection::Prefetch); 100 (the
  // default): all of them.
  int prefetch_percent_ = 100;
  ThreadPool* workers_ = nullptr;
  std::vector<int32_t> table_;  // host staging: indptr | indices | lens
  Tensor table_dev_, q_host_, row_base_;
  std::vector<float> q_f32_;
  AttentionRecall recall_;
  bool phase_timing_ = false;
  PrefetchMode prefetch_ = PrefetchMode::kOn;
  PrefetchTuner tuner_;
  // Whether the tuner decides for this step (kAuto, one device-selecting sequence), and whether
  // the step prefetches.
  bool step_tuned_ = false, step_prefetch_ = false;
  bool in_lanes_ = false;  // AttendDeviceSelected runs in one of the backend's lanes
};

}  // namespace icecache
