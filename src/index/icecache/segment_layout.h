// Bulk builds lay out a list run by run. The pages to partition are cut into runs in list order
// (RunLengths: the first half, then half of the rest, and so on, down to runs of about
// kMinRunTokens tokens), and each run is partitioned on its own into leaves of up to P tokens
// (balanced bisection in k' space under the run's own M) and copied into fresh pages. A run's
// layout depends only on its own pages and the length of the whole range, so the early runs of
// a long prompt can be laid out on host threads while its later chunks prefill
// (IceCacheIndex::OnPrefillChunk), with the same leaves as when they are laid out at its end.
// The tree over all runs' leaves is built once, when the layouts are installed (RebuildList).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kv/kv_sequence.h"

namespace icecache::ice {

// Ranges of up to 2 * kMinRunTokens tokens are laid out in one run (a 32K-token prompt is
// partitioned as a whole); longer ones are halved until that holds, so that the first half of a
// prompt is partitioned as a whole while its second half prefills.
inline constexpr int kMinRunTokens = 16384;

// The lengths, in pages, of the runs of a bulk build of `pages` pages of `page_size` tokens.
std::vector<int32_t> RunLengths(int32_t pages, int page_size);

// Working memory of bulk builds, kept across the lists one thread builds (a 128K-token list
// gathers 64 MiB of f32 keys: allocating that afresh per list costs page faults and unmaps that
// stall every other thread of the process).
struct BuildScratch {
  std::vector<float> keys, sq, ext, group_keys;
  std::vector<std::pair<int32_t, int>> rows;  // (page id, row) of each token to lay out
};

// One run laid out in fresh leaf pages, not yet part of its list.
struct SegmentLayout {
  std::vector<PageRef> source;  // the pages it lays out, as the list held them
  std::vector<PageRef> leaves;  // the fresh pages, in leaf order
  std::vector<float> centroid;  // [leaves][dim]: each leaf's mean key (BallOf)
  std::vector<float> radius;    // [leaves]
  std::vector<float> far;       // [leaves][dim]: each leaf's key farthest from its mean (or empty)
  std::vector<float> variance;  // [leaves][dim]: each leaf's per-dimension key variance (or empty)
  std::vector<float> sq_norm;   // |k|^2 of every laid-out token, leaf after leaf

  // Whether `pages` are still the pages it was laid out from (same ids and fill counts).
  bool Matches(std::span<const PageRef> pages) const;
};

// Squared norms of the rows of `keys` ([n][dim]) into `sq`; returns their maximum.
float SqNorms(const std::vector<float>& keys, int dim, std::vector<float>* sq);

// Leaves a run of `source` pages lays out: ceil(tokens / page_size).
int64_t LeavesFor(std::span<const PageRef> source, int page_size);

// Partitions the tokens of `out->source` into ceil(tokens / P) leaves and copies their rows (K, V
// and position, bit for bit) into fresh pages of `pool`. Returns false, with nothing allocated,
// when the pool has no spare room (PagePool::spare). Reads only the source pages and writes only
// the fresh ones, so it may run while other pages of the pool are written. `search_stats`: also
// record each leaf's farthest key and key variances (LeafTree::search_stats); otherwise `far` and
// `variance` stay empty.
bool LayOutSegment(PagePool& pool, SegmentLayout* out, BuildScratch* scratch, bool search_stats);

// Returns a layout's leaf pages to the pool (a layout that will not be installed).
void DiscardSegment(PagePool& pool, SegmentLayout* layout);

}  // namespace icecache::ice
