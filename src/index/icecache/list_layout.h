// The physical side of icecache: the tokens of one (layer, KV head) list laid out in leaf pages.
// A started list is
//
//   [sink pages][leaf pages: leaf i at list index sink_pages + i][positional tail]
//
// The sink pages stay where they were. Tail pages that leave the recent window are absorbed:
// their tokens are copied (K, V and position rows, bit for bit) into leaf pages and the emptied
// pages are freed, so every token stays in exactly one page of its list. Each function checks
// that the pool has room for every page it may allocate before it changes anything; when it
// does not, it returns false and the list is unchanged (its old tail pages stay in the tail and
// are scored as loose pages).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "index/icecache/leaf_tree.h"
#include "kv/kv_sequence.h"

namespace icecache::ice {

// Working memory of bulk builds, kept across the lists one thread builds (a 128K-token list
// gathers 64 MiB of f32 keys: allocating that afresh per list costs page faults and unmaps that
// stall every other thread of the process).
struct BuildScratch {
  std::vector<float> keys, sq, ext, group_keys;
  std::vector<std::pair<int32_t, int>> rows;  // (page id, row) of each token to lay out
};

// Bulk build: every token of the leaf pages and of the first `absorb` tail pages is partitioned
// anew into leaves of up to page_size tokens (balanced bisection in k' space), copied into
// fresh pages, and `tree` is rebuilt over them. Needs as many free pages as leaves result.
bool RebuildList(KvSequence& seq, int layer, int head, int32_t sink_pages, int32_t absorb,
                 LeafTree* tree, BuildScratch* scratch);

// Dynamic insertion: each token of the first `absorb` tail pages (in position order) goes to
// its nearest leaf; a full leaf splits in two pages by balanced 2-means over its keys and the
// new one. Needs absorb * page_size free pages (at most one split per token).
// REQUIRES: !tree->empty().
bool InsertIntoList(KvSequence& seq, int layer, int head, int32_t sink_pages, int32_t absorb,
                    LeafTree* tree);

// Builds `tree` over a list that another icecache index arranged (a forked sequence): every page
// between the sink pages and the tail becomes a leaf as it is.
Status AdoptList(const KvSequence& seq, int layer, int head, int32_t sink_pages, LeafTree* tree);

}  // namespace icecache::ice
