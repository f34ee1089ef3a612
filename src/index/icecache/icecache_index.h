// icecache: one LeafTree per (layer, KV head) over post-RoPE keys, whose leaves are physical
// KV pages of semantically close tokens, searched top-down at every decode step.
//
// Lists are independent: when the engine lends worker threads, OnAppend absorbs them in
// parallel, in waves of lists whose worst cases fit the pool's spare pages together (one wave
// when there is room for all; same result as one by one, up to which page ids the lists get).
//
// Nothing happens while the context fits the budget (Select then lists every page in order, so
// the result is exactly full attention). Once it exceeds the budget, every OnAppend absorbs the
// tail pages that are entirely older than the recent window (the sink pages stay in place; once
// built, list i absorbs i mod page_size tokens later, so that the lists absorb at different
// steps, and the pages waiting are scored as loose pages meanwhile):
// the first time (and whenever the tokens to absorb are at least as many as those indexed, as
// during a chunked prefill) the list is bulk-built anew, otherwise each token is inserted into
// its nearest leaf, splitting full leaves (list_layout.h). Layers kept dense are left alone.
// A bulk build of more than 32K tokens partitions runs of them on their own (the first half, then
// half of the rest, ...: segment_layout.h); when the model runs on a GPU, the runs of a long first
// prompt are laid out on host threads while its later chunks prefill (OnPrefillChunk), so that
// little is left to do after its last chunk.
//
// Select: sink pages first, then the leaves (and any loose pages) chosen by BestFirstSelect, or by
// ExactSelect when config.exact is set (tree_search.h), then the window pages. The query heads
// of a GQA group share one selection: bounds and scores are the maximum over the group. With
// worker threads, the KV heads of a layer search in parallel (same result as one by one).
//
// config.rank == "centroid": instead of a search, every leaf and loose page between the sink and
// the window is ranked by its mean key, a linear scan (CentroidRanker, index/centroid_rank.h).
// This is exactly what DeviceSelection computes in device memory (tests compare them).
//
// config.reuse_layers = N > 1: the sparse layers form groups of N consecutive layers; the first
// layer of a group searches, and the others of the same decode step reuse its selection as token
// positions (each layer has its own tree and pages, so pages cannot be shared): they take the
// pages of their own list that hold the most of the positions the first layer chose, by
// overlap, within the budget, without scoring anything. A layer whose group's first layer did
// not select at this sequence length searches itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <span>
#include <thread>
#include <vector>

#include "index/centroid_rank.h"
#include "index/icecache/head_norm.h"
#include "index/icecache/leaf_tree.h"
#include "index/icecache/list_layout.h"
#include "index/icecache/tree_search.h"
#include "index/key_reader.h"
#include "index/policy.h"
#include "index/regions.h"
#include "index/search_heads.h"

namespace icecache::ice {

class IceCacheIndex : public SequenceIndex {
 public:
  // Leaves the search gathers as candidates beyond the pages it has room for.
  static constexpr int kExtraLeaves = 8;

  explicit IceCacheIndex(const IndexContext& context);
  ~IceCacheIndex() override;

  Status OnAppend(KvSequence& seq, int64_t first, std::span<const int32_t> tokens) override;
  // A long first prompt's bulk build runs ahead: every run (segment_layout.h) of its lists whose
  // pages are written, and that its OnAppend will lay out, is laid out on the workers in the
  // background while the later chunks prefill; OnAppend then installs those layouts.
  Status OnPrefillChunk(const KvSequence& seq, int64_t prompt_end,
                        const std::function<void()>& kv_ready) override;
  void Select(const KvSequence& seq, int layer, const float* q, std::span<std::vector<PageRef>> out,
              SelectionStats* stats) override;
  void StopBackground() override { DropAhead(); }
  void OnTruncate(const KvSequence& seq) override;
  int64_t MemoryBytes() const override;
  int64_t AppendPagesBound(const KvSequence& seq) override;
  bool UpdatesBesideDeviceReads() const override { return true; }
  // Keeps each route until its token is taken in (InsertIntoList follows it); a list's bulk
  // build drops the routes it holds (they name entries of the old arrangement).
  void AcceptRoutes(std::span<const KeyRoute> routes) override;
  InsertionCounts insertion_counts() const override {
    return {routed_tokens_.load(), searched_tokens_.load()};
  }

  // Inspection for tests and benchmarks.
  bool started() const { return started_; }
  bool list_started(int layer, int head) const { return state(layer, head).started; }
  const LeafTree& tree(int layer, int head) const { return state(layer, head).tree; }
  int32_t sink_pages() const { return sink_pages_; }
  int64_t rebuilds() const { return rebuilds_.load(); }
  int64_t insertions() const { return insertions_.load(); }
  int64_t skipped_absorptions() const { return skipped_.load(); }  // pool too full to re-arrange
  int64_t parallel_appends() const { return parallel_appends_; }   // waves run in parallel
  int64_t runs_ahead() const { return runs_ahead_; }  // prompt runs laid out during the prefill
  // How far the search goes with room for `pages` more pages: the config's search radius, and
  // pages + kExtraLeaves candidate leaves.
  static SearchWidth Width(const KvConfig& config, int64_t pages);
  // How many positions after leaving the window a token of list (layer, head) waits, once the
  // list's tree is built, before it is taken in: the list's index mod page_size (staggered
  // insertions, below), or 0 with ICECACHE_INDEX_STAGGER=0.
  static int64_t Stagger(const KvConfig& config, const KvLayout& layout, int layer, int head) {
    if (!Staggered()) return 0;
    const int64_t list =
        static_cast<int64_t>(layer - config.dense_layers) * layout.n_kv_heads + head;
    return list % layout.page_size;
  }

 private:
  struct ListState {
    LeafTree tree;
    bool started = false;  // sink pages left the tail; pages before the tail are leaves
    std::map<int64_t, int32_t> routes;  // AcceptRoutes: token position -> list entry
    // Mass scoring: per query head, how much the last search's picks added to the sink and
    // window's log-sum-exp (head_norm.h); empty before the first.
    std::vector<float> pick_gain;
  };
  bool Indexed(int layer) const { return layer >= context_.config.dense_layers; }
  const ListState& state(int layer, int head) const {
    return lists_[static_cast<size_t>(layer) * context_.layout.n_kv_heads + head];
  }
  ListState& state(int layer, int head) {
    return lists_[static_cast<size_t>(layer) * context_.layout.n_kv_heads + head];
  }
  // OnAppend's work, for the first `len` tokens of `seq` (those written).
  Status Append(KvSequence& seq, int64_t len);
  // A list's absorption limit for the window's `limit` (positions before it left the window).
  // Insertions into a built tree are staggered by up to a page of tokens over the lists, so that
  // a decode step inserts a page into about 1 / page_size of them instead of every page_size
  // steps into all at once; bulk builds (an empty tree) take everything up to `limit`.
  int64_t ListLimit(const ListState& s, int layer, int head, int64_t limit) const {
    if (s.tree.empty()) return limit;
    return limit - Stagger(context_.config, context_.layout, layer, head);
  }
  // ICECACHE_INDEX_STAGGER=0 turns the staggering off (all lists absorb at the same steps), for
  // measurements.
  static bool Staggered();
  // The list's runs laid out ahead (empty when none).
  std::span<SegmentLayout> AheadOf(int layer, int head);
  // Waits for the runs being laid out in the background (OnPrefillChunk).
  void JoinAhead();
  // Waits for them and returns every laid-out run's pages to the pool.
  void DropAhead();
  // Whether some indexed list of `seq` has pages before its tail (another index arranged it).
  bool Arranged(const KvSequence& seq) const;
  // Takes over lists that another icecache index arranged (a forked session).
  Status Adopt(const KvSequence& seq);
  void Absorb(KvSequence& seq, int layer, int head, int64_t limit, BuildScratch* scratch);
  // Pages Absorb(seq, layer, head, limit) may allocate at most (before it frees any).
  int64_t AbsorbPages(const KvSequence& seq, int layer, int head, int64_t limit);
  // Lists every page of the list (exactly full attention) when the context fits the budget.
  bool SelectAllIfCovered(const KvSequence& seq, int layer, int head,
                          std::vector<PageRef>* out) const;
  // One KV head's tree search (BestFirstSelect, or ExactSelect in exact mode), with its own scratch
  // and stats so that heads can search on different threads.
  struct HeadScratch : HeadSearchScratch<SearchScratch> {
    HeadLse sink_window, picked;  // mass scoring's log-sum-exps
    std::vector<float> shift;     // [group]: the query's shift (TreeQuery::shift)
  };
  // Writes only the list's own state (its pick gain): heads search on different threads.
  void SearchHead(const KvSequence& seq, int layer, int h, const float* qh,
                  std::vector<PageRef>* out, HeadScratch* s);
  // Mass scoring (head_norm.h): each head's estimated normalizer into s->shift, from the sink
  // and window and the list's last pick gain.
  void MassShift(const KvSequence& seq, int layer, int h, const ListRegions& r,
                 const TreeQuery& query, HeadScratch* s) const;
  // After the search: how much s->picks add to the sink and window's log-sum-exp per head, kept
  // as the list's pick gain for its next search.
  void RecordGain(const KvSequence& seq, int layer, int h, const TreeQuery& query, HeadScratch* s);
  // Scores pages [begin, end) of a list (loose pages: in no leaf yet) into s->loose /
  // s->loose_page: by their ball's bound in exact mode, else exactly.
  void ScoreLoose(const std::vector<PageRef>& pages, int32_t begin, int32_t end,
                  const TreeQuery& query, KeyReader& reader, HeadScratch* s) const;
  // Appends the positions of the selected pages between the sink and the window (layer reuse).
  static void RecordPositions(const ListRegions& r, const std::vector<PageRef>& selected,
                              const KeyReader& reader, std::vector<int32_t>* positions);
  // The first layer of `layer`'s reuse group, or -1 when `layer` searches itself.
  int ReuseLeader(int layer) const;
  // Selects, for each KV head, the pages holding the most of the leader's positions.
  void SelectReused(const KvSequence& seq, int layer, std::span<std::vector<PageRef>> out);

  IndexContext context_;
  // Only the best-first search (rank soft) reads the trees' farthest keys and variances.
  bool search_stats_;
  int32_t sink_pages_ = 0;
  bool started_ = false;
  std::atomic<int64_t> rebuilds_{0};
  std::atomic<int64_t> insertions_{0};
  std::atomic<int64_t> skipped_{0};
  std::atomic<int64_t> routed_tokens_{0};
  std::atomic<int64_t> searched_tokens_{0};
  int64_t parallel_appends_ = 0;
  std::vector<BuildScratch> scratch_;  // one per worker thread, released after each OnAppend

  // The prompt's runs laid out ahead (OnPrefillChunk): per sparse list, runs [0, ahead_runs_).
  // While `ahead_thread_` runs it owns the runs it was given; the rest are the caller's.
  std::vector<std::vector<SegmentLayout>> ahead_;  // [(layer - dense_layers) * heads + head]
  int32_t ahead_runs_ = 0;
  PagePool* ahead_pool_ = nullptr;
  std::thread ahead_thread_;
  std::atomic<bool> ahead_busy_{false};
  std::vector<BuildScratch> ahead_scratch_;
  int64_t runs_ahead_ = 0;
  std::vector<ListState> lists_;  // [layer * n_kv_heads + head]

  // The positions (between sink and window) the last searching layer selected, per KV head.
  struct Reuse {
    int layer = -1;
    int64_t length = -1;
    std::vector<std::vector<int32_t>> positions;
  };
  Reuse reuse_;

  // Scratch reused across calls.
  std::vector<int> searched_;              // KV heads that search at this Select
  std::vector<HeadScratch> head_scratch_;  // one per worker thread
  std::vector<uint8_t> marked_;
  std::vector<std::pair<int32_t, int32_t>> overlap_;
  CentroidRanker ranker_;  // rank "centroid"
};

}  // namespace icecache::ice
