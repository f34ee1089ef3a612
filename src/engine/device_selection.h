// Selection in the backend's memory for a sequence whose policy ranks pages by their min/max
// key bound (quest), so that on a GPU a decode step selects, fetches and attends without
// waiting for the host.
//
// The host keeps what it already owns: the page lists (KvSequence) and the regions they imply.
// Once per step, Prepare uploads what changed since the last step (new list entries and the
// tail's token count, with one strided copy for all lists), each list's limits (count, sink end,
// window begin, tokens and pages left), and summarizes with Backend::PageBounds the pages that
// became selectable (pages of positional lists never change once they leave the tail). Per
// layer, Select runs Backend::SelectPages on the layer's query row, then Backend::MapPages
// against this sequence's residency map and the working set's slots; the page table it returns
// lives in backend memory and feeds the multi-segment attention.
//
// Requirements: lists in position order (the policy never re-arranges pages), a working set
// without token scratch, and at most kMaxSelectPicks selectable pages per step. The selection is
// Quest's: for the same keys and queries it lists the same pages as QuestIndex::Select (tests
// compare them), up to float rounding of the bound sums.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "index/policy.h"
#include "kv/kv_sequence.h"
#include "kv/working_set.h"

namespace icecache {

class DeviceSelection {
 public:
  // Whether `config`'s policy can select in backend memory (quest).
  static bool Supports(const KvConfig& config);

  // `bounds` (PageBoundsArgs::bounds over the whole pool) is shared by the engine's sequences:
  // every page belongs to one sequence, which summarizes it before selecting it.
  static Result<std::unique_ptr<DeviceSelection>> Create(Backend& backend, const KvConfig& config,
                                                         const KvLayout& layout, int n_layers,
                                                         int n_heads, const PagePool& pool,
                                                         Tensor bounds, const WorkingSet& ws);

  // Before a decode step whose token already has its page slots in `seq` (step true), or after a
  // prefill chunk (step false: only brings bounds and lists up to date, counts nothing).
  Status Prepare(const KvSequence& seq, bool step);
  // Selects `layer`'s pages for the query row `q` ([n_heads * head_dim], backend memory).
  void Select(int layer, const Tensor& q);
  // Maps the selection into `ws` (fetching what is missing); `table` then views the attention's
  // page table over the working set.
  void Map(int layer, const WorkingSet& ws, PageTableView* table);

  // Tokens each (layer, KV head) of a sparse layer attends at this step, summed over the KV heads
  // of one layer, and the candidate pages Quest scores (nodes), for the accounting.
  int64_t planned_tokens(int layer) const { return planned_tokens_[layer]; }
  int64_t planned_nodes(int layer) const { return planned_nodes_[layer]; }
  // Hits and pages fetched so far (reads the device counters; waits for the device).
  Result<WorkingSetCounters> Counters(const KvLayout& layout);
  // Backend bytes of the lists, limits, residency map and scratch (the shared bounds excluded).
  int64_t device_bytes() const;

 private:
  DeviceSelection() = default;
  Status Grow(int64_t entries);
  void ResetResidency();

  Backend* backend_ = nullptr;
  KvConfig config_;
  SelectionLimits limits_;
  KvLayout layout_;
  int layers_ = 0, heads_ = 0, n_heads_ = 0;
  int capacity_ = 0;
  int64_t stride_ = 0;  // list entries per (layer, head) row on the device
  int64_t last_length_ = -1;
  Tensor bounds_;
  // Device state.
  Tensor list_ids_, list_lens_;  // [layers * heads, stride_]
  Tensor limits_dev_;            // [layers * heads, 5]
  Tensor scores_;                // [heads, stride_]
  Tensor out_ids_, out_lens_, out_count_;
  Tensor resident_, slot_page_, slot_len_, table_, fetch_, counters_;
  Tensor bound_ids_, bound_lens_;
  // Host side: mirrors of the uploaded lists and the staging of each step's uploads.
  std::vector<int32_t> host_ids_, host_lens_;  // [layers * heads, stride_]
  std::vector<int32_t> synced_;                // entries uploaded per row
  std::vector<int32_t> bounded_;               // leading entries with current bounds per row
  std::vector<int32_t> bound_stage_ids_, bound_stage_lens_;  // pages to summarize this call
  Tensor limits_stage_, counters_host_;
  KvPoolView host_view_;
  int64_t lookups_ = 0;  // pages selected (as counted by the plan: exact for full pages)
  std::vector<int64_t> planned_tokens_, planned_nodes_;
};

}  // namespace icecache
