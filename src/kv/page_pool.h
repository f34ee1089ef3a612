// A pool of KV pages with a free list, in one backend's memory or in host memory the backend
// copies from fastest (the host tier of a GPU: pinned, mapped into the device's address space,
// so kernels read it directly). The pool stores; it knows nothing of sequences, policies or
// indexes (storage apart from search).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/mutex.h"
#include "kv/kv_layout.h"
#include "kv/kv_views.h"

namespace icecache {

enum class PoolPlacement {
  kBackend,  // the backend's memory (device memory on a GPU)
  kHost,     // host memory from Backend::AllocateStaging (pinned on CUDA)
};

class PagePool {
 public:
  // Reserves `capacity` pages. On the CPU the memory is committed lazily as pages are first
  // written, so a large capacity costs address space, not RAM.
  static Result<std::unique_ptr<PagePool>> Create(
      Backend& backend, const KvLayout& layout, int64_t capacity,
      PoolPlacement placement = PoolPlacement::kBackend);

  // A free page id, or ResourceExhausted naming the capacity. Its version changes. Allocate,
  // Free, used() and peak_used() may be called from several threads at once (indexes that
  // re-arrange the lists of one sequence in parallel); everything else may not.
  Result<int32_t> Allocate();
  // Returns a page to the free list, or, while frees are held, to the held pages.
  void Free(int32_t page);
  // Holding frees: while the device may still read pages of an earlier listing (an index
  // re-arranging its lists beside a decode step's device work), a freed page must not be handed
  // out again. Free() then keeps pages aside until ReleaseHeld(), which frees them and ends the
  // hold. Thread-safe like Allocate.
  void HoldFrees();
  void ReleaseHeld();
  bool holding() const {
    MutexLock lock(&mu_);
    return holding_;
  }
  // Marks a page's contents as changed (copies of it elsewhere are stale).
  void Touch(int32_t page) { ++version_[page]; }
  // Changes whenever the page is written or re-allocated.
  uint32_t version(int32_t page) const { return version_[page]; }

  const KvLayout& layout() const { return layout_; }
  int64_t capacity() const { return capacity_; }
  int64_t used() const {
    MutexLock lock(&mu_);
    return capacity_ - static_cast<int64_t>(free_.size());
  }
  int64_t peak_used() const {
    MutexLock lock(&mu_);
    return peak_used_;
  }

  // The growth reserve: pages kept free for tokens the sequences have yet to write, which
  // optional allocations (an index moving tokens into pages of its own) must leave alone, so
  // that such moves can never starve a sequence's own growth. The engine sets it to the
  // positional pages of all the sequences it admits at their full length; every KvSequence
  // credits back the positional pages its tokens already account for. 0 (the default): none.
  void set_growth_reserve(int64_t pages) {
    MutexLock lock(&mu_);
    growth_reserve_ = pages;
  }
  // Called by KvSequence as its length changes (`pages` may be negative).
  void Credit(int64_t pages) {
    MutexLock lock(&mu_);
    credited_ += pages;
  }
  // Free pages beyond what the growth reserve still holds back: what optional allocations may
  // take. Thread-safe like used().
  int64_t spare() const {
    MutexLock lock(&mu_);
    const int64_t held =
        growth_reserve_ > 0 ? std::max<int64_t>(0, growth_reserve_ - credited_) : 0;
    return std::max<int64_t>(0, static_cast<int64_t>(free_.size()) - held);
  }
  KvPoolView view() const;
  // True when the host can read and write the pages directly (CPU backend, or kHost).
  bool host_accessible() const { return host_accessible_; }
  // True for host memory of a non-CPU backend (a GPU's offloaded host tier).
  bool offloaded() const { return offloaded_; }
  int64_t bytes() const;

 private:
  PagePool() = default;
  KvLayout layout_;
  int64_t capacity_ = 0;
  bool host_accessible_ = false;
  bool offloaded_ = false;
  Tensor k_, v_, positions_;
  mutable Mutex mu_;
  std::vector<int32_t> free_ ICECACHE_GUARDED_BY(mu_);  // a stack; low ids handed out first
  std::vector<int32_t> held_ ICECACHE_GUARDED_BY(mu_);  // freed while holding_
  bool holding_ ICECACHE_GUARDED_BY(mu_) = false;
  int64_t peak_used_ ICECACHE_GUARDED_BY(mu_) = 0;
  int64_t growth_reserve_ ICECACHE_GUARDED_BY(mu_) = 0;
  int64_t credited_ ICECACHE_GUARDED_BY(mu_) = 0;
  std::vector<uint32_t> version_;
};

}  // namespace icecache
