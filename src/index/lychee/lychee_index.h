// lychee (LycheeCluster): boundary-aware chunks laid out in their own pages, a 3-level
// centroid/radius index per (layer, KV head), best-bound-first selection with pruning (bounds
// narrowed by the config's search radius: exact at 1, search.h), and lazy
// insertion of the chunks that leave the recent window, with re-clustering when drift passes
// a threshold.
//
// Nothing happens while the context fits the budget (Select then lists every page in order, so
// the result is exactly full attention). Once the context exceeds it, every OnAppend absorbs the
// tail pages that are entirely older than the window: their tokens (with any pending ones) are
// cut into chunks at text boundaries and copied into chunk pages (chunk_layout.h); the sink pages
// stay in place. New chunks join the index of each (layer, KV head) lazily, or the index is
// rebuilt (first time, doubled chunk count, or drift). Layers kept dense are left alone. With
// worker threads, the KV heads of a layer search in parallel (same result as one by one).
//
// config.rank == "centroid": no cluster index is built; Select ranks every chunk page and loose
// page between the sink and the window by its mean key, a linear scan (CentroidRanker,
// index/centroid_rank.h), which is what DeviceSelection computes in device memory. A chunk that
// spans two pages is then ranked page by page.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "index/centroid_rank.h"
#include "index/lychee/chunk_layout.h"
#include "index/lychee/chunker.h"
#include "index/lychee/cluster_index.h"
#include "index/lychee/search.h"
#include "index/policy.h"
#include "index/search_heads.h"

namespace icecache::lychee {

class LycheeIndex : public SequenceIndex {
 public:
  explicit LycheeIndex(const IndexContext& context);

  Status OnAppend(KvSequence& seq, int64_t first, std::span<const int32_t> tokens) override;
  void Select(const KvSequence& seq, int layer, const float* q, std::span<std::vector<PageRef>> out,
              SelectionStats* stats) override;
  void OnTruncate(const KvSequence& seq) override;
  int64_t MemoryBytes() const override;
  int64_t AppendPagesBound(const KvSequence& seq) override;

  // Inspection for tests and benchmarks.
  bool started() const { return started_; }
  const ClusterIndex& head_index(int layer, int head) const {
    return heads_[static_cast<size_t>(layer) * context_.layout.n_kv_heads + head];
  }
  const std::vector<ChunkSpan>& chunks() const { return spans_; }
  int32_t chunk_pages_end() const { return chunk_pages_end_; }  // list index after chunk pages
  int64_t frontier() const { return frontier_; }  // positions before it are in sink or chunks
  int64_t absorbed() const { return absorbed_; }  // positions before it are in head pages
  const ChunkLengths& lengths() const { return lens_; }
  int64_t rebuilds() const;  // index builds, summed over (layer, KV head)
  int64_t skipped_absorptions() const { return skipped_; }  // pool too full to re-arrange

 private:
  bool Indexed(int layer) const { return layer >= context_.config.dense_layers; }
  bool centroid() const { return context_.config.rank == "centroid"; }
  ClusterIndex& head(int layer, int h) {
    return heads_[static_cast<size_t>(layer) * context_.layout.n_kv_heads + h];
  }
  // Takes over a sequence whose head another lychee index arranged (a forked session).
  Status Adopt(const KvSequence& seq);
  void Absorb(KvSequence& seq);
  // Adds chunks [first_chunk, chunks) to every indexed head; inserts or rebuilds.
  void UpdateIndexes(const KvSequence& seq, size_t first_chunk);
  void Rebuild(const KvSequence& seq, int layer, int h);
  void DropIdsBefore(int64_t pos);

  IndexContext context_;
  ChunkLengths lens_;
  BoundaryClassifier classifier_;
  int32_t sink_pages_ = 0;

  bool started_ = false;
  int64_t length_ = 0;        // tokens seen
  int64_t frontier_ = 0;      // first position not in the sink or a finished chunk
  int64_t absorbed_ = 0;      // first position still in the positional tail
  std::vector<int32_t> ids_;  // token ids of positions [frontier_, length_)
  std::vector<ChunkSpan> spans_;
  int32_t chunk_pages_end_ = 0;
  int32_t pending_pages_ = 0;
  int64_t skipped_ = 0;
  std::vector<ClusterIndex> heads_;  // [layer * n_kv_heads + head]

  // One KV head's bound search (what Select does for a list the budget does not cover), with
  // its own scratch and stats so that heads can search on different threads.
  using HeadScratch = HeadSearchScratch<SearchScratch>;
  void SearchHead(const KvSequence& seq, int layer, int h, const float* qh,
                  std::vector<PageRef>* out, HeadScratch* s) const;

  // Scratch reused across calls.
  std::vector<float> keys_;
  std::vector<int64_t> offsets_;
  std::vector<int> searched_;         // KV heads that search at this Select
  std::vector<HeadScratch> scratch_;  // one per worker thread
  CentroidRanker ranker_;             // rank "centroid"
};

}  // namespace icecache::lychee
