#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

namespace icecache {
namespace {

struct Range {
  int thread;
  int64_t begin;
  int64_t end;
};

// Runs one ParallelFor and checks the contract: every index exactly once, at most size()
// contiguous ranges of whole grains, one distinct thread index per range.
void CheckCall(ThreadPool& pool, int64_t n, int64_t grain) {
  SCOPED_TRACE("n=" + std::to_string(n) + " grain=" + std::to_string(grain) +
               " threads=" + std::to_string(pool.size()));
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::mutex mu;
  std::vector<Range> ranges;
  pool.ParallelFor(n, grain, [&](int thread, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu);
    ranges.push_back({thread, begin, end});
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
  EXPECT_LE(static_cast<int>(ranges.size()), pool.size());
  std::set<int> threads;
  for (const Range& r : ranges) {
    EXPECT_GE(r.thread, 0);
    EXPECT_LT(r.thread, pool.size());
    EXPECT_TRUE(threads.insert(r.thread).second) << "thread index used twice";
    EXPECT_LT(r.begin, r.end);
    EXPECT_EQ(r.begin % grain, 0);
    EXPECT_TRUE(r.end == n || r.end % grain == 0);
  }
  if (n > 0) {
    const int64_t chunks = (n + grain - 1) / grain;
    EXPECT_EQ(static_cast<int64_t>(ranges.size()), std::min<int64_t>(chunks, pool.size()));
  }
}

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 100, 1001, 65537}) {
      for (int64_t grain : {1, 3, 16, 64, 2000}) CheckCall(pool, n, grain);
    }
  }
}

TEST(ThreadPoolTest, DefaultSizeIsHardwareThreads) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.size(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  CheckCall(pool, 1000, 1);
}

TEST(ThreadPoolTest, ManyBackToBackCalls) {
  // Decode issues hundreds of tiny calls per token; the spin/wake protocol must not lose one.
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int call = 0; call < 20000; ++call) {
    pool.ParallelFor(3, 1, [&](int, int64_t b, int64_t e) { total.fetch_add(e - b); });
  }
  EXPECT_EQ(total.load(), 60000);
}

TEST(ThreadPoolTest, WakesSleepingWorkers) {
  // Gaps longer than the spin time make workers (and the caller) go to sleep between calls.
  ThreadPool pool(2);
  for (int call = 0; call < 20; ++call) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    CheckCall(pool, 10, 1);
  }
  // A worker slower than the caller's spin makes the caller sleep until it finishes.
  for (int call = 0; call < 5; ++call) {
    std::atomic<int> done{0};
    pool.ParallelFor(2, 1, [&](int thread, int64_t, int64_t) {
      if (thread == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      done.fetch_add(1);
    });
    EXPECT_EQ(done.load(), 2);
  }
}

TEST(ThreadPoolTest, WorkersRunConcurrentlyWithTheCaller) {
  // Range 0 (the caller) waits for range 1 to start; a worker, not the caller taking the range
  // over afterwards, must start it while range 0 still runs, at least most of the time.
  ThreadPool pool(2);
  int concurrent = 0;
  for (int call = 0; call < 20; ++call) {
    std::atomic<bool> started1{false};
    bool saw = false;
    pool.ParallelFor(2, 1, [&](int thread, int64_t b, int64_t) {
      if (b == 1) {
        started1 = true;
        return;
      }
      const auto t0 = std::chrono::steady_clock::now();
      while (!started1 && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200)) {
      }
      saw = started1;
    });
    concurrent += saw;
  }
  EXPECT_GE(concurrent, 10);
}

TEST(ThreadPoolTest, ThreadIndexSelectsPrivateScratch) {
  ThreadPool pool(4);
  std::vector<int64_t> per_thread(4, 0);
  for (int call = 0; call < 100; ++call) {
    pool.ParallelFor(1000, 7, [&](int thread, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) per_thread[thread] += i;  // no lock: index is unique
    });
  }
  int64_t sum = 0;
  for (int64_t v : per_thread) sum += v;
  EXPECT_EQ(sum, 100 * (999 * 1000 / 2));
}

// Work spread over the pool whose parts spread their own work over it (sequences updated in
// parallel, each index laying out its lists in parallel): the inner calls run inline on the
// thread of their range, cover their indices once, and see thread index 0.
TEST(ThreadPoolTest, NestedCallsRunInline) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(8 * 100);
  std::atomic<int> inner_threads_not_zero{0};
  for (int call = 0; call < 20; ++call) {
    for (auto& h : hits) h.store(0);
    pool.ParallelFor(8, 1, [&](int, int64_t b, int64_t e) {
      for (int64_t outer = b; outer < e; ++outer) {
        pool.ParallelFor(100, 3, [&](int thread, int64_t ib, int64_t ie) {
          if (thread != 0) ++inner_threads_not_zero;
          for (int64_t i = ib; i < ie; ++i) ++hits[outer * 100 + i];
        });
      }
    });
    for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  EXPECT_EQ(inner_threads_not_zero.load(), 0);
  CheckCall(pool, 1000, 7);  // the pool still spreads calls from outside
}

// A second outside thread's ParallelForIfIdle, made while another call holds the pool, runs
// inline (every index once, as range 0 on its own thread) instead of failing; with the pool free
// it spreads the work as ParallelFor does.
TEST(ThreadPoolTest, IfIdleRunsInlineWhileAnotherCallerHoldsThePool) {
  ThreadPool pool(3);
  std::atomic<bool> holding{false}, release{false};
  std::thread holder([&] {
    pool.ParallelFor(3, 1, [&](int thread, int64_t, int64_t) {
      if (thread != 0) return;
      holding = true;
      while (!release) std::this_thread::yield();
    });
  });
  while (!holding) std::this_thread::yield();
  std::vector<Range> ranges;
  const std::thread::id me = std::this_thread::get_id();
  bool other_thread = false;
  pool.ParallelForIfIdle(100, 1, [&](int thread, int64_t b, int64_t e) {
    ranges.push_back({thread, b, e});
    other_thread |= std::this_thread::get_id() != me;
  });
  release = true;
  holder.join();
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].thread, 0);
  EXPECT_EQ(ranges[0].begin, 0);
  EXPECT_EQ(ranges[0].end, 100);
  EXPECT_FALSE(other_thread);
  // Free again: the work is spread over the pool, every index once.
  std::vector<std::atomic<int>> hits(1000);
  std::set<int> threads;
  std::mutex mu;
  pool.ParallelForIfIdle(1000, 1, [&](int thread, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) ++hits[i];
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(thread);
  });
  for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_EQ(threads.size(), 3u);
  CheckCall(pool, 1000, 7);  // and plain calls still work
}

TEST(ThreadPoolTest, DestroysWhileWorkersSleepOrSpin) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(3);
    if (i % 2 == 0) CheckCall(pool, 5, 1);
    if (i % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace
}  // namespace icecache
