// LayOutSegment and DiscardSegment (segment_layout.h).
#include "index/icecache/segment_layout.h"

#include <algorithm>

#include "index/icecache/balanced_split.h"
#include "index/icecache/leaf_tree.h"
#include "index/icecache/mips.h"
#include "index/lychee/chunk_layout.h"
#include "index/row_copier.h"

namespace icecache::ice {

std::vector<int32_t> RunLengths(int32_t pages, int page_size) {
  const int32_t min_run = std::max(1, kMinRunTokens / page_size);
  std::vector<int32_t> runs;
  int32_t left = pages;
  while (left > 2 * min_run) {
    runs.push_back(left / 2);
    left -= left / 2;
  }
  if (left > 0) runs.push_back(left);
  return runs;
}

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

int64_t LeavesFor(std::span<const PageRef> source, int page_size) {
  int64_t tokens = 0;
  for (const PageRef& page : source) tokens += page.len;
  return (tokens + page_size - 1) / page_size;
}

bool SegmentLayout::Matches(std::span<const PageRef> pages) const {
  if (pages.size() != source.size()) return false;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (pages[i].id != source[i].id || pages[i].len != source[i].len) return false;
  }
  return true;
}

bool LayOutSegment(PagePool& pool, SegmentLayout* out, BuildScratch* scratch, bool search_stats) {
  const KvPoolView view = pool.view();
  const int p = view.page_size, d = view.head_dim;
  std::vector<float>& keys = scratch->keys;
  keys.clear();
  lychee::GatherKeys(view, out->source, 0, static_cast<int32_t>(out->source.size()), &keys);
  std::vector<std::pair<int32_t, int>>& rows = scratch->rows;
  rows.clear();
  for (const PageRef& page : out->source) {
    for (int t = 0; t < page.len; ++t) rows.emplace_back(page.id, t);
  }
  const int32_t n = static_cast<int32_t>(rows.size());
  std::vector<float>& sq = scratch->sq;
  std::vector<float>& ext = scratch->ext;
  const float m = SqNorms(keys, d, &sq);
  ext.resize(n);
  for (int32_t i = 0; i < n; ++i) ext[i] = ExtraCoord(m, sq[i]);
  const std::vector<std::vector<int32_t>> groups = Partition({keys.data(), ext.data(), d}, n, p);

  out->leaves.clear();
  if (pool.spare() < static_cast<int64_t>(groups.size())) return false;
  for (size_t g = 0; g < groups.size(); ++g) {
    auto id = pool.Allocate();
    if (!id.ok()) {
      DiscardSegment(pool, out);
      return false;
    }
    out->leaves.push_back({*id, static_cast<int32_t>(groups[g].size())});
  }
  const RowCopier copier(view);
  out->centroid.resize(groups.size() * d);
  out->radius.resize(groups.size());
  out->far.resize(search_stats ? groups.size() * d : 0);
  out->variance.resize(search_stats ? groups.size() * d : 0);
  out->sq_norm.clear();
  out->sq_norm.reserve(n);
  std::vector<float>& group_keys = scratch->group_keys;
  for (size_t g = 0; g < groups.size(); ++g) {
    const int32_t id = out->leaves[g].id;
    group_keys.clear();
    for (size_t j = 0; j < groups[g].size(); ++j) {
      const int32_t r = groups[g][j];
      copier.Copy(rows[r].first, rows[r].second, id, static_cast<int>(j));
      const float* k = keys.data() + static_cast<size_t>(r) * d;
      group_keys.insert(group_keys.end(), k, k + d);
      out->sq_norm.push_back(sq[r]);
    }
    pool.Touch(id);
    int far = 0;
    const int n_keys = static_cast<int>(groups[g].size());
    out->radius[g] = BallOf(group_keys.data(), n_keys, d, out->centroid.data() + g * d, &far);
    if (!search_stats) continue;
    std::copy_n(group_keys.data() + static_cast<size_t>(far) * d, d, out->far.data() + g * d);
    KeyVariance(group_keys.data(), n_keys, d, out->centroid.data() + g * d,
                out->variance.data() + g * d);
  }
  return true;
}

void DiscardSegment(PagePool& pool, SegmentLayout* layout) {
  for (const PageRef& leaf : layout->leaves) pool.Free(leaf.id);
  layout->leaves.clear();
}

}  // namespace icecache::ice
