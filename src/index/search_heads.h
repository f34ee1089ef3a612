// The per-KV-head searches of one Select call, spread over the engine's index workers: the lists
// of a layer's KV heads are independent, so each head can search on its own thread with its own
// scratch, and the result is that of searching them one by one.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "index/lychee/search.h"
#include "index/policy.h"

namespace icecache {

// One thread's scratch for the search of a KV head, for a policy whose search keeps its state in
// `SearchScratch`: the loose pages it scored, its picks and its work counts.
template <typename SearchScratch>
struct HeadSearchScratch {
  std::vector<lychee::LooseUnit> loose;  // the loose pages' scores
  std::vector<int32_t> loose_page;       // and their list indices
  std::vector<lychee::Pick> picks;
  std::vector<float> floats;  // keys converted to f32, or a ball's centre
  SearchScratch search;
  SelectionStats stats;
};

// Runs search(h, &scratch) for every KV head h in `heads`, one head at a time per thread of
// `workers` (when it has more than one thread and there is more than one head), then adds every
// scratch's work counts into `stats`. `Scratch` has a `SelectionStats stats` member; `scratch`
// holds one per thread and is reused across calls.
template <typename Scratch, typename Search>
void SearchHeads(ThreadPool* workers, const std::vector<int>& heads, std::vector<Scratch>* scratch,
                 SelectionStats* stats, Search&& search) {
  const int n = static_cast<int>(heads.size());
  if (n == 0) return;
  const bool parallel = workers != nullptr && workers->size() > 1 && n > 1;
  scratch->resize(parallel ? workers->size() : 1);
  for (Scratch& s : *scratch) s.stats = {};
  auto run = [&](int thread, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) search(heads[i], &(*scratch)[thread]);
  };
  if (parallel) {
    workers->ParallelFor(n, 1, run);
  } else {
    run(0, 0, n);
  }
  for (const Scratch& s : *scratch) {
    stats->nodes_visited += s.stats.nodes_visited;
    stats->keys_scored += s.stats.keys_scored;
  }
}

}  // namespace icecache
