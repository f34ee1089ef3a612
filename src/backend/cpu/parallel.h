// Dynamic scheduling on top of ThreadPool::ParallelFor.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/thread_pool.h"

namespace icecache::cpu {

// Runs fn(thread_index, unit) for every unit in [0, units), handing units out one at a time
// from an atomic counter: a core slowed by other work (this machine is shared) takes fewer
// units instead of stalling the call. Allocation free: the std::function that ParallelFor
// receives captures a single pointer, which fits its small-object buffer.
template <typename F>
void ParallelUnits(ThreadPool& pool, int64_t units, F&& fn) {
  if (units <= 0) return;
  if (units == 1 || pool.size() == 1) {
    for (int64_t u = 0; u < units; ++u) fn(0, u);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0};
    int64_t units;
    F* fn;
  } state;
  state.units = units;
  state.fn = &fn;
  pool.ParallelFor(
      std::min<int64_t>(pool.size(), units), 1, [s = &state](int thread, int64_t, int64_t) {
        for (int64_t u; (u = s->next.fetch_add(1, std::memory_order_relaxed)) < s->units;) {
          (*s->fn)(thread, u);
        }
      });
}

}  // namespace icecache::cpu
