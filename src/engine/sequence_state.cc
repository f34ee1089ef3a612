#include "engine/sequence_state.h"

namespace icecache {

void SequenceState::DropTokens(int64_t keep) {
  if (index) index->StopBackground();
  seq.Truncate(keep);
  history.resize(static_cast<size_t>(keep));
}

void SequenceState::ResetAccounting() {
  acct = KvAccounting();
  acct.ws_start = WorkingSetNow();
}

WorkingSetCounters SequenceState::WorkingSetNow() const {
  if (device_select) {
    auto c = device_select->Counters(seq.layout());
    return c.ok() ? *c : WorkingSetCounters();
  }
  return working_set ? working_set->counters() : WorkingSetCounters();
}

KvStats SequenceState::Stats(int n_layers, int n_kv_heads) const {
  KvStats s;
  s.policy = kv.Describe();
  s.decode_steps = acct.steps;
  s.sparse_layers = index ? n_layers - std::min(n_layers, kv.dense_layers) : 0;
  s.dense_layers = n_layers - s.sparse_layers;
  s.host_kv_bytes = seq.num_pages() * seq.layout().page_bytes();
  s.kv_offloaded = seq.pool().offloaded();
  s.kv_on_device = !seq.pool().host_accessible();
  s.working_set_bytes = working_set ? working_set->bytes() : 0;
  s.index_bytes = index ? index->MemoryBytes() : 0;
  s.device_select = device_select != nullptr;
  // Its lists, residency and scratch, and its page summaries as allocated (a row per listed
  // page, plus the rows of the last growth not yet used).
  s.device_index_bytes =
      device_select ? device_select->device_bytes() + device_select->bounds_bytes() : 0;
  if (index) {
    const SequenceIndex::InsertionCounts ins = index->insertion_counts();
    s.tokens_routed_device = ins.routed;
    s.tokens_routed_host = ins.searched;
  }
  s.prompt_index_seconds = prompt_index_s;
  s.prefetch_steps = acct.prefetch_steps;
  s.recall_samples = acct.recall.samples();
  s.recall_mean = acct.recall.Mean();
  s.recall_p10 = acct.recall.Percentile(0.1);
  s.recall_min = acct.recall.min();
  if (acct.steps == 0) return s;
  const double steps = static_cast<double>(acct.steps);
  const WorkingSetCounters now = WorkingSetNow();  // one read (a wait) of the device counters
  if (acct.sparse_layer_steps > 0) {
    // Device-side selection counts the tokens it lists in device memory.
    const double sparse_tokens =
        device_select ? static_cast<double>(now.tokens_listed - acct.ws_start.tokens_listed)
                      : acct.tokens_sparse;
    s.tokens_attended = sparse_tokens / (static_cast<double>(acct.sparse_layer_steps) * n_kv_heads);
    s.nodes_visited = static_cast<double>(acct.nodes) /
                      (static_cast<double>(acct.sparse_layer_steps) * n_kv_heads);
  }
  if (acct.dense_layer_steps > 0) {
    s.tokens_attended_dense =
        acct.tokens_dense / (static_cast<double>(acct.dense_layer_steps) * n_kv_heads);
  }
  s.context_tokens = acct.context / steps;
  if (working_set) {
    const WorkingSetCounters& a = acct.ws_start;
    s.pages_fetched = static_cast<double>(now.pages_fetched - a.pages_fetched) / steps;
    s.pages_prefetched = static_cast<double>(now.pages_prefetched - a.pages_prefetched) / steps;
    s.pages_deferred = static_cast<double>(now.pages_deferred - a.pages_deferred) / steps;
    s.bytes_fetched = static_cast<double>(now.bytes_fetched - a.bytes_fetched) / steps;
    const int64_t lookups = now.lookups - a.lookups;
    s.hit_rate = lookups > 0 ? static_cast<double>(now.hits - a.hits) / lookups : 0;
  }
  s.select_seconds = acct.select_s / steps;
  s.fetch_seconds = acct.fetch_s / steps;
  s.attend_seconds = acct.attend_s / steps;
  s.update_seconds = (acct.update_s - acct.update_beside_s) / steps;
  s.update_beside_seconds = acct.update_beside_s / steps;
  s.prepare_seconds = acct.prepare_s / steps;
  s.other_seconds = std::max(0.0, (acct.total_s - acct.recall_s - acct.select_s - acct.fetch_s -
                                   acct.attend_s - (acct.update_s - acct.update_beside_s)) /
                                      steps);
  return s;
}

}  // namespace icecache
