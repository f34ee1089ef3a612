// The prompt's index build as the engine runs it after prefill: every (layer, KV head) list of
// a sequence holds `context` keys (bf16 pages by default, as the GPU engine's pinned host tier),
// and one OnAppend bulk-builds all lists on a pool of host threads. Measures the fill and the
// build separately, so thread scaling of the build shows on its own.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/half.h"
#include "core/process.h"
#include "core/thread_pool.h"
#include "engine/device_selection.h"
#include "index/policy.h"
#include "kv/kv_sequence.h"
#include "kv/page_pool.h"
#include "kv/working_set.h"
#include "synthetic_keys.h"

namespace icecache::bench {

struct BulkBuildOptions {
  int64_t context = 131072;
  int layers = 32, kv_heads = 8, dim = 128, page = 16;
  DType dtype = DType::kBF16;
  int threads = 0;  // 0: every hardware thread
  KvConfig kv;      // policy, budget, window, sink
  int decode = 0;   // decode tokens appended after the build, one OnAppend each
  // Also time DeviceSelection::Prepare before each decode token (the host's share of a device-
  // selecting step; here on the CPU backend, whose copies and page bounds are host work too).
  bool prepare = false;
  // With prepare: icecache takes its insertion routes from the device selection (--kv-route
  // device; on the CPU backend the route op runs inside Prepare, on a GPU it is a kernel).
  bool device_routes = false;
};

struct BulkBuildResult {
  double fill_seconds = 0, build_seconds = 0;
  int threads = 0;
  int64_t lists = 0;
  int64_t index_bytes = 0;  // the index's host memory after the build (SequenceIndex::MemoryBytes)
  std::vector<double> step_seconds;           // OnAppend of each decode token
  std::vector<double> prepare_seconds;        // DeviceSelection::Prepare before each decode token
  SequenceIndex::InsertionCounts insertions;  // after the decode tokens
};

// Writes the synthetic keys of positions [first, length) into every list (values only matter
// for the keys; V rows are left as the pool gives them).
inline Status FillKeys(const SyntheticKeys& gen, KvSequence& seq, ThreadPool& workers,
                       int64_t first = 0) {
  const KvLayout& L = seq.layout();
  const int64_t n = seq.length() - first;
  const KvPoolView v = seq.pool().view();
  std::vector<int32_t> slots(static_cast<size_t>(n * L.n_kv_heads));
  for (int l = 0; l < L.n_layers; ++l) {
    seq.Slots(l, first, n, slots.data());
    workers.ParallelFor(n, 256, [&](int, int64_t begin, int64_t end) {
      std::vector<float> k(static_cast<size_t>(L.head_dim));
      for (int64_t t = begin; t < end; ++t) {
        for (int h = 0; h < L.n_kv_heads; ++h) {
          const int64_t slot = slots[t * L.n_kv_heads + h];
          // Heads and layers see the same topics at different positions.
          gen.Key(first + t + 7919 * (l * L.n_kv_heads + h), k.data());
          v.positions[slot] = static_cast<int32_t>(first + t);
          if (L.dtype == DType::kF32) {
            std::copy(k.begin(), k.end(), static_cast<float*>(v.k) + slot * L.head_dim);
          } else {
            uint16_t* dst = static_cast<uint16_t*>(v.k) + slot * L.head_dim;
            for (int j = 0; j < L.head_dim; ++j) dst[j] = F32ToBf16(k[j]);
          }
        }
      }
    });
  }
  return Status::Ok();
}

inline Result<BulkBuildResult> RunBulkBuild(const BulkBuildOptions& o) {
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16) {
    return InvalidArgument("bulk build bench: pages must be f32 or bf16");
  }
  BulkBuildResult r;
  const KvLayout layout{o.layers, o.kv_heads, o.dim, o.page, o.dtype};
  ThreadPool workers(o.threads);
  r.threads = workers.size();
  r.lists = static_cast<int64_t>(o.layers) * o.kv_heads;
  IndexContext ctx;
  ctx.config = o.kv;
  ctx.layout = layout;
  ctx.n_heads = o.kv_heads;
  ctx.limits = LimitsFor(o.kv);
  ctx.workers = &workers;
  ICECACHE_ASSIGN_OR_RETURN(std::unique_ptr<SequenceIndex> index, MakeSequenceIndex(ctx));
  if (!index) return InvalidArgument("policy '" + o.kv.policy + "' has no index to build");
  auto backend = MakeCpuBackend({.threads = 1});
  ICECACHE_ASSIGN_OR_RETURN(
      auto pool,
      PagePool::Create(*backend, layout, PoolPagesFor(o.kv, layout, o.context + o.decode)));
  {
    // Every page touched once, as the engine's pinned host tier is: the build then pays no
    // first-touch page faults that the engine would not.
    const KvPoolView v = pool->view();
    const size_t rows = static_cast<size_t>(v.num_pages) * v.page_size;
    const size_t bytes = rows * v.head_dim * (o.dtype == DType::kF32 ? 4 : 2);
    workers.ParallelFor(2, 1, [&](int, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) std::memset(i == 0 ? v.k : v.v, 0, bytes);
    });
    std::memset(v.positions, 0, rows * sizeof(int32_t));
  }
  KvSequence seq(pool.get());
  ICECACHE_RETURN_IF_ERROR(seq.Grow(o.context));
  SyntheticSpec spec;
  spec.dim = o.dim;
  const SyntheticKeys gen(spec);
  double t0 = NowSeconds();
  ICECACHE_RETURN_IF_ERROR(FillKeys(gen, seq, workers));
  r.fill_seconds = NowSeconds() - t0;
  const std::vector<int32_t> tokens(static_cast<size_t>(o.context), 0);
  t0 = NowSeconds();
  ICECACHE_RETURN_IF_ERROR(index->OnAppend(seq, 0, tokens));
  r.build_seconds = NowSeconds() - t0;
  r.index_bytes = index->MemoryBytes();
  std::unique_ptr<WorkingSet> ws;
  std::unique_ptr<DeviceSelection> device;
  if (o.prepare) {
    const SelectionLimits lim = LimitsFor(o.kv);
    ICECACHE_ASSIGN_OR_RETURN(
        ws, WorkingSet::Create(*backend, layout, o.layers * o.kv_heads, lim.max_pages, 0));
    ICECACHE_ASSIGN_OR_RETURN(
        device, DeviceSelection::Create(*backend, o.kv, layout, o.layers, o.kv_heads, *pool, *ws));
    ICECACHE_RETURN_IF_ERROR(device->Prepare(seq, 0));  // the prompt's lists, as after prefill
    if (o.device_routes) ICECACHE_RETURN_IF_ERROR(device->EnableRoutes());
  } else if (o.device_routes) {
    return InvalidArgument("--route device needs --prepare 1");
  }
  std::vector<KeyRoute> routes;
  // Decode: one token at a time, as the engine appends them (the tokens leaving the window are
  // inserted into the index once a page of them has left it).
  const std::vector<int32_t> one(1, 0);
  for (int i = 0; i < o.decode; ++i) {
    const int64_t pos = seq.length();
    ICECACHE_RETURN_IF_ERROR(seq.Grow(1));
    if (device) {
      t0 = NowSeconds();
      ICECACHE_RETURN_IF_ERROR(device->Prepare(seq, 1));
      r.prepare_seconds.push_back(NowSeconds() - t0);
    }
    ICECACHE_RETURN_IF_ERROR(FillKeys(gen, seq, workers, pos));
    if (device && o.device_routes) {
      ICECACHE_RETURN_IF_ERROR(device->TakeRoutes(&routes));
      index->AcceptRoutes(routes);
    }
    t0 = NowSeconds();
    ICECACHE_RETURN_IF_ERROR(index->OnAppend(seq, pos, one));
    r.step_seconds.push_back(NowSeconds() - t0);
  }
  r.insertions = index->insertion_counts();
  return r;
}

}  // namespace icecache::bench
