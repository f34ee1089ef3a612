// A fixed pool of worker threads for data-parallel loops (the CPU backend's only threading).
// ParallelFor blocks until every index is done; the calling thread takes part.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace icecache {

class ThreadPool {
 public:
  // `threads` <= 0 means all hardware threads. The calling thread counts as one.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  // Runs fn(thread_index, begin, end) over [0, n) split into at most size() contiguous ranges
  // of whole `grain`-sized chunks. thread_index is in [0, size()) and unique per call, so it can
  // pick a per-thread scratch buffer. A call made from inside one of this pool's ranges (work
  // that is itself spread over the pool) runs inline on the calling thread as fn(0, 0, n). Calls
  // from two outside threads at once are not allowed.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int thread_index, int64_t begin, int64_t end)>& fn);
  // ParallelFor for a caller that may meet another outside thread's call on this pool (an index
  // laying out a prompt on a thread of its own): while such a call runs, this one runs inline on
  // the calling thread as fn(0, 0, n) instead. fn must then not rely on thread_index being unique
  // across the two calls.
  void ParallelForIfIdle(
      int64_t n, int64_t grain,
      const std::function<void(int thread_index, int64_t begin, int64_t end)>& fn);

 private:
  // Both calls: inline where one range covers the work or the caller runs one of this pool's
  // ranges; else claims the pool (if_idle: or runs inline where another call holds it) and Runs.
  void Dispatch(int64_t n, int64_t grain, const std::function<void(int, int64_t, int64_t)>& fn,
                bool if_idle);
  // Runs a call whose caller has set Impl::busy; clears it when done.
  void Run(int64_t n, int64_t grain, int64_t chunks, int ranges,
           const std::function<void(int, int64_t, int64_t)>& fn);

  struct Impl;
  int size_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace icecache
