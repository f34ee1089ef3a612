// A pool of KV pages with a free list, in one backend's memory or in host memory the backend
// copies from fastest (the host tier of a GPU: pinned, mapped into the device's address space,
// so kernels read it directly). The pool stores; it knows nothing of sequences, policies or
// indexes (storage apart from search).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"
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
  void Free(int32_t page);
  // Marks a page's contents as changed (copies of it elsewhere are stale).
  void Touch(int32_t page) { ++version_[page]; }
  // Changes whenever the page is written or re-allocated.
  uint32_t version(int32_t page) const { return version_[page]; }

  const KvLayout& layout() const { return layout_; }
  int64_t capacity() const { return capacity_; }
  int64_t used() const {
    std::lock_guard<std::mutex> lock(mu_);
    return capacity_ - static_cast<int64_t>(free_.size());
  }
  int64_t peak_used() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_used_;
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
  int64_t peak_used_ = 0;
  bool host_accessible_ = false;
  bool offloaded_ = false;
  Tensor k_, v_, positions_;
  mutable std::mutex mu_;      // guards free_ and peak_used_
  std::vector<int32_t> free_;  // a stack; low ids handed out first
  std::vector<uint32_t> version_;
};

}  // namespace icecache
