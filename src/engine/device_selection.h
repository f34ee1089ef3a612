// Selection in the backend's memory, so that on a GPU a decode step selects, fetches and attends
// without waiting for the host. Policies: quest (pages ranked by their min/max key bound), and
// icecache or lychee with rank "centroid" (leaves, chunk pages and loose pages ranked by the
// group's best q.c over their mean key). The page summaries (BoundRows per page: min | max keys in
// the KV dtype, or the mean key in Q8_0) live in this sequence's backend tensor, one summary row
// per list entry, whatever page the entry holds: the tensor stays the size of the lists, not of
// the pool (which reserves room for partly filled pages).
//
// The host keeps what it already owns: the page lists (KvSequence), the regions they imply and,
// for icecache and lychee, the structure that arranges tokens into leaf or chunk pages. Once per
// step, Prepare uploads the entries that changed since the last step (one copy, then one
// Backend::ScatterI32 per array): a list whose stamp is unchanged only gained tokens at its end,
// so only entries from its previous last page on are compared; a list the index re-arranged (new
// stamp) is compared where its edit says (HeadEdit), or entry by entry (page id, token count and
// page version). It uploads each list's limits (count, sink end, window begin,
// tokens and pages left) and the entries' summary rows, and summarizes with Backend::PageBounds
// every page whose contents are new to it (the growing tail page included), marking any resident
// copy of such a page stale. Per layer, Select runs Backend::SelectPages on the layer's query row,
// then Backend::MapPages against this sequence's residency map and the working set's slots; the
// page table it returns lives in backend memory and feeds the multi-segment attention.
//
// Requirements: a working set without token scratch, at most kMaxSelectPicks selectable pages per
// step, and for mean keys a head dim that is a multiple of 32 (Q8_0 blocks). For the same keys
// and queries the selection lists the pages of QuestIndex::Select (quest) or of IceCacheIndex /
// LycheeIndex::Select with rank centroid (tests compare them), up to float rounding of the score
// sums (the CPU backend's reference gives them bit for bit).
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
  // Whether `config`'s policy can select in backend memory for keys of `head_dim`: quest,
  // icecache with rank centroid (not exact, no layer reuse), or lychee with rank centroid.
  static bool Supports(const KvConfig& config, int head_dim);
  // Whether the policy keeps its lists in position order (quest), so that a page's summary stays
  // valid once it left the window.
  static bool KeepsPositions(const KvConfig& config) { return config.policy == "quest"; }
  // Rows of the page summary: 2 (min | max key, quest) or 1 (mean key, icecache).
  static int BoundRows(const KvConfig& config) { return config.policy == "quest" ? 2 : 1; }

  static Result<std::unique_ptr<DeviceSelection>> Create(Backend& backend, const KvConfig& config,
                                                         const KvLayout& layout, int n_layers,
                                                         int n_heads, const PagePool& pool,
                                                         const WorkingSet& ws);

  // Before a decode step whose token already has its page slots in `seq` but whose keys are not
  // written yet (`pending` 1), and after prefill chunks (`pending` 0: everything is written), so
  // that a prompt's pages are summarized during prefill.
  //
  // Uploads: kBlocking copies wait until they are done (each waits for the device's queue);
  // kQueued copies from this object's staging memory are queued behind the device's work, and
  // the caller guarantees that they have run before the next Prepare (a LayerAttention::Prepare,
  // inside the transformer's input fence).
  enum class Upload { kBlocking, kQueued };
  Status Prepare(const KvSequence& seq, int pending, Upload upload = Upload::kBlocking);
  // Prepare in three calls with the same arguments, so that a batch's sequences can run the
  // middle one, host work alone, on several threads: BeginPrepare and FinishPrepare call the
  // backend (one thread at a time); CollectChanges only reads `seq` and this object's host state,
  // so calls for different objects may run at once (sequences may share a pool, which no one
  // changes meanwhile). A failure of either backend phase makes the next call start over.
  Status BeginPrepare(const KvSequence& seq, int pending, Upload upload);
  void CollectChanges(const KvSequence& seq, int pending);
  Status FinishPrepare(const KvSequence& seq, Upload upload);
  // Selects `layer`'s pages for the query row `q` ([n_heads * head_dim], backend memory).
  void Select(int layer, const Tensor& q);
  // Maps the selection into `ws` (fetching what is missing); `table` then views the attention's
  // page table over the working set.
  void Map(int layer, const WorkingSet& ws, PageTableView* table);
  // The arguments Select and Map pass the backend (for Backend::SelectPagesBatch and
  // MapPagesBatch over a step's sequences), and the page table a map writes.
  PageSelectArgs SelectArgs(int layer, const Tensor& q) const {
    return SelectArgs(layer, q, LayerPicks(layer));
  }
  PageMapArgs MapArgs(int layer, const WorkingSet& ws) const;
  PageTableView Table() const;
  // Selects `layer`'s pages for an early estimate `q` of its queries (all query heads, or one
  // per KV head: each list then ranks by that head alone) and brings them into `ws`
  // (MapPages' prefetch mode: the page the step is still writing is left alone). Select and Map
  // with the real queries follow; they find the prefetched pages resident, and select what they
  // would have selected without it. `percent` < 100: only that share of the pages the budget
  // fills is brought in, each list's sink and best-ranked pages first. `defer_copy`: the pages
  // are placed but not copied until CopyPrefetched(layer, ws), which must follow before Select
  // and Map of `layer` (and before any other Prefetch).
  void Prefetch(int layer, const Tensor& q, const WorkingSet& ws, int percent = 100,
                bool defer_copy = false);
  void CopyPrefetched(int layer, const WorkingSet& ws);

  // Fetch behind (KvConfig::fetch "behind"): whether this step's maps defer the selected pages
  // that are not resident (MapPages' defer_limits), decided by each Prepare: every decode step
  // whose previous Prepare was a decode step's too (the one after a prompt or a start over
  // fetches now). Then CopyBehind(layer, ws), queued after Map(layer) and before the next
  // Prepare, brings the deferred pages in (a prefetch-mode map of the same selection, which
  // keeps its own copy of each layer's picks, so that it may run as side work beside the next
  // layers' Select and Map).
  bool defers() const { return defer_step_; }
  void CopyBehind(int layer, const WorkingSet& ws);
  PageMapArgs BehindMapArgs(int layer, const WorkingSet& ws) const;

  // Insertion routes on the device (--kv-route device, icecache only): from then on, each
  // decode step's Prepare routes the tokens of every loose page (a whole page between a list's
  // leaves and its window) not routed before to the leaf entry with the nearest mean key
  // (Backend::RouteKeys, after the step's summaries), and TakeRoutes hands them over once the
  // step's device work is done, for the index update that takes those tokens in.
  Status EnableRoutes();
  bool routes_enabled() const { return route_; }
  // The routes of the last Prepare, if any (waits for the device); none twice.
  Status TakeRoutes(std::vector<KeyRoute>* out);

  // The candidate pages scored at this step for `layer` (nodes), summed over its KV heads.
  int64_t planned_nodes(int layer) const { return planned_nodes_[layer]; }
  // Pages listed, hits, pages fetched and prefetched, and tokens listed so far (reads the device
  // counters; waits for the device).
  Result<WorkingSetCounters> Counters(const KvLayout& layout);
  // Backend bytes of the lists, limits, residency map and scratch (the summaries excluded).
  int64_t device_bytes() const;
  // Backend bytes of the page summaries it ranks by (allocated rows, in use or not).
  int64_t bounds_bytes() const {
    return bounds_.nbytes() + (spread_.empty() ? 0 : spread_.nbytes());
  }

 private:
  DeviceSelection() = default;
  // BeginPrepare's work: a start over where needed, and device lists long enough for `seq`.
  Status Begin(const KvSequence& seq, int pending, Upload upload);
  // Host to backend memory, in one copy: the lists' limits and pending pages, the entries Sync
  // found changed (changed_*) and the pages to summarize (bound_stage_*). Then scatters the
  // changed entries into the device's lists and points limits_dev_, pending_dev_ and bound_*_
  // at their parts of upload_dev_. Blocking: returns once the copy is done. Queued: staged in
  // upload_stage_, which the caller leaves alone until the copy has run (the next Prepare).
  Status Send(Upload upload);
  Status Grow(int64_t entries);
  // A free summary row (grows the bookkeeping; GrowSummaries makes the tensor that large).
  int32_t TakeRow();
  void GiveRow(int32_t row);
  Status GrowSummaries();
  void ResetResidency();

  Backend* backend_ = nullptr;
  KvConfig config_;
  SelectionLimits limits_;
  KvLayout layout_;
  int layers_ = 0, heads_ = 0, n_heads_ = 0;
  int capacity_ = 0;
  int64_t stride_ = 0;  // list entries per (layer, head) row on the device
  int64_t last_length_ = -1;
  bool start_over_ = false;  // the last Prepare failed
  Tensor bounds_, spread_;   // summaries (and mean keys' spreads), one row per list entry
  // Device state.
  Tensor list_ids_, list_lens_, list_rows_;  // [layers * heads, stride_]
  // Views into upload_dev_, set by each Send: the lists' limits ([layers * heads, 5]), the page
  // each list's step writes or -1 ([layers * heads]), and the pages to summarize.
  Tensor limits_dev_, pending_dev_;
  Tensor bound_ids_, bound_lens_, bound_rows_;
  // One selection's scratch and results: the scores ([heads, stride_], made by Grow), the pages
  // picked and their token counts ([heads, max pages]), their number ([heads]) and the map's copy
  // list ([heads, 1 + 2 * capacity]).
  struct Picks {
    Tensor scores, ids, lens, count, fetch;
  };
  Status AllocatePicks(Picks* p) const;
  PageSelectArgs SelectArgs(int layer, const Tensor& q, const Picks& picks) const;
  PageMapArgs MapArgs(int layer, const WorkingSet& ws, const Picks& picks) const;
  // The prefetch's map of `layer` (prefetch mode, over prefetch_picks_).
  PageMapArgs PrefetchMapArgs(int layer, const WorkingSet& ws) const;
  // The step's Select and Map use picks_; Prefetch has its own, so that it may run as side work
  // beside the main stream's Select and Map of another layer.
  Picks picks_, prefetch_picks_;
  // Fetch behind: the picks of every layer ([layers * heads, ...]: ids, lens, count), which
  // LayerPicks hands out in place of picks_' (layer_picks_: views of them with picks_' scores
  // and copy list, set by Create and Grow), and the copy list of CopyBehind; a row of -1s (no
  // pending page: its map runs after the step's keys are written).
  bool behind_ = false, defer_step_ = false, last_prepare_decode_ = false;
  int now_pages_ = 0;  // MapPages' defer_after (ICECACHE_FETCH_NOW_PERCENT)
  Tensor behind_ids_, behind_lens_, behind_count_, behind_fetch_, no_pending_;
  std::vector<Picks> layer_picks_;
  const Picks& LayerPicks(int layer) const;
  Tensor resident_, slot_page_, slot_len_, slot_used_, table_, counters_;
  int32_t clock_ = 0;  // decode steps prepared (PageMapArgs::clock)
  // Host side: mirrors of the uploaded lists ([layers * heads, stride_]: page id, token count,
  // page version when it was summarized or kNotSummarized) and per row the entries uploaded and
  // the list stamp seen last.
  static constexpr uint64_t kNotSummarized = ~uint64_t{0};
  std::vector<int32_t> host_ids_, host_lens_, host_rows_;
  // Summary rows: [0, rows_handed_out_) were handed out, free_rows_ came back.
  int64_t rows_handed_out_ = 0;
  std::vector<int32_t> free_rows_;
  std::vector<uint64_t> host_vers_;
  std::vector<int32_t> synced_;
  std::vector<uint64_t> seen_stamp_;
  // Pages to summarize this call, their token counts and summary rows.
  std::vector<int32_t> bound_stage_ids_, bound_stage_lens_, bound_stage_rows_;
  // Entries changed this call: flat index into the lists, page id, token count, summary row.
  std::vector<int32_t> changed_idx_, changed_ids_, changed_lens_, changed_rows_;
  // Per list this call: limits (count, sink end, window begin, tokens and pages left) and the
  // page the step writes.
  std::vector<int32_t> limits_host_, pending_host_;
  Tensor counters_host_;
  // What Send uploads, staged (pinned on a GPU) and in backend memory.
  Tensor upload_stage_, upload_dev_;
  bool queued_since_sync_ = false;  // an upload was queued and may not have run yet
  KvPoolView host_view_;
  std::vector<int64_t> planned_nodes_;
  // Routes (EnableRoutes). Per list: positions below routed_to_ were routed. Per key of this
  // call: its host slot, its range (list row, first entry, end entry) and its route's list and
  // position (non-empty after FinishPrepare: route_dev_ holds routes not taken yet);
  // route_dev_ receives the entries, route_host_ reads them back.
  bool route_ = false;
  std::vector<int64_t> routed_to_;
  std::vector<int32_t> route_slots_, route_ranges_;
  std::vector<KeyRoute> route_keys_;
  Tensor route_slots_dev_, route_ranges_dev_, route_dev_, route_host_;
};

}  // namespace icecache
