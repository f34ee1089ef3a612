// RebuildList and AdoptList (list_layout.h).
#include <algorithm>
#include <vector>

#include "core/check.h"
#include "index/icecache/balanced_split.h"
#include "index/icecache/list_layout.h"
#include "index/icecache/mips.h"
#include "index/lychee/chunk_layout.h"
#include "index/row_copier.h"

namespace icecache::ice {

namespace {

// Squared norms of the `n` rows of `keys`, and their maximum.
float SqNorms(const std::vector<float>& keys, int dim, std::vector<float>* sq) {
  const size_t n = keys.size() / dim;
  sq->resize(n);
  float m = 0;
  for (size_t i = 0; i < n; ++i) {
    const float* k = keys.data() + i * dim;
    (*sq)[i] = DotF(k, k, dim);
    m = std::max(m, (*sq)[i]);
  }
  return m;
}

}  // namespace

bool RebuildList(KvSequence& seq, int layer, int head, int32_t sink_pages, int32_t absorb,
                 LeafTree* tree, BuildScratch* scratch) {
  const int p = seq.layout().page_size, d = seq.layout().head_dim;
  PagePool& pool = seq.pool();
  const KvPoolView view = pool.view();
  const int32_t tail = seq.tail_index(layer, head);
  ICECACHE_CHECK(tail == sink_pages + tree->leaves());
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  ICECACHE_CHECK(static_cast<int32_t>(pages.size()) >= tail + absorb);
  // Every token to lay out, with where its row is now.
  std::vector<float>& keys = scratch->keys;
  keys.clear();
  lychee::GatherKeys(view, pages, sink_pages, tail + absorb - sink_pages, &keys);
  std::vector<std::pair<int32_t, int>>& rows = scratch->rows;
  rows.clear();
  for (int32_t i = sink_pages; i < tail + absorb; ++i) {
    for (int t = 0; t < pages[i].len; ++t) rows.emplace_back(pages[i].id, t);
  }
  const int32_t n = static_cast<int32_t>(rows.size());
  ICECACHE_CHECK(static_cast<size_t>(n) * d == keys.size());
  std::vector<float>& sq = scratch->sq;
  std::vector<float>& ext = scratch->ext;
  ext.resize(n);
  const float m = SqNorms(keys, d, &sq);
  for (int32_t i = 0; i < n; ++i) ext[i] = ExtraCoord(m, sq[i]);
  const std::vector<std::vector<int32_t>> groups = Partition({keys.data(), ext.data(), d}, n, p);
  if (pool.capacity() - pool.used() < static_cast<int64_t>(groups.size())) return false;

  // Every row is laid out again: all old leaf pages and the absorbed pages go back to the pool.
  std::vector<int32_t> freed;
  for (int32_t i = sink_pages; i < tail + absorb; ++i) freed.push_back(pages[i].id);
  seq.AdvanceTail(layer, head, absorb);
  std::vector<PageRef> head_pages(pages.begin(), pages.begin() + sink_pages);
  const RowCopier copier(view);
  tree->Clear();
  tree->set_max_sq_norm(m);
  std::vector<float>& group_keys = scratch->group_keys;
  for (const std::vector<int32_t>& g : groups) {
    auto id = pool.Allocate();
    ICECACHE_CHECK_MSG(id.ok(), "icecache: free pages were counted before laying out");
    group_keys.clear();
    for (size_t j = 0; j < g.size(); ++j) {
      copier.Copy(rows[g[j]].first, rows[g[j]].second, *id, static_cast<int>(j));
      const float* k = keys.data() + static_cast<size_t>(g[j]) * d;
      group_keys.insert(group_keys.end(), k, k + d);
    }
    pool.Touch(*id);
    head_pages.push_back({*id, static_cast<int32_t>(g.size())});
    tree->AddLeaf(group_keys.data(), static_cast<int>(g.size()));
  }
  seq.ReplaceHead(layer, head, std::move(head_pages), freed);
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
