// Dynamic scheduling on top of ThreadPool::ParallelFor.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

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
    std::remove_reference_t<F>* fn;
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

// Like ParallelUnits, but the units are first split into one contiguous block per thread: a
// thread walks its own block front to back (so a thread streams one contiguous region of memory
// and its prefetches run ahead across units), then takes the units left in the other blocks.
// At most kMaxContiguousBlocks threads take part.
constexpr int kMaxContiguousBlocks = 64;

template <typename F>
void ParallelUnitsContiguous(ThreadPool& pool, int64_t units, F&& fn) {
  if (units <= 0) return;
  const int parts =
      static_cast<int>(std::min<int64_t>({pool.size(), units, int64_t{kMaxContiguousBlocks}}));
  if (parts <= 1) {
    for (int64_t u = 0; u < units; ++u) fn(0, u);
    return;
  }
  struct alignas(64) Block {
    std::atomic<int64_t> next;
    int64_t end;
  };
  struct State {
    Block blocks[kMaxContiguousBlocks];
    int parts;
    std::remove_reference_t<F>* fn;
  } state;
  for (int b = 0; b < parts; ++b) {
    state.blocks[b].next.store(units * b / parts, std::memory_order_relaxed);
    state.blocks[b].end = units * (b + 1) / parts;
  }
  state.parts = parts;
  state.fn = &fn;
  pool.ParallelFor(parts, 1, [s = &state](int thread, int64_t first, int64_t) {
    for (int i = 0; i < s->parts; ++i) {
      Block& b = s->blocks[(first + i) % s->parts];
      for (int64_t u; (u = b.next.fetch_add(1, std::memory_order_relaxed)) < b.end;) {
        (*s->fn)(thread, u);
      }
    }
  });
}

}  // namespace icecache::cpu
