// Physical layout of lychee chunks: the tokens of each (layer, KV head) list are re-arranged so
// that pages hold whole chunks (a chunk of up to page_size tokens fills one page, partly;
// longer chunks span consecutive pages). The list becomes
//
//   [sink pages][chunk pages ...][pending pages][positional tail]
//
// The sink pages stay where they were. Pending pages hold, in position order, the tokens that
// left the tail but whose chunk is not decided yet (its end lies beyond what was absorbed).
// Every absorption copies the pending tokens and the absorbed tail pages' tokens (K, V and
// position rows) into fresh pages, then replaces the head, which frees the old pages; every
// token stays in exactly one page.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_sequence.h"

namespace icecache::lychee {

// Where a chunk lives in every indexed list (the same for all of them).
struct ChunkSpan {
  int32_t page_begin = 0;  // list index of its first page
  int32_t pages = 0;
  int32_t tokens = 0;
  int64_t first_pos = 0;
};

// One absorption, the same for every indexed list.
struct AbsorbPlan {
  int32_t keep_pages = 0;  // head pages left in place: sink and existing chunk pages
  int32_t old_pending_pages = 0;
  int64_t pending_pos = 0;          // position of the first pending token
  int64_t tail_pos = 0;             // position of the first absorbed tail token
  int32_t advance_pages = 0;        // tail pages absorbed
  std::vector<int32_t> chunk_lens;  // new chunks, cut from pending_pos on
  int32_t new_pending_tokens = 0;   // tokens left over after the new chunks

  // Pages each list allocates, and pages it frees.
  int32_t PagesAllocated(int page_size) const;
  int32_t PagesFreed() const { return old_pending_pages + advance_pages; }
};

// Applies `plan` to one list. On failure (the pool ran out) the list is unchanged.
Status ApplyAbsorb(KvSequence& seq, int layer, int head, const AbsorbPlan& plan);

// Appends the keys of pages [begin, begin + n) of `pages`, as f32 rows, to `out`.
void GatherKeys(const KvPoolView& pool, const std::vector<PageRef>& pages, int32_t begin, int32_t n,
                std::vector<float>* out);

}  // namespace icecache::lychee
