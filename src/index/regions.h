// Where the sink, the window and the selectable pages of a (layer, KV head) list are.
#pragma once

#include <cstdint>
#include <vector>

#include "index/policy.h"

namespace icecache {

struct ListRegions {
  int32_t sink_end = 0;      // pages [0, sink_end) hold the sink tokens
  int32_t window_begin = 0;  // pages [window_begin, end) hold the window tokens
  int32_t end = 0;
  int32_t sink_tokens = 0;
  int32_t window_tokens = 0;
  // Selectable pages: [sink_end, window_begin).
};

// Sink pages are the first pages that together hold the first `sink` positions (pages before
// the tail are never sink pages unless the policy kept them in place: policies that re-arrange
// pages leave the first ceil(sink / page_size) pages alone). Window pages are the tail pages
// holding positions >= length - window.
ListRegions RegionsOf(const KvSequence& seq, int layer, int head, const SelectionLimits& limits);

// Appends every page of the list, in order (used when the budget covers the whole list).
void SelectAll(const KvSequence& seq, int layer, int head, std::vector<PageRef>* out);
// Total tokens of the list.
int64_t ListTokens(const KvSequence& seq, int layer, int head);

// Fills `out` with sink pages, then the pages of `chosen` (indices into the list, in the given
// order) while they fit the budget and page limit, then the window pages.
void AssembleSelection(const KvSequence& seq, int layer, int head, const ListRegions& regions,
                       const SelectionLimits& limits, const std::vector<int32_t>& chosen,
                       std::vector<PageRef>* out);

}  // namespace icecache
