// RebuildList and AdoptList (list_layout.h).
#include <algorithm>
#include <vector>

#include "core/check.h"
#include "index/icecache/list_layout.h"
#include "index/icecache/mips.h"
#include "index/lychee/chunk_layout.h"

namespace icecache::ice {

int64_t RebuildPages(const std::vector<PageRef>& pages, int32_t sink_pages, int32_t end,
                     int page_size, std::span<const SegmentLayout> ready) {
  const int p = page_size;
  int64_t need = 0;
  int32_t b = sink_pages;
  const std::vector<int32_t> runs = RunLengths(end - sink_pages, p);
  for (size_t k = 0; k < runs.size(); b += runs[k], ++k) {
    const std::span<const PageRef> source(pages.data() + b, static_cast<size_t>(runs[k]));
    if (k < ready.size() && !ready[k].leaves.empty() && ready[k].Matches(source)) {
      continue;  // laid out already
    }
    need += LeavesFor(source, p);
  }
  return need;
}

bool RebuildList(KvSequence& seq, int layer, int head, int32_t sink_pages, int32_t absorb,
                 LeafTree* tree, BuildScratch* scratch, std::span<SegmentLayout> ready) {
  const int p = seq.layout().page_size;
  PagePool& pool = seq.pool();
  const int32_t tail = seq.tail_index(layer, head);
  ICECACHE_CHECK(tail == sink_pages + tree->leaves());
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  const int32_t end = tail + absorb;
  ICECACHE_CHECK(static_cast<int32_t>(pages.size()) >= end);
  // The runs of the pages to lay out: the ready layouts that still match are taken, the others
  // are laid out below.
  const std::vector<int32_t> runs = RunLengths(end - sink_pages, p);
  std::vector<SegmentLayout> layouts(runs.size());
  int64_t need = 0;
  int32_t b = sink_pages;
  for (size_t k = 0; k < runs.size(); b += runs[k], ++k) {
    const std::span<const PageRef> source(pages.data() + b, static_cast<size_t>(runs[k]));
    if (k < ready.size() && !ready[k].leaves.empty() && ready[k].Matches(source)) {
      layouts[k] = std::move(ready[k]);
    } else {
      layouts[k].source.assign(source.begin(), source.end());
      need += LeavesFor(source, p);
    }
  }
  for (SegmentLayout& r : ready) DiscardSegment(pool, &r);  // the ones not taken
  if (pool.spare() < need) {
    for (SegmentLayout& l : layouts) DiscardSegment(pool, &l);
    return false;
  }
  for (SegmentLayout& l : layouts) {
    if (l.leaves.empty() && !l.source.empty()) {
      ICECACHE_CHECK_MSG(LayOutSegment(pool, &l, scratch, tree->search_stats()),
                         "icecache: free pages were counted before laying out");
    }
  }

  // Every row is laid out again: all old leaf pages and the absorbed pages go back to the pool.
  std::vector<int32_t> freed;
  for (int32_t i = sink_pages; i < end; ++i) freed.push_back(pages[i].id);
  seq.AdvanceTail(layer, head, absorb);
  std::vector<PageRef> head_pages(pages.begin(), pages.begin() + sink_pages);
  float m = 0;
  for (const SegmentLayout& l : layouts) {
    for (float sq : l.sq_norm) m = std::max(m, sq);
  }
  const int d = seq.layout().head_dim;
  tree->Clear();
  tree->set_max_sq_norm(m);
  for (const SegmentLayout& l : layouts) {
    size_t row = 0;
    for (size_t g = 0; g < l.leaves.size(); ++g) {
      head_pages.push_back(l.leaves[g]);
      const bool stats = tree->search_stats();
      tree->AddLeafBall(
          l.centroid.data() + g * d, l.radius[g], stats ? l.far.data() + g * d : nullptr,
          stats ? l.variance.data() + g * d : nullptr, l.sq_norm.data() + row, l.leaves[g].len);
      row += l.leaves[g].len;
    }
  }
  seq.ReplaceHead(layer, head, head_pages, freed);
  if (!tree->empty()) tree->BuildUpper();
  return true;
}

Status AdoptList(const KvSequence& seq, int layer, int head, int32_t sink_pages, LeafTree* tree) {
  const int p = seq.layout().page_size, d = seq.layout().head_dim;
  const int32_t tail = seq.tail_index(layer, head);
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  if (tail < sink_pages) {
    return Unsupported("icecache: cannot take over a sequence whose sink pages were re-arranged");
  }
  for (int32_t i = sink_pages; i < tail; ++i) {
    if (pages[i].len < 1 || pages[i].len > p) {
      return Unsupported("icecache: cannot take over a list with an empty page");
    }
  }
  std::vector<float> keys, sq;
  lychee::GatherKeys(seq.pool().view(), pages, sink_pages, tail - sink_pages, &keys);
  tree->Clear();
  tree->set_max_sq_norm(SqNorms(keys, d, &sq));
  size_t row = 0;
  for (int32_t i = sink_pages; i < tail; ++i) {
    tree->AddLeaf(keys.data() + row * d, pages[i].len);
    row += pages[i].len;
  }
  if (!tree->empty()) tree->BuildUpper();
  return Status::Ok();
}

}  // namespace icecache::ice
