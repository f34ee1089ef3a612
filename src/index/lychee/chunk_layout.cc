#include "index/lychee/chunk_layout.h"

#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "index/row_copier.h"

namespace icecache::lychee {

int32_t AbsorbPlan::PagesAllocated(int page_size) const {
  int32_t n = 0;
  for (int32_t len : chunk_lens) n += (len + page_size - 1) / page_size;
  return n + (new_pending_tokens + page_size - 1) / page_size;
}

Status ApplyAbsorb(KvSequence& seq, int layer, int head, const AbsorbPlan& plan) {
  const int p = seq.layout().page_size;
  PagePool& pool = seq.pool();
  // Allocate first so that a failure changes nothing.
  std::vector<int32_t> fresh;
  const int32_t need = plan.PagesAllocated(p);
  fresh.reserve(need);
  for (int32_t i = 0; i < need; ++i) {
    auto id = pool.Allocate();
    if (!id.ok()) {
      for (int32_t f : fresh) pool.Free(f);
      return id.status();
    }
    fresh.push_back(*id);
  }
  ICECACHE_CHECK(seq.tail_index(layer, head) == plan.keep_pages + plan.old_pending_pages);
  ICECACHE_CHECK(seq.tail_pos(layer, head) == plan.tail_pos);
  ICECACHE_CHECK(static_cast<int32_t>(seq.pages(layer, head).size()) >=
                 seq.tail_index(layer, head) + plan.advance_pages);
  seq.AdvanceTail(layer, head, plan.advance_pages);
  // Only the pages from keep_pages on are read (sources) or replaced; the head before them stays.
  const std::vector<PageRef>& list = seq.pages(layer, head);
  const std::vector<PageRef> pages(list.begin() + plan.keep_pages,
                                   list.begin() + seq.tail_index(layer, head));
  const RowCopier copier(pool.view());
  // Source of the token at `pos`: the pending pages, then the absorbed tail pages, both in
  // position order.
  auto source = [&](int64_t pos, int32_t* page, int* slot) {
    if (pos < plan.tail_pos) {
      const int64_t rel = pos - plan.pending_pos;
      *page = pages[rel / p].id;
      *slot = static_cast<int>(rel % p);
    } else {
      const int64_t rel = pos - plan.tail_pos;
      *page = pages[plan.old_pending_pages + rel / p].id;
      *slot = static_cast<int>(rel % p);
    }
  };
  std::vector<PageRef> head_pages;  // what follows the kept head
  size_t next = 0;
  int64_t pos = plan.pending_pos;
  // Writes `len` tokens from `pos` on into fresh pages, page_size per page.
  auto lay_out = [&](int32_t len) {
    for (int32_t done = 0; done < len;) {
      const int32_t dst = fresh[next++];
      const int32_t n = std::min(p, len - done);
      for (int t = 0; t < n; ++t) {
        int32_t src_page = 0;
        int src_slot = 0;
        source(pos++, &src_page, &src_slot);
        copier.Copy(src_page, src_slot, dst, t);
      }
      pool.Touch(dst);
      head_pages.push_back({dst, n});
      done += n;
    }
  };
  for (int32_t len : plan.chunk_lens) lay_out(len);
  lay_out(plan.new_pending_tokens);
  ICECACHE_CHECK(next == fresh.size());
  ICECACHE_CHECK(pos == plan.tail_pos + static_cast<int64_t>(plan.advance_pages) * p);
  // The pending and absorbed pages were copied into fresh ones.
  std::vector<int32_t> freed;
  for (int32_t i = 0; i < plan.PagesFreed(); ++i) freed.push_back(pages[i].id);
  seq.ReplaceHeadAfter(layer, head, plan.keep_pages, head_pages, freed);
  return Status::Ok();
}

void GatherKeys(const KvPoolView& pool, const std::vector<PageRef>& pages, int32_t begin, int32_t n,
                std::vector<float>* out) {
  const int64_t d = pool.head_dim;
  for (int32_t i = begin; i < begin + n; ++i) {
    const PageRef& page = pages[i];
    const int64_t offset = static_cast<int64_t>(page.id) * pool.page_size * d;
    const int64_t count = page.len * d;
    const size_t at = out->size();
    out->resize(at + count);
    float* dst = out->data() + at;
    if (pool.dtype == DType::kF32) {
      std::memcpy(dst, static_cast<const float*>(pool.k) + offset, count * sizeof(float));
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(pool.k) + offset;
      const bool bf16 = pool.dtype == DType::kBF16;
      for (int64_t j = 0; j < count; ++j) dst[j] = bf16 ? Bf16ToF32(src[j]) : F16ToF32(src[j]);
    }
  }
}

}  // namespace icecache::lychee
