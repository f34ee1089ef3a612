// InsertIntoList (list_layout.h): routing tokens that leave the window to their nearest leaf,
// appending them to its page, and splitting full leaves into two pages.
#include <algorithm>
#include <vector>

#include "core/check.h"
#include "index/icecache/balanced_split.h"
#include "index/icecache/list_layout.h"
#include "index/icecache/mips.h"
#include "index/key_reader.h"
#include "index/lychee/chunk_layout.h"
#include "index/row_copier.h"

namespace icecache::ice {

namespace {

// Splits the full leaf page `leaf` (page_size tokens) and the new token (row `src_slot` of page
// `src_page`, key `key`) into the leaf's page and a fresh page, and tells the tree. With `freed`
// (the device may be reading the leaf's page), the rows that stay go to a second fresh page and
// the old one joins `freed` instead of being compacted in place.
void SplitLeafPage(PagePool& pool, int dim, int32_t leaf, const float* key, int32_t src_page,
                   int src_slot, std::vector<PageRef>* leaf_pages, LeafTree* tree,
                   std::vector<int32_t>* freed) {
  const int p = pool.layout().page_size;
  const KvPoolView view = pool.view();
  const PageRef old = (*leaf_pages)[leaf];
  ICECACHE_CHECK(old.len == p);
  // The P + 1 keys in k' space: the page's rows 0 .. P-1, then the new one (index P).
  KeyReader reader(view);
  std::vector<float> keys(static_cast<size_t>(p + 1) * dim), ext(p + 1);
  std::copy_n(reader.Keys(old.id, p), static_cast<size_t>(p) * dim, keys.data());
  std::copy_n(key, dim, keys.data() + static_cast<size_t>(p) * dim);
  for (int i = 0; i <= p; ++i) {
    const float* k = keys.data() + static_cast<size_t>(i) * dim;
    ext[i] = ExtraCoord(tree->max_sq_norm(), DotF(k, k, dim));
  }
  std::vector<int32_t> idx(p + 1), stay, move;
  for (int i = 0; i <= p; ++i) idx[i] = i;
  const int lo = std::max(1, p / 2);
  BalancedTwoMeans({keys.data(), ext.data(), dim}, idx, lo, p + 1 - lo, &stay, &move);

  auto id = pool.Allocate();
  ICECACHE_CHECK_MSG(id.ok(), "icecache: free pages were counted before inserting");
  int32_t keep = old.id;
  if (freed != nullptr) {
    auto fresh = pool.Allocate();
    ICECACHE_CHECK_MSG(fresh.ok(), "icecache: free pages were counted before inserting");
    keep = *fresh;
    freed->push_back(old.id);
  }
  const RowCopier copier(view);
  auto copy = [&](int32_t i, int32_t dst_page, int dst_slot) {
    if (i < p) {
      copier.Copy(old.id, i, dst_page, dst_slot);
    } else {
      copier.Copy(src_page, src_slot, dst_page, dst_slot);
    }
  };
  // First the rows that move out, then compact the rows that stay (ascending, each row moves
  // down or not at all, so no row is overwritten before it is read).
  for (size_t j = 0; j < move.size(); ++j) copy(move[j], *id, static_cast<int>(j));
  for (size_t j = 0; j < stay.size(); ++j) copy(stay[j], keep, static_cast<int>(j));
  pool.Touch(keep);
  pool.Touch(*id);
  std::vector<float> a, b;
  for (int32_t i : stay) a.insert(a.end(), &keys[i * dim], &keys[i * dim] + dim);
  for (int32_t i : move) b.insert(b.end(), &keys[i * dim], &keys[i * dim] + dim);
  (*leaf_pages)[leaf] = {keep, static_cast<int32_t>(stay.size())};
  const int32_t fresh = tree->SplitLeaf(leaf, a.data(), static_cast<int>(stay.size()), b.data(),
                                        static_cast<int>(move.size()));
  ICECACHE_CHECK(fresh == static_cast<int32_t>(leaf_pages->size()));
  leaf_pages->push_back({*id, static_cast<int32_t>(move.size())});
}

}  // namespace

bool InsertIntoList(KvSequence& seq, int layer, int head, int32_t sink_pages, int32_t absorb,
                    LeafTree* tree, std::span<const int32_t> routed, int64_t* followed) {
  ICECACHE_CHECK(!tree->empty());
  const int p = seq.layout().page_size, d = seq.layout().head_dim;
  PagePool& pool = seq.pool();
  if (pool.spare() < InsertPages(absorb, p, pool.holding())) return false;
  const KvPoolView view = pool.view();
  const int32_t tail = seq.tail_index(layer, head);
  ICECACHE_CHECK(tail == sink_pages + tree->leaves());
  ICECACHE_CHECK(routed.empty() || routed.size() == static_cast<size_t>(absorb) * p);
  if (followed != nullptr) *followed = 0;
  seq.AdvanceTail(layer, head, absorb);
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  std::vector<PageRef> leaf_pages(pages.begin() + sink_pages, pages.begin() + tail);
  const std::vector<PageRef> sources(pages.begin() + tail, pages.begin() + tail + absorb);
  std::vector<float> keys;
  lychee::GatherKeys(view, sources, 0, absorb, &keys);

  // A larger M changes every lifted key: refresh every leaf from its keys, then the inner nodes.
  float m = tree->max_sq_norm();
  for (size_t i = 0; i < keys.size() / d; ++i) {
    m = std::max(m, DotF(&keys[i * d], &keys[i * d], d));
  }
  KeyReader reader(view);
  if (m > tree->max_sq_norm()) {
    tree->set_max_sq_norm(m);
    for (int32_t leaf = 0; leaf < tree->leaves(); ++leaf) {
      const PageRef& lp = leaf_pages[leaf];
      tree->RefreshLeaf(leaf, reader.Keys(lp.id, lp.len), lp.len);
    }
    tree->RefreshInner();
  }

  // The list entries this changes: the leaves that gain or lose tokens, and everything from the
  // old tail on (new leaves, then the tail without the absorbed pages).
  const int32_t old_leaves = tree->leaves();
  HeadEdit edit{tail, {}};
  // The absorbed pages (every row of them moves to a leaf page) and leaf pages split out of place.
  std::vector<int32_t> freed;
  for (const PageRef& src : sources) freed.push_back(src.id);
  std::vector<uint8_t> shown(leaf_pages.size(), 1);  // per leaf: its page is one the list showed
  // Leaves are refreshed per token, the inner nodes above them once at the end.
  tree->BeginDeferredRefresh();
  size_t row = 0;
  for (const PageRef& src : sources) {
    for (int t = 0; t < src.len; ++t, ++row) {
      const float* key = keys.data() + row * d;
      const int32_t given = routed.empty() ? -1 : routed[row];
      const bool follow = given >= 0 && given < tree->leaves();
      if (follow && followed != nullptr) ++*followed;
      const int32_t leaf =
          follow ? given : tree->NearestLeaf(key, ExtraCoord(m, DotF(key, key, d)));
      if (leaf < old_leaves) edit.entries.push_back(sink_pages + leaf);
      PageRef& lp = leaf_pages[leaf];
      if (lp.len < p) {
        RowCopier(view).Copy(src.id, t, lp.id, lp.len);
        ++lp.len;
        pool.Touch(lp.id);
        tree->UpdateLeaf(leaf, reader.Keys(lp.id, lp.len), lp.len);
      } else {
        // A page the list showed before this call may be in the device's hands: split it out
        // of place while the pool holds frees. Pages made by this call are the caller's alone.
        const bool out_of_place = pool.holding() && shown[leaf];
        SplitLeafPage(pool, d, leaf, key, src.id, t, &leaf_pages, tree,
                      out_of_place ? &freed : nullptr);
        shown[leaf] = 0;
        shown.push_back(0);
      }
    }
  }
  tree->EndDeferredRefresh();
  std::vector<PageRef> head_pages(pages.begin(), pages.begin() + sink_pages);
  head_pages.insert(head_pages.end(), leaf_pages.begin(), leaf_pages.end());
  std::sort(edit.entries.begin(), edit.entries.end());
  edit.entries.erase(std::unique(edit.entries.begin(), edit.entries.end()), edit.entries.end());
  seq.ReplaceHead(layer, head, head_pages, freed, std::move(edit));
  return true;
}

}  // namespace icecache::ice
