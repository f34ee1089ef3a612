#include "kv/page_pool.h"

#include <numeric>
#include <string>

#include "core/check.h"

namespace icecache {

Result<std::unique_ptr<PagePool>> PagePool::Create(Backend& backend, const KvLayout& layout,
                                                   int64_t capacity, PoolPlacement placement) {
  if (capacity <= 0 || capacity > INT32_MAX / layout.page_size) {
    return InvalidArgument("KV page capacity " + std::to_string(capacity) + " is out of range");
  }
  std::unique_ptr<PagePool> pool(new PagePool());
  pool->layout_ = layout;
  pool->capacity_ = capacity;
  const bool host = placement == PoolPlacement::kHost && backend.device() != Device::kCpu;
  pool->host_accessible_ = host || backend.device() == Device::kCpu;
  pool->offloaded_ = host;
  auto alloc = [&](DType dtype, std::initializer_list<int64_t> shape) {
    return host ? backend.AllocateStaging(dtype, shape) : backend.Allocate(dtype, shape);
  };
  ICECACHE_ASSIGN_OR_RETURN(pool->k_,
                            alloc(layout.dtype, {capacity, layout.page_size, layout.head_dim}));
  ICECACHE_ASSIGN_OR_RETURN(pool->v_,
                            alloc(layout.dtype, {capacity, layout.page_size, layout.head_dim}));
  ICECACHE_ASSIGN_OR_RETURN(pool->positions_, alloc(DType::kI32, {capacity, layout.page_size}));
  pool->version_.assign(capacity, 0);
  {
    MutexLock lock(&pool->mu_);
    pool->free_.resize(capacity);
    // Stack with page 0 on top.
    std::iota(pool->free_.rbegin(), pool->free_.rend(), 0);
  }
  return pool;
}

Result<int32_t> PagePool::Allocate() {
  MutexLock lock(&mu_);
  if (free_.empty()) {
    return ResourceExhausted("out of KV space: all " + std::to_string(capacity_) + " pages of " +
                             std::to_string(layout_.page_size) + " tokens are in use");
  }
  const int32_t id = free_.back();
  free_.pop_back();
  ++version_[id];
  peak_used_ = std::max(peak_used_, capacity_ - static_cast<int64_t>(free_.size()));
  return id;
}

void PagePool::Free(int32_t page) {
  ICECACHE_CHECK(page >= 0 && page < capacity_);
  MutexLock lock(&mu_);
  (holding_ ? held_ : free_).push_back(page);
}

void PagePool::HoldFrees() {
  MutexLock lock(&mu_);
  holding_ = true;
}

void PagePool::ReleaseHeld() {
  MutexLock lock(&mu_);
  free_.insert(free_.end(), held_.begin(), held_.end());
  held_.clear();
  holding_ = false;
}

int64_t PagePool::bytes() const { return k_.nbytes() + v_.nbytes() + positions_.nbytes(); }

KvPoolView PagePool::view() const {
  KvPoolView v;
  v.k = k_.data();
  v.v = v_.data();
  v.positions = positions_.data_as<int32_t>();
  v.dtype = layout_.dtype;
  v.num_pages = capacity_;
  v.page_size = layout_.page_size;
  v.head_dim = layout_.head_dim;
  return v;
}

}  // namespace icecache
