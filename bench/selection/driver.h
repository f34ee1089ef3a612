// Drives one SequenceIndex the way the engine's decode does, without a model: keys are written
// into a KvSequence on the CPU backend and announced with OnAppend in prefill-sized chunks; then
// each decode step appends one token and calls Select for every layer with that token's queries.
// Measures the time of each Select call, the work it reports (SelectionStats) and, optionally,
// the attention-mass recall of what it selected.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/process.h"
#include "engine/attention_recall.h"
#include "index/policy.h"
#include "kv/kv_sequence.h"
#include "kv/page_pool.h"

namespace icecache::bench {

struct KeySource {
  KvLayout layout;  // n_layers: layers driven; f32 pages
  int n_heads = 0;  // query heads (GQA groups of n_heads / n_kv_heads)
  const Tokenizer* tokenizer = nullptr;
  std::function<void(int layer, int head, int64_t pos, float* k)> key;
  std::function<int32_t(int64_t pos)> token;
  // The n_heads query vectors issued by the token at `pos` in `layer`.
  std::function<void(int layer, int64_t pos, float* q)> query;
};

struct DriveOptions {
  int64_t context = 0;  // tokens before the first measured step
  int steps = 16;       // measured decode steps
  int chunk = 512;      // tokens per OnAppend while building
  bool recall = true;
};

struct DriveResult {
  bool supported = true;
  std::string note;              // why not, when unsupported
  double build_seconds = 0;      // OnAppend over the context
  double update_seconds = 0;     // OnAppend of the measured decode steps' tokens, summed
  int steps = 0;                 // measured decode steps
  std::vector<double> select_s;  // one per Select call (one layer, every KV head)
  double nodes = 0;              // per (Select call, KV head)
  double keys_scored = 0;        // per (Select call, KV head)
  double tokens_selected = 0;    // per (Select call, KV head)
  double recall = 0;             // mean over (step, layer, query head)
  int64_t index_bytes = 0;

  double MedianSelect() const {
    std::vector<double> v = select_s;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
};

namespace driver_internal {

// Appends positions [first, first + n) of every layer and head and tells the index.
inline Status Append(const KeySource& src, KvSequence& seq, SequenceIndex& index, int64_t first,
                     int64_t n, double* index_seconds) {
  ICECACHE_RETURN_IF_ERROR(seq.Grow(n));
  const KvLayout& L = src.layout;
  const KvPoolView v = seq.pool().view();
  std::vector<int32_t> slots(static_cast<size_t>(n * L.n_kv_heads));
  for (int l = 0; l < L.n_layers; ++l) {
    seq.Slots(l, first, n, slots.data());
    for (int64_t t = 0; t < n; ++t) {
      for (int h = 0; h < L.n_kv_heads; ++h) {
        const int32_t slot = slots[t * L.n_kv_heads + h];
        src.key(l, h, first + t,
                static_cast<float*>(v.k) + static_cast<int64_t>(slot) * L.head_dim);
        v.positions[slot] = static_cast<int32_t>(first + t);
      }
    }
  }
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) ids[t] = src.token(first + t);
  const double t0 = NowSeconds();
  ICECACHE_RETURN_IF_ERROR(index.OnAppend(seq, first, ids));
  *index_seconds += NowSeconds() - t0;
  return Status::Ok();
}

}  // namespace driver_internal

inline Result<DriveResult> DriveIndex(const KeySource& src, const KvConfig& kv,
                                      const DriveOptions& o) {
  DriveResult r;
  const KvLayout& L = src.layout;
  IndexContext ctx;
  ctx.config = kv;
  ctx.layout = L;
  ctx.n_heads = src.n_heads;
  ctx.limits = LimitsFor(kv);
  ctx.tokenizer = src.tokenizer;
  auto made = MakeSequenceIndex(ctx);
  if (!made.ok()) {
    if (made.status().code() != StatusCode::kUnsupported) return made.status();
    r.supported = false;
    r.note = made.status().message();
    return r;
  }
  std::unique_ptr<SequenceIndex> index = std::move(made).value();
  if (!index) return InvalidArgument("policy '" + kv.policy + "' has no index to drive");
  auto backend = MakeCpuBackend({.threads = 1});
  const int64_t capacity =
      PoolPagesFor(kv, L, o.context + o.steps + 1) + 4LL * L.n_layers * L.n_kv_heads;
  ICECACHE_ASSIGN_OR_RETURN(auto pool, PagePool::Create(*backend, L, capacity));
  KvSequence seq(pool.get());
  for (int64_t done = 0; done < o.context;) {
    const int64_t n = std::min<int64_t>(o.chunk, o.context - done);
    ICECACHE_RETURN_IF_ERROR(driver_internal::Append(src, seq, *index, done, n, &r.build_seconds));
    done += n;
  }
  const int heads = L.n_kv_heads, group = src.n_heads / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(L.head_dim));
  std::vector<float> q(static_cast<size_t>(src.n_heads) * L.head_dim);
  std::vector<std::vector<PageRef>> out(heads);
  SelectionStats warm;
  // One untimed call per layer: indexes that build state lazily do it here, not in a step.
  for (int l = 0; l < L.n_layers; ++l) {
    src.query(l, o.context, q.data());
    index->Select(seq, l, q.data(), out, &warm);
  }
  AttentionRecall meter;
  RecallTally tally;
  SelectionStats sum;
  int64_t calls = 0, selected = 0;
  for (int s = 0; s < o.steps; ++s) {
    const int64_t pos = o.context + s;
    ICECACHE_RETURN_IF_ERROR(driver_internal::Append(src, seq, *index, pos, 1, &r.update_seconds));
    ++r.steps;
    for (int l = 0; l < L.n_layers; ++l) {
      src.query(l, pos, q.data());
      const double t0 = NowSeconds();
      index->Select(seq, l, q.data(), out, &sum);
      r.select_s.push_back(NowSeconds() - t0);
      ++calls;
      for (int h = 0; h < heads; ++h) {
        for (const PageRef& p : out[h]) selected += p.len;
        if (o.recall) meter.AddPages(seq, l, h, q.data(), group, scale, out[h], &tally);
      }
    }
  }
  const double per = static_cast<double>(calls * heads);
  r.nodes = static_cast<double>(sum.nodes_visited) / per;
  r.keys_scored = static_cast<double>(sum.keys_scored) / per;
  r.tokens_selected = static_cast<double>(selected) / per;
  r.recall = tally.Mean();
  r.index_bytes = index->MemoryBytes();
  return r;
}

}  // namespace icecache::bench
