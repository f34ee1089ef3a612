// The KV of one sequence: for every (layer, KV head) an ordered list of pages in a PagePool.
//
// Each list has a positional tail: pages [tail_index, end) hold positions [tail_pos, length())
// in order, page_size tokens per page (the last one partly filled). New tokens are always
// appended to the tail. Pages before the tail belong to whoever arranged them: at first there
// are none (the whole list is the tail); a selection policy may take whole pages off the front
// of the tail (AdvanceTail) and arrange their tokens as it likes (semantic pages), as long as it
// keeps every token in exactly one page of its list. Every (layer, head) has its own pages, so
// re-arranging one head never touches another.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/page_pool.h"

namespace icecache {

struct PageRef {
  int32_t id = -1;
  int32_t len = 0;  // valid tokens
};

// Which entries an edit of a list changed, so that readers that mirror the list (device
// selection) compare only those: every entry from `from` on, and `entries` (ascending, each
// < from). An entry outside both keeps its page id, token count and contents. `from` must not
// be after the first tail page the list had before the edit (AdvanceTail calls included).
struct HeadEdit {
  int32_t from = 0;
  std::vector<int32_t> entries;
};

class KvSequence {
 public:
  // `pool` must outlive the sequence.
  explicit KvSequence(PagePool* pool);
  ~KvSequence();
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  int64_t length() const { return length_; }
  const KvLayout& layout() const { return pool_->layout(); }
  PagePool& pool() const { return *pool_; }

  // Makes room for `n` more tokens (positions length() .. length()+n-1) at the tail of every
  // (layer, head) and advances length(). Tail pages that receive tokens are touched (their
  // version changes). On failure (pool exhausted) nothing changes.
  Status Grow(int64_t n);
  // Sizes every list's page array for `tokens` tokens at its next growth, so that a sequence
  // does not copy its lists as it grows up to there. A batch's lists grow in lockstep, and
  // doubling arrays all at one step stalled a decode step (docs/PERF.md: 1.1 ms per sequence of
  // the 8B shape at 2048 pages). Lists longer than that (half-filled index leaves) grow as usual.
  void ReserveTokens(int64_t tokens);
  // Whether Truncate(n) is possible: every list's tail still starts at or before n.
  bool CanTruncate(int64_t n) const;
  // Drops tokens at positions >= n, freeing emptied pages. REQUIRES: CanTruncate(n) (always
  // true for n == 0, which frees everything).
  void Truncate(int64_t n);

  // Slots (page_id * page_size + offset) of positions [first, first + n) for `layer`, written
  // as slots[t * n_kv_heads + head]. REQUIRES: the positions are in the tail.
  void Slots(int layer, int64_t first, int64_t n, int32_t* slots) const;

  const std::vector<PageRef>& pages(int layer, int head) const { return list(layer, head).pages; }
  // Changes whenever the list changes other than by appending pages at its end (which may also
  // change the length of its last page): truncation, MutableHead (every call: finish the edits
  // through its reference before the next forward step), ReplaceHead, CopyFrom. Unique across all
  // sequences and lists, so that page tables built from the lists can be updated incrementally
  // while the stamps they saw stay the same.
  uint64_t stamp(int layer, int head) const { return list(layer, head).stamp; }
  // First tail page and the position it starts at.
  int32_t tail_index(int layer, int head) const { return list(layer, head).tail_index; }
  int64_t tail_pos(int layer, int head) const { return list(layer, head).tail_pos; }

  // For selection policies: the pages before the tail, to re-arrange (ids, order and lens may
  // change; the pages must stay this sequence's, each token in exactly one page, the
  // tail untouched; call pool().Touch(id) on every page whose contents change).
  std::vector<PageRef>& MutableHead(int layer, int head, int32_t* tail_index);
  // Moves the first `pages` whole pages of the tail out of it (they become the last pages
  // before the tail). REQUIRES: they are full.
  void AdvanceTail(int layer, int head, int32_t pages);
  // Replaces the pages before the tail with `pages` (same tokens, re-arranged) and frees
  // `freed`: exactly the pages of the old head that `pages` no longer lists (the caller knows
  // them, so a step that re-arranges a few pages of a long list costs no set of its ids).
  // `edit` says which entries changed (the default: possibly all). REQUIRES: every listed page
  // is this sequence's or freshly allocated from its pool. Debug builds check `freed` and the
  // ids and counts outside `edit` against the lists.
  void ReplaceHead(int layer, int head, std::span<const PageRef> pages,
                   std::span<const int32_t> freed, HeadEdit edit = {});
  // ReplaceHead for an edit that keeps the first `keep` entries as they are: the entries from
  // `keep` to the tail become `rest`, without copying the kept head (its hint: {keep, {}}).
  void ReplaceHeadAfter(int layer, int head, int32_t keep, std::span<const PageRef> rest,
                        std::span<const int32_t> freed);
  // For a reader that saw list (layer, head) at stamp `seen` (!= its stamp now): the HeadEdit
  // that took it from `seen` to its stamp now, or nullptr when that is not one ReplaceHead with
  // a hint (then any entry may differ). Appends after the edit change entries from the one
  // holding the sequence's end on, as always.
  const HeadEdit* EditSince(int layer, int head, uint64_t seen) const;

  // Pages held across all layers and heads.
  int64_t num_pages() const;

  // Makes this (empty) sequence a copy of `other` (same pool): fresh pages with the same
  // contents, lengths, order and tails. On failure (pool exhausted) this stays empty.
  Status CopyFrom(const KvSequence& other, Backend& backend);

 private:
  struct List {
    std::vector<PageRef> pages;
    int32_t tail_index = 0;
    int64_t tail_pos = 0;
    uint64_t stamp = NextStamp();
    uint64_t edit_base = 0;  // the stamp `edit` started from (0: no hint)
    HeadEdit edit;
  };
  // A new stamp for an edit with no hint.
  static void Restamp(List& l) {
    l.stamp = NextStamp();
    l.edit_base = 0;
  }
  // Entries [keep, tail_index) of `l` become `rest`; `freed` go back to the pool; `edit` is the
  // hint EditSince gives for the new stamp.
  void Replace(List& l, int32_t keep, std::span<const PageRef> rest, std::span<const int32_t> freed,
               HeadEdit edit);
  static uint64_t NextStamp();
  const List& list(int layer, int head) const {
    return lists_[static_cast<size_t>(layer) * layout().n_kv_heads + head];
  }
  List& list(int layer, int head) {
    return lists_[static_cast<size_t>(layer) * layout().n_kv_heads + head];
  }

  // Sets length() to `n` and credits the pool's growth reserve with the change in its positional
  // pages (PagePool::spare).
  void SetLength(int64_t n);

  // Room for `want` entries in `l`'s page array: at least the reserve, else doubling.
  void RoomFor(List& l, size_t want) const;

  PagePool* pool_;
  int64_t length_ = 0;
  size_t reserve_pages_ = 0;  // ReserveTokens
  std::vector<List> lists_;   // [layer * n_kv_heads + head]
};

}  // namespace icecache
