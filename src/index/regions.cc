#include "index/regions.h"

#include <algorithm>

namespace icecache {

ListRegions RegionsOf(const KvSequence& seq, int layer, int head, const SelectionLimits& limits) {
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  const int p = seq.layout().page_size;
  ListRegions r;
  r.end = static_cast<int32_t>(pages.size());
  r.sink_end = std::min<int32_t>(r.end, (limits.sink + p - 1) / p);
  // The window: the newest tail pages that together hold at most `window` tokens (whole
  // pages, so the budget is never exceeded).
  const int32_t tail = seq.tail_index(layer, head);
  int32_t wb = r.end;
  int64_t tokens = 0;
  while (wb > std::max(tail, r.sink_end) && tokens + pages[wb - 1].len <= limits.window) {
    tokens += pages[--wb].len;
  }
  r.window_begin = wb;
  for (int32_t i = 0; i < r.sink_end; ++i) r.sink_tokens += pages[i].len;
  for (int32_t i = r.window_begin; i < r.end; ++i) r.window_tokens += pages[i].len;
  return r;
}

void SelectAll(const KvSequence& seq, int layer, int head, std::vector<PageRef>* out) {
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  out->insert(out->end(), pages.begin(), pages.end());
}

int64_t ListTokens(const KvSequence& seq, int layer, int head) {
  int64_t n = 0;
  for (const PageRef& p : seq.pages(layer, head)) n += p.len;
  return n;
}

void AssembleSelection(const KvSequence& seq, int layer, int head, const ListRegions& r,
                       const SelectionLimits& limits, const std::vector<int32_t>& chosen,
                       std::vector<PageRef>* out) {
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  out->clear();
  for (int32_t i = 0; i < r.sink_end; ++i) out->push_back(pages[i]);
  int64_t tokens_left = static_cast<int64_t>(limits.budget) - r.sink_tokens - r.window_tokens;
  int64_t pages_left =
      static_cast<int64_t>(limits.max_pages) - r.sink_end - (r.end - r.window_begin);
  for (int32_t i : chosen) {
    if (pages_left <= 0 || tokens_left <= 0) break;
    if (pages[i].len > tokens_left) continue;  // a smaller page may still fit
    out->push_back(pages[i]);
    tokens_left -= pages[i].len;
    --pages_left;
  }
  for (int32_t i = r.window_begin; i < r.end; ++i) out->push_back(pages[i]);
}

}  // namespace icecache
