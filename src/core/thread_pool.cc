// ThreadPool: persistent workers woken by a generation counter.
//
// Dispatch protocol. The caller publishes a job (fn, n, grain) and then bumps `ticket`, one
// 64-bit atomic holding (generation << 16 | ranges). A worker waits actively on `ticket` for a
// short time and then sleeps on `wake_cv`. Range r > 0 belongs to worker r, but whoever claims it
// first runs it: the claim is a compare-and-swap of claims[r] up to the job's generation. The
// caller runs range 0 and then claims every range whose worker has not started, so a worker that
// is descheduled (this machine is shared) delays nothing: the caller runs its range and never
// waits for it. A worker that loses the claim, or is not part of the call, never reads the job
// (which the caller may already be replacing). The caller then waits for `pending` (ranges still
// running on workers) to reach zero, actively first and on `done_cv` after.
//
// Sleeping uses the Dekker pattern on seq_cst atomics: the sleeper announces itself (`sleepers`
// / `caller_sleeping`) before re-checking its condition under the mutex, and the waker publishes
// its change before reading the announcement, so one of the two always sees the other and no
// wake-up is lost.
#include "core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/check.h"

namespace icecache {

namespace {

constexpr int kRangeBits = 16;
constexpr uint64_t kRangeMask = (uint64_t{1} << kRangeBits) - 1;
// How long a thread waits actively before it sleeps. Decode issues ParallelFor calls every few
// microseconds, so a short active wait catches almost all of them without burning a core when
// idle. The first kPauseSpins checks only pause; after that every check yields the core, so that
// with more runnable threads than cores (a shared machine, an oversubscribed pool) the thread we
// are waiting for gets to run instead of us.
constexpr auto kSpinTime = std::chrono::microseconds(200);
constexpr int kPauseSpins = 1024;

// Waits actively until pred() holds or kSpinTime passes; returns pred().
template <typename Pred>
bool SpinUntil(Pred pred) {
  for (int i = 0; i < kPauseSpins; ++i) {
    if (pred()) return true;
    _mm_pause();
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (pred()) return true;
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() - start > kSpinTime) return pred();
  }
}

// The pool whose range the current thread is running, if any: a ParallelFor on that pool from
// inside it runs inline.
thread_local const void* tls_running_pool = nullptr;

// Marks the current thread as running a range of `pool` for its lifetime.
class RunningRange {
 public:
  explicit RunningRange(const void* pool) : saved_(tls_running_pool) { tls_running_pool = pool; }
  ~RunningRange() { tls_running_pool = saved_; }

 private:
  const void* saved_;
};

}  // namespace

struct ThreadPool::Impl {
  using Fn = std::function<void(int, int64_t, int64_t)>;

  // The current job; written by the caller before `ticket_` is bumped, read by the workers whose
  // index is below the ticket's range count.
  const Fn* fn = nullptr;
  int64_t n = 0;
  int64_t grain = 1;
  int64_t chunks = 0;
  int ranges = 0;

  std::atomic<uint64_t> ticket{0};
  std::atomic<int> pending{0};
  // claims[r]: the last generation whose range r has been claimed (by worker r or the caller).
  struct alignas(64) Claim {
    std::atomic<uint64_t> generation{0};
  };
  std::unique_ptr<Claim[]> claims;
  std::atomic<int> sleepers{0};
  std::atomic<bool> caller_sleeping{false};
  std::atomic<bool> stop{false};
  std::atomic<bool> busy{false};  // catches reentrant or concurrent ParallelFor calls

  std::mutex mu;
  std::condition_variable wake_cv;
  std::condition_variable done_cv;
  std::vector<std::thread> workers;

  // Range r of the current job: chunks [r * chunks / ranges, (r + 1) * chunks / ranges).
  void RunRange(int r) const {
    const int64_t c0 = r * chunks / ranges;
    const int64_t c1 = (r + 1) * chunks / ranges;
    const int64_t begin = c0 * grain;
    const int64_t end = std::min(n, c1 * grain);
    const RunningRange running(this);
    if (begin < end) (*fn)(r, begin, end);
  }

  // True for exactly one of the threads that try to claim range r of `generation`.
  bool TryClaim(int r, uint64_t generation) {
    uint64_t seen = claims[r].generation.load(std::memory_order_relaxed);
    return seen < generation && claims[r].generation.compare_exchange_strong(
                                    seen, generation, std::memory_order_acq_rel);
  }

  void WorkerLoop(int index) {
    uint64_t seen_generation = 0;
    for (;;) {
      uint64_t t = ticket.load(std::memory_order_acquire);
      auto changed = [&] {
        t = ticket.load(std::memory_order_seq_cst);
        return (t >> kRangeBits) != seen_generation || stop.load(std::memory_order_relaxed);
      };
      if (!SpinUntil(changed)) {
        std::unique_lock<std::mutex> lock(mu);
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        wake_cv.wait(lock, changed);
        sleepers.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen_generation = t >> kRangeBits;
      if (index >= static_cast<int>(t & kRangeMask)) continue;
      if (!TryClaim(index, seen_generation)) continue;  // the caller took it over
      RunRange(index);
      if (pending.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> lock(mu);
        done_cv.notify_one();
      }
    }
  }
};

ThreadPool::ThreadPool(int threads) : impl_(std::make_unique<Impl>()) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  size_ = std::min<int>(threads, static_cast<int>(kRangeMask));
  impl_->claims = std::make_unique<Impl::Claim[]>(size_);
  impl_->workers.reserve(size_ - 1);
  for (int i = 1; i < size_; ++i) {
    impl_->workers.emplace_back([impl = impl_.get(), i] { impl->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop.store(true, std::memory_order_seq_cst);
    // A bump of the generation wakes spinning workers as well as sleeping ones.
    impl_->ticket.fetch_add(uint64_t{1} << kRangeBits, std::memory_order_seq_cst);
  }
  impl_->wake_cv.notify_all();
  for (auto& w : impl_->workers) w.join();
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int, int64_t, int64_t)>& fn) {
  Dispatch(n, grain, fn, /*if_idle=*/false);
}

void ThreadPool::ParallelForIfIdle(int64_t n, int64_t grain,
                                   const std::function<void(int, int64_t, int64_t)>& fn) {
  Dispatch(n, grain, fn, /*if_idle=*/true);
}

void ThreadPool::Dispatch(int64_t n, int64_t grain,
                          const std::function<void(int, int64_t, int64_t)>& fn, bool if_idle) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = (n + grain - 1) / grain;
  const int ranges = static_cast<int>(std::min<int64_t>(chunks, size_));
  if (ranges == 1 || tls_running_pool == impl_.get()) {
    fn(0, 0, n);
    return;
  }
  const bool taken = impl_->busy.exchange(true, std::memory_order_acquire);
  if (taken && if_idle) {
    fn(0, 0, n);  // another outside thread's call holds the pool
    return;
  }
  ICECACHE_CHECK_MSG(!taken, "ThreadPool::ParallelFor is not reentrant");
  Run(n, grain, chunks, ranges, fn);
}

void ThreadPool::Run(int64_t n, int64_t grain, int64_t chunks, int ranges,
                     const std::function<void(int, int64_t, int64_t)>& fn) {
  Impl& s = *impl_;
  s.fn = &fn;
  s.n = n;
  s.grain = grain;
  s.chunks = chunks;
  s.ranges = ranges;
  s.pending.store(ranges - 1, std::memory_order_relaxed);
  const uint64_t generation = (s.ticket.load(std::memory_order_relaxed) >> kRangeBits) + 1;
  s.ticket.store((generation << kRangeBits) | static_cast<uint64_t>(ranges),
                 std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.wake_cv.notify_all();
  }

  s.RunRange(0);
  for (int r = 1; r < ranges; ++r) {
    if (s.TryClaim(r, generation)) {
      s.RunRange(r);
      s.pending.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  auto done = [&] { return s.pending.load(std::memory_order_seq_cst) == 0; };
  if (!SpinUntil(done)) {
    std::unique_lock<std::mutex> lock(s.mu);
    s.caller_sleeping.store(true, std::memory_order_seq_cst);
    s.done_cv.wait(lock, done);
    s.caller_sleeping.store(false, std::memory_order_relaxed);
  }
  s.busy.store(false, std::memory_order_release);
}

}  // namespace icecache
