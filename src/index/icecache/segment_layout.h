// Bulk builds lay out a list segment by segment. The pages to partition are cut into runs of
// SegmentPages(P) pages in list order (the last run shorter), and each run is partitioned on its
// own into leaves of up to P tokens (balanced bisection in k' space under the run's own M) and
// copied into fresh pages. A run's layout depends only on its own pages, so the early runs of a
// long prompt can be laid out on host threads while its later chunks prefill
// (IceCacheIndex::OnPrefillChunk), with the same leaves as when they are laid out at its end.
// The tree over all runs' leaves is built once, when the layouts are installed (RebuildList).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kv/kv_sequence.h"

namespace icecache::ice {

// Tokens per run of a bulk build: large enough that a run's leaves are picked among many
// candidates, small enough that a 128K-token prompt's runs spread over its prefill.
inline constexpr int kSegmentTokens = 16384;
inline int32_t SegmentPages(int page_size) { return std::max(2, kSegmentTokens / page_size); }

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
  std::vector<float> sq_norm;   // |k|^2 of every laid-out token, leaf after leaf

  // Whether `pages` are still the pages it was laid out from (same ids and fill counts).
  bool Matches(std::span<const PageRef> pages) const;
};

// Partitions the tokens of `out->source` into ceil(tokens / P) leaves and copies their rows (K, V
// and position, bit for bit) into fresh pages of `pool`. Returns false, with nothing allocated,
// when the pool has no room. Reads only the source pages and writes only the fresh ones, so it may
// run while other pages of the pool are written.
bool LayOutSegment(PagePool& pool, SegmentLayout* out, BuildScratch* scratch);

// Returns a layout's leaf pages to the pool (a layout that will not be installed).
void DiscardSegment(PagePool& pool, SegmentLayout* layout);

}  // namespace icecache::ice
