#include "kv/kv_sequence.h"

#include <algorithm>
#include <atomic>
#include <unordered_set>

#include "core/check.h"

namespace icecache {

uint64_t KvSequence::NextStamp() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

KvSequence::KvSequence(PagePool* pool) : pool_(pool) {
  lists_.resize(static_cast<size_t>(layout().n_layers) * layout().n_kv_heads);
}

KvSequence::~KvSequence() { Truncate(0); }

void KvSequence::SetLength(int64_t n) {
  const int64_t delta = layout().PagesForTokens(n) - layout().PagesForTokens(length_);
  if (delta != 0) pool_->Credit(delta);
  length_ = n;
}

Status KvSequence::Grow(int64_t n) {
  ICECACHE_CHECK(n >= 0);
  if (n == 0) return Status::Ok();
  const int p = layout().page_size;
  const int64_t new_len = length_ + n;
  // Every list's tail gains the same tokens; count the new pages first so that a failure to
  // allocate leaves the sequence unchanged.
  std::vector<size_t> need(lists_.size());
  size_t total = 0;
  for (size_t i = 0; i < lists_.size(); ++i) {
    const List& l = lists_[i];
    const size_t want = l.tail_index + static_cast<size_t>((new_len - l.tail_pos + p - 1) / p);
    need[i] = want - l.pages.size();
    total += need[i];
  }
  std::vector<int32_t> fresh;
  fresh.reserve(total);
  for (size_t i = 0; i < total; ++i) {
    auto id = pool_->Allocate();
    if (!id.ok()) {
      for (int32_t f : fresh) pool_->Free(f);
      return id.status();
    }
    fresh.push_back(*id);
  }
  size_t next = 0;
  for (size_t i = 0; i < lists_.size(); ++i) {
    List& l = lists_[i];
    RoomFor(l, l.pages.size() + need[i]);
    for (size_t k = 0; k < need[i]; ++k) l.pages.push_back({fresh[next++], 0});
    // Tail pages that gain tokens: from the one holding length_ to the end.
    const size_t first = l.tail_index + static_cast<size_t>((length_ - l.tail_pos) / p);
    // Only the last old page and the appended ones change; anything before them is an edit.
    if (first + need[i] + 1 < l.pages.size()) Restamp(l);
    for (size_t k = first; k < l.pages.size(); ++k) {
      const int64_t begin = l.tail_pos + static_cast<int64_t>(k - l.tail_index) * p;
      l.pages[k].len = static_cast<int32_t>(std::clamp<int64_t>(new_len - begin, 0, p));
      pool_->Touch(l.pages[k].id);
    }
  }
  SetLength(new_len);
  return Status::Ok();
}

void KvSequence::ReserveTokens(int64_t tokens) {
  reserve_pages_ = static_cast<size_t>(std::max<int64_t>(0, layout().PagesForTokens(tokens)));
}

void KvSequence::RoomFor(List& l, size_t want) const {
  if (l.pages.capacity() >= want) return;
  l.pages.reserve(std::max({want, reserve_pages_, 2 * l.pages.capacity()}));
}

bool KvSequence::CanTruncate(int64_t n) const {
  if (n == 0) return true;
  for (const List& l : lists_) {
    if (l.tail_pos > n) return false;
  }
  return true;
}

void KvSequence::Truncate(int64_t n) {
  ICECACHE_CHECK(n >= 0 && n <= length_ && CanTruncate(n));
  const int p = layout().page_size;
  for (List& l : lists_) {
    if (n == 0) {
      for (const PageRef& r : l.pages) pool_->Free(r.id);
      l = List();  // a fresh stamp
      continue;
    }
    Restamp(l);
    const size_t keep = l.tail_index + static_cast<size_t>((n - l.tail_pos + p - 1) / p);
    while (l.pages.size() > keep) {
      pool_->Free(l.pages.back().id);
      l.pages.pop_back();
    }
    if (keep > static_cast<size_t>(l.tail_index)) {
      const int64_t begin = l.tail_pos + static_cast<int64_t>(keep - 1 - l.tail_index) * p;
      l.pages.back().len = static_cast<int32_t>(n - begin);
      pool_->Touch(l.pages.back().id);
    }
  }
  SetLength(n);
}

void KvSequence::Slots(int layer, int64_t first, int64_t n, int32_t* slots) const {
  ICECACHE_CHECK(first >= 0 && first + n <= length_);
  const int heads = layout().n_kv_heads;
  const int p = layout().page_size;
  for (int h = 0; h < heads; ++h) {
    const List& l = list(layer, h);
    ICECACHE_CHECK(first >= l.tail_pos);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t rel = first + t - l.tail_pos;
      slots[t * heads + h] = l.pages[l.tail_index + rel / p].id * p + static_cast<int32_t>(rel % p);
    }
  }
}

std::vector<PageRef>& KvSequence::MutableHead(int layer, int head, int32_t* tail_index) {
  List& l = list(layer, head);
  Restamp(l);
  *tail_index = l.tail_index;
  return l.pages;
}

void KvSequence::AdvanceTail(int layer, int head, int32_t pages) {
  List& l = list(layer, head);
  const int p = layout().page_size;
  for (int32_t k = 0; k < pages; ++k) {
    ICECACHE_CHECK(l.tail_index < static_cast<int32_t>(l.pages.size()));
    ICECACHE_CHECK(l.pages[l.tail_index].len == p);
    ++l.tail_index;
    l.tail_pos += p;
  }
}

void KvSequence::ReplaceHead(int layer, int head, std::span<const PageRef> pages,
                             std::span<const int32_t> freed, HeadEdit edit) {
  List& l = list(layer, head);
#ifndef NDEBUG
  {
    ICECACHE_CHECK(edit.from >= 0 && edit.from <= static_cast<int32_t>(pages.size()) &&
                   edit.from <= l.tail_index);
    size_t k = 0;
    for (int32_t i = 0; i < edit.from; ++i) {
      if (k < edit.entries.size() && edit.entries[k] == i) {
        ++k;
        continue;
      }
      ICECACHE_CHECK_MSG(pages[i].id == l.pages[i].id && pages[i].len == l.pages[i].len,
                         "ReplaceHead: an entry outside `edit` changed");
    }
    ICECACHE_CHECK_MSG(k == edit.entries.size(), "ReplaceHead: `edit.entries` not ascending");
  }
#endif
  Replace(l, 0, pages, freed, std::move(edit));
}

void KvSequence::ReplaceHeadAfter(int layer, int head, int32_t keep, std::span<const PageRef> rest,
                                  std::span<const int32_t> freed) {
  Replace(list(layer, head), keep, rest, freed, {keep, {}});
}

void KvSequence::Replace(List& l, int32_t keep, std::span<const PageRef> rest,
                         std::span<const int32_t> freed, HeadEdit edit) {
  ICECACHE_CHECK(keep >= 0 && keep <= l.tail_index);
#ifndef NDEBUG
  {
    std::unordered_set<int32_t> kept, dropped;
    for (const PageRef& r : rest) kept.insert(r.id);
    for (int32_t i = keep; i < l.tail_index; ++i) {
      if (kept.count(l.pages[i].id) == 0) dropped.insert(l.pages[i].id);
    }
    ICECACHE_CHECK_MSG(dropped == std::unordered_set<int32_t>(freed.begin(), freed.end()),
                       "ReplaceHead: `freed` is not the set of pages the new head drops");
  }
#endif
  for (int32_t id : freed) pool_->Free(id);
  l.pages.erase(l.pages.begin() + keep, l.pages.begin() + l.tail_index);
  l.pages.insert(l.pages.begin() + keep, rest.begin(), rest.end());
  l.tail_index = keep + static_cast<int32_t>(rest.size());
  l.edit_base = l.stamp;
  l.stamp = NextStamp();
  l.edit = std::move(edit);
}

const HeadEdit* KvSequence::EditSince(int layer, int head, uint64_t seen) const {
  const List& l = list(layer, head);
  return seen != 0 && l.edit_base == seen ? &l.edit : nullptr;
}

int64_t KvSequence::num_pages() const {
  int64_t n = 0;
  for (const List& l : lists_) n += static_cast<int64_t>(l.pages.size());
  return n;
}

Status KvSequence::CopyFrom(const KvSequence& other, Backend& backend) {
  ICECACHE_CHECK(length_ == 0 && num_pages() == 0 && pool_ == other.pool_);
  std::vector<int32_t> src, dst;
  for (const List& l : other.lists_) {
    for (const PageRef& p : l.pages) {
      auto id = pool_->Allocate();
      if (!id.ok()) {
        for (int32_t f : dst) pool_->Free(f);
        return id.status();
      }
      src.push_back(p.id);
      dst.push_back(*id);
    }
  }
  if (!src.empty()) {
    const int64_t n = static_cast<int64_t>(src.size());
    Tensor src_ids(src.data(), DType::kI32, {n}), dst_ids(dst.data(), DType::kI32, {n});
    if (backend.device() != Device::kCpu) {
      Status copied = [&]() -> Status {
        ICECACHE_ASSIGN_OR_RETURN(Tensor s_dev, backend.Allocate(DType::kI32, {n}));
        ICECACHE_ASSIGN_OR_RETURN(Tensor d_dev, backend.Allocate(DType::kI32, {n}));
        ICECACHE_RETURN_IF_ERROR(backend.Copy(src_ids, s_dev));
        ICECACHE_RETURN_IF_ERROR(backend.Copy(dst_ids, d_dev));
        backend.CopyPages(pool_->view(), pool_->view(), s_dev, d_dev);
        backend.Synchronize();
        return Status::Ok();
      }();
      if (!copied.ok()) {
        for (int32_t f : dst) pool_->Free(f);  // this stays empty
        return copied;
      }
    } else {
      backend.CopyPages(pool_->view(), pool_->view(), src_ids, dst_ids);
    }
  }
  size_t next = 0;
  for (size_t i = 0; i < lists_.size(); ++i) {
    lists_[i].tail_index = other.lists_[i].tail_index;
    lists_[i].tail_pos = other.lists_[i].tail_pos;
    Restamp(lists_[i]);
    RoomFor(lists_[i], other.lists_[i].pages.size());
    for (const PageRef& p : other.lists_[i].pages) lists_[i].pages.push_back({dst[next++], p.len});
  }
  SetLength(other.length_);
  return Status::Ok();
}

}  // namespace icecache
