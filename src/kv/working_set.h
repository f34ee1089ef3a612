// The working-set tier: a fixed pool of page slots in the backend's memory (the GPU's, or host
// memory on the CPU backend), split into groups, one per (layer, KV head) of a sequence. A
// residency map per group says which host-tier page sits in which slot and at which version.
// Each decode step maps the selected host pages to slots: resident, up-to-date pages are hits;
// missing or stale ones are queued and copied in one batched operation per layer (Flush).
// Eviction is least-recently-used within the group.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_sequence.h"
#include "kv/page_pool.h"

namespace icecache {

struct WorkingSetCounters {
  int64_t lookups = 0;           // selected pages mapped
  int64_t hits = 0;              // of which already resident and current
  int64_t pages_fetched = 0;     // pages copied in for a selection
  int64_t pages_prefetched = 0;  // pages copied in ahead of their layer (device selection)
  int64_t pages_deferred = 0;    // selected pages not attended, copied for the next step
  int64_t bytes_fetched = 0;     // of both
  int64_t rows_gathered = 0;     // single token rows copied (token-level selection)
  int64_t tokens_listed = 0;     // tokens of the mapped pages (kept by device-side selection only)
};

class WorkingSet {
 public:
  // `groups` groups of `capacity` slots each, plus `scratch` slots per group for gathered
  // tokens. Fails if the backend cannot allocate the slots.
  static Result<std::unique_ptr<WorkingSet>> Create(Backend& backend, const KvLayout& layout,
                                                    int groups, int capacity, int scratch);

  // Maps `pages` (host pages of `group`) to slots, appending the slot page ids with the pages'
  // lens to `out`. Missing or stale pages are queued for the next Flush. REQUIRES:
  // pages.size() <= capacity() and no page listed twice.
  void Map(int group, std::span<const PageRef> pages, const PagePool& host,
           std::vector<PageRef>* out);
  // Copies host rows (host slots = page * page_size + offset) into the group's scratch pages
  // and appends those pages to `out`. Host-memory working sets only (the CPU backend).
  Status Gather(int group, std::span<const int32_t> host_slots, const PagePool& host,
                std::vector<PageRef>* out);
  // Copies every queued page (one backend call).
  Status Flush(const PagePool& host);

  KvPoolView view() const { return slots_->view(); }
  int capacity() const { return capacity_; }
  int64_t bytes() const;
  const WorkingSetCounters& counters() const { return counters_; }

 private:
  WorkingSet() = default;
  struct Slot {
    int32_t host_page = -1;
    uint32_t version = 0;
    int64_t last_used = -1;
  };
  struct Group {
    std::vector<Slot> slots;
    std::unordered_map<int32_t, int32_t> where;  // host page -> slot index in the group
  };
  int32_t SlotPage(int group, int slot) const { return group * (capacity_ + scratch_) + slot; }

  Backend* backend_ = nullptr;
  std::unique_ptr<PagePool> slots_;  // storage only; slot pages are addressed directly
  int capacity_ = 0;
  int scratch_ = 0;
  std::vector<Group> groups_;
  int64_t clock_ = 0;  // increments per Map call
  std::vector<int32_t> queue_src_, queue_dst_;
  Tensor ids_dev_;  // device copy of the queue (non-CPU backends)
  WorkingSetCounters counters_;
};

}  // namespace icecache
