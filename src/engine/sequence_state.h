// A sequence as the engine keeps it: its KV pages, the tokens they hold, its KV policy with the
// policy's index and working set, and the accounting of its decode steps.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/attention_recall.h"
#include "engine/device_selection.h"
#include "icecache/engine.h"
#include "index/policy.h"
#include "kv/kv_sequence.h"
#include "kv/working_set.h"

namespace icecache {

// Sums over decode steps; KvStats holds their per-step averages.
struct KvAccounting {
  int64_t steps = 0;
  int64_t sparse_layer_steps = 0;  // (layer, step) pairs that attended a selection
  int64_t dense_layer_steps = 0;
  double tokens_sparse = 0;  // tokens attended, summed over (layer, KV head, step), sparse
  double tokens_dense = 0;   // the same for dense layers
  double context = 0;        // sequence length, summed over steps
  int64_t nodes = 0;
  double select_s = 0, fetch_s = 0, attend_s = 0, total_s = 0;
  double update_s = 0;          // the index's OnAppend after each step (waits for the device first)
  double update_beside_s = 0;   // the part of update_s that ran beside a step's device work
  double prepare_s = 0;         // DeviceSelection::Prepare before each step (host; in total_s)
  int64_t prefetch_steps = 0;   // steps that prefetched (--kv-prefetch)
  WorkingSetCounters ws_start;  // working-set counters when accounting began
  RecallTally recall;           // KvConfig::recall: attention-mass recall samples
  double recall_s = 0;          // time spent measuring recall (not charged to the step)
  std::vector<double> step_s;   // each decode step's time, in order
  std::vector<double> step_update_s;  // the index update after each of those steps
};

struct SequenceState {
  SequenceState(PagePool* pool, KvConfig config) : seq(pool), kv(std::move(config)) {}
  KvSequence seq;
  std::vector<int32_t> history;  // tokens whose KV `seq` holds
  KvConfig kv;
  std::unique_ptr<SequenceIndex> index;  // null for the full policy
  std::unique_ptr<WorkingSet> working_set;
  // Set when the policy selects in backend memory (quest on a GPU, --kv-select): the working
  // set's residency then lives there too.
  std::unique_ptr<DeviceSelection> device_select;
  KvAccounting acct;
  // Seconds the last prompt's index build took after its prefill (bulk build, page summaries);
  // part of time to first token, reported apart from the decode steps' accounting.
  double prompt_index_s = 0;

  bool sparse() const { return index != nullptr; }
  // Keeps the first `keep` tokens (KV and history): the index's background work stops first
  // (SequenceIndex::StopBackground), since it may read the pages the truncation frees. The
  // caller then tells the index (OnTruncate) or replaces it.
  void DropTokens(int64_t keep);
  // Starts a new accounting period (one request).
  void ResetAccounting();
  // The working set's counters (the device's when it selects there).
  WorkingSetCounters WorkingSetNow() const;
  // Per-step averages of the current period.
  KvStats Stats(int n_layers, int n_kv_heads) const;
};

}  // namespace icecache
