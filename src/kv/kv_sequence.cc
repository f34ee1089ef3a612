#include "kv/kv_sequence.h"

#include <algorithm>

#include "core/check.h"

namespace icecache {

KvSequence::KvSequence(PagePool* pool) : pool_(pool) {
  pages_.resize(static_cast<size_t>(layout().n_layers) * layout().n_kv_heads);
}

KvSequence::~KvSequence() { Truncate(0); }

Status KvSequence::Grow(int64_t n) {
  ICECACHE_CHECK(n >= 0);
  const int p = layout().page_size;
  const int64_t new_len = length_ + n;
  const size_t want_pages = static_cast<size_t>((new_len + p - 1) / p);
  // Allocate first so that a failure leaves the sequence unchanged.
  std::vector<int32_t> fresh;
  const size_t have_pages = pages_.empty() ? 0 : pages_[0].size();
  const size_t need = (want_pages - have_pages) * pages_.size();
  fresh.reserve(need);
  for (size_t i = 0; i < need; ++i) {
    auto id = pool_->Allocate();
    if (!id.ok()) {
      for (int32_t f : fresh) pool_->Free(f);
      return id.status();
    }
    fresh.push_back(*id);
  }
  size_t next = 0;
  for (auto& list : pages_) {
    while (list.size() < want_pages) list.push_back({fresh[next++], 0});
    for (size_t i = 0; i < list.size(); ++i) {
      const int64_t begin = static_cast<int64_t>(i) * p;
      list[i].len = static_cast<int32_t>(std::clamp<int64_t>(new_len - begin, 0, p));
    }
  }
  length_ = new_len;
  return Status::Ok();
}

void KvSequence::Truncate(int64_t n) {
  ICECACHE_CHECK(n >= 0 && n <= length_);
  const int p = layout().page_size;
  const size_t keep = static_cast<size_t>((n + p - 1) / p);
  for (auto& list : pages_) {
    while (list.size() > keep) {
      pool_->Free(list.back().id);
      list.pop_back();
    }
    if (!list.empty())
      list.back().len = static_cast<int32_t>(n - static_cast<int64_t>(keep - 1) * p);
  }
  length_ = n;
}

void KvSequence::Slots(int layer, int64_t first, int64_t n, int32_t* slots) const {
  ICECACHE_CHECK(first >= 0 && first + n <= length_);
  const int heads = layout().n_kv_heads;
  const int p = layout().page_size;
  for (int h = 0; h < heads; ++h) {
    const std::vector<PageRef>& list = pages(layer, h);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = first + t;
      slots[t * heads + h] = list[pos / p].id * p + static_cast<int32_t>(pos % p);
    }
  }
}

Status KvSequence::CopyFrom(const KvSequence& other, Backend& backend) {
  ICECACHE_CHECK(length_ == 0 && num_pages() == 0 && pool_ == other.pool_);
  std::vector<int32_t> src, dst;
  for (const auto& list : other.pages_) {
    for (const PageRef& p : list) {
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
      ICECACHE_ASSIGN_OR_RETURN(Tensor s_dev, backend.Allocate(DType::kI32, {n}));
      ICECACHE_ASSIGN_OR_RETURN(Tensor d_dev, backend.Allocate(DType::kI32, {n}));
      ICECACHE_RETURN_IF_ERROR(backend.Copy(src_ids, s_dev));
      ICECACHE_RETURN_IF_ERROR(backend.Copy(dst_ids, d_dev));
      backend.CopyPages(pool_->view(), pool_->view(), s_dev, d_dev);
      backend.Synchronize();
    } else {
      backend.CopyPages(pool_->view(), pool_->view(), src_ids, dst_ids);
    }
  }
  size_t next = 0;
  for (size_t i = 0; i < pages_.size(); ++i) {
    for (const PageRef& p : other.pages_[i]) pages_[i].push_back({dst[next++], p.len});
  }
  length_ = other.length_;
  return Status::Ok();
}

int64_t KvSequence::num_pages() const {
  int64_t n = 0;
  for (const auto& list : pages_) n += static_cast<int64_t>(list.size());
  return n;
}

}  // namespace icecache
