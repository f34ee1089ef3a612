// The physical side of icecache: the tokens of one (layer, KV head) list laid out in leaf pages.
// A started list is
//
//   [sink pages][leaf pages: leaf i at list index sink_pages + i][positional tail]
//
// The sink pages stay where they were. Tail pages that leave the recent window are absorbed:
// their tokens are copied (K, V and position rows, bit for bit) into leaf pages and the emptied
// pages are freed, so every token stays in exactly one page of its list. Each function checks
// that the pool has spare room (PagePool::spare: free pages beyond the sequences' growth reserve)
// for every page it may allocate before it changes anything; when it does not, it returns false
// and the list is unchanged (its old tail pages stay in the tail and are scored as loose pages).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "index/icecache/leaf_tree.h"
#include "index/icecache/segment_layout.h"
#include "kv/kv_sequence.h"

namespace icecache::ice {

// Bulk build: every token of the leaf pages and of the first `absorb` tail pages is laid out
// anew in leaves of up to page_size tokens, run by run (segment_layout.h), and `tree` is rebuilt
// over them. `ready` holds layouts of the first runs made beforehand: each one whose source pages
// are still those of its run is installed as it is, the others are laid out now. Every layout
// of `ready` is consumed (installed or discarded). Needs as many spare pages as the runs laid out
// now make leaves; returns false (the list unchanged) without them.
bool RebuildList(KvSequence& seq, int layer, int head, int32_t sink_pages, int32_t absorb,
                 LeafTree* tree, BuildScratch* scratch, std::span<SegmentLayout> ready = {});
// The spare pages a bulk build of list pages [sink_pages, end) needs with the layouts `ready`.
int64_t RebuildPages(const std::vector<PageRef>& pages, int32_t sink_pages, int32_t end,
                     int page_size, std::span<const SegmentLayout> ready = {});

// Dynamic insertion: each token of the first `absorb` tail pages (in position order) goes to
// its nearest leaf; a full leaf splits in two pages by balanced 2-means over its keys and the
// new one. Needs InsertPages(absorb, page_size, pool.holding()) spare pages.
//
// `routed` (empty, or one per absorbed token in position order): a leaf chosen elsewhere
// (KeyRoute: the nearest mean key on the device) that the token joins instead of the tree's
// nearest leaf; -1, or a leaf the tree does not have, routes by the tree. `followed` (may be
// null) receives how many tokens went where `routed` said.
//
// While the pool holds frees (PagePool::HoldFrees: the device may still read the pages the list
// showed before), no row a page already holds is rewritten: a token goes after a leaf page's last
// row, and a split writes both halves to fresh pages (the old page is freed, so held).
// REQUIRES: !tree->empty().
bool InsertIntoList(KvSequence& seq, int layer, int head, int32_t sink_pages, int32_t absorb,
                    LeafTree* tree, std::span<const int32_t> routed = {},
                    int64_t* followed = nullptr);

// Spare pages InsertIntoList needs for `absorb` pages: at most one split per token, of one fresh
// page, or of two while the pool holds frees.
inline int64_t InsertPages(int32_t absorb, int page_size, bool holding) {
  return static_cast<int64_t>(absorb) * page_size * (holding ? 2 : 1);
}

// Builds `tree` over a list that another icecache index arranged (a forked sequence): every page
// between the sink pages and the tail becomes a leaf as it is.
Status AdoptList(const KvSequence& seq, int layer, int head, int32_t sink_pages, LeafTree* tree);

}  // namespace icecache::ice
