// CUDA backend kernels at Llama-3.1-8B shapes (hidden 4096, ffn 14336, vocab 128256, 32 query
// heads, 8 KV heads, head_dim 128, pages of 16), bf16: MatMul for decode (n = 1: our GEMV) and a
// prefill chunk (n = 4096: cuBLASLt), a layer's stacked decode projections against separate ones,
// decode attention over 4K / 32K / 128K tokens, prefill attention of a 4096-token chunk at the end
// of 32K tokens, RMSNorm, and one layer's device-side page selection (SelectPages over Q8_0 mean
// keys, 8 KV heads of 32K / 128K tokens, budgets 256 and 2048), and one layer's page fetch from
// pinned host memory against the copy engines' contiguous and page-sized copies, and beside an
// MLP product as the prefetch runs, and the prefetch's chain in parts beside a layer's products.
// Skips (with a message) where no GPU is present.
//
//   build-x/bench/cuda_ops_bench [--benchmark_filter=Attention]
//
// Each iteration: the op repeated `inner` times, then one device synchronization (launch gaps
// included; Time is per iteration). Counters, per op and from the measured (manual) time, not
// the process CPU time: s/op = seconds per op; GB/s = bytes the op must read per second;
// TFLOP/s = 2 * MACs per second.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "kv/key_mean.h"

namespace icecache {
namespace {

Backend* Gpu() {
  static std::unique_ptr<Backend> gpu = [] {
    auto b = MakeCudaBackend({});
    if (!b.ok()) {
      std::fprintf(stderr, "no CUDA backend: %s\n", b.status().message().c_str());
      return std::unique_ptr<Backend>();
    }
    return std::move(b).value();
  }();
  return gpu.get();
}

Tensor Random(Backend& b, DType dtype, std::initializer_list<int64_t> shape, uint64_t seed,
              float scale = 0.5f) {
  Tensor t = b.Allocate(dtype, shape).value();
  b.FillRandom(t, seed, scale, 0.0f);
  return t;
}

// `v` copied to a new i32 tensor of `shape` in `b`'s memory.
Tensor UploadI32(Backend& b, const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  Tensor t = b.Allocate(DType::kI32, shape).value();
  (void)b.Copy(Tensor(const_cast<int32_t*>(v.data()), DType::kI32, shape), t);
  return t;
}

// Measured time and ops of a benchmark run.
struct Timing {
  double seconds = 0.0;
  double ops = 0.0;
  // `amount` per op (bytes, FLOPs) as a rate in units of `unit` per second.
  double Rate(double amount, double unit) const {
    return seconds > 0.0 ? amount * ops / seconds / unit : 0.0;
  }
};

// Runs `op` in the benchmark loop, timing batches of `inner` calls with one sync each; sets the
// s/op counter and returns the measured time for the rate counters.
template <typename F>
Timing TimeOp(benchmark::State& state, Backend& b, int inner, F&& op) {
  op();
  b.Synchronize();
  Timing t;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) op();
    b.Synchronize();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    state.SetIterationTime(dt.count());
    t.seconds += dt.count();
    t.ops += inner;
  }
  state.counters["s/op"] = t.ops > 0.0 ? t.seconds / t.ops : 0.0;
  return t;
}

void BM_MatMul(benchmark::State& state) {
  Backend* b = Gpu();
  if (b == nullptr) return state.SkipWithError("no GPU");
  const int64_t n = state.range(0), m = state.range(1), k = state.range(2);
  Tensor x = Random(*b, DType::kBF16, {n, k}, 1);
  Tensor w = Random(*b, DType::kBF16, {m, k}, 2, 0.02f);
  Tensor y = b->Allocate(DType::kBF16, {n, m}).value();
  const Timing t = TimeOp(state, *b, n == 1 ? 50 : 5, [&] { b->MatMul(x, w, nullptr, y); });
  // Bytes: the weights, read once (activations are small or cached).
  state.counters["GB/s"] = t.Rate(static_cast<double>(m * k * 2), 1e9);
  state.counters["TFLOP/s"] = t.Rate(2.0 * n * m * k, 1e12);
}
BENCHMARK(BM_MatMul)
    ->ArgNames({"n", "m", "k"})
    ->Args({1, 4096, 4096})
    ->Args({1, 1024, 4096})
    ->Args({1, 14336, 4096})
    ->Args({1, 4096, 14336})
    ->Args({1, 128256, 4096})
    ->Args({4, 14336, 4096})
    ->Args({4096, 4096, 4096})
    ->Args({4096, 14336, 4096})
    ->Args({4096, 4096, 14336})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// One decode token's q/k/v and gate/up projections (with SwiGLU) of the Llama-3.1-8B shape, per
// layer: stacked = 1 reads [wq; wk; wv] and [w_gate; w_up] in one GEMV each (MatMulSplit,
// MatMulGlu); stacked = 0 runs the same weights as five MatMuls and a SwiGlu. Four layers'
// weights (1.1 GB) rotate so that the 50 MB L2 cannot hold them between uses.
void BM_LayerProjections(benchmark::State& state) {
  Backend* b = Gpu();
  if (b == nullptr) return state.SkipWithError("no GPU");
  const bool stacked = state.range(0) != 0;
  constexpr int kLayers = 4;
  const int64_t h = 4096, q = 4096, kv = 1024, f = 14336;
  Tensor x = Random(*b, DType::kBF16, {1, h}, 1);
  std::vector<Tensor> qkv, gate_up;
  for (int l = 0; l < kLayers; ++l) {
    qkv.push_back(Random(*b, DType::kBF16, {q + 2 * kv, h}, 10 + l, 0.02f));
    gate_up.push_back(Random(*b, DType::kBF16, {2 * f, h}, 20 + l, 0.02f));
  }
  Tensor yq = b->Allocate(DType::kBF16, {1, q}).value();
  Tensor yk = b->Allocate(DType::kBF16, {1, kv}).value();
  Tensor yv = b->Allocate(DType::kBF16, {1, kv}).value();
  Tensor gate = b->Allocate(DType::kBF16, {1, f}).value();
  Tensor up = b->Allocate(DType::kBF16, {1, f}).value();
  const Tensor outs[] = {yq, yk, yv};
  const Timing t = TimeOp(state, *b, 10, [&] {
    for (int l = 0; l < kLayers; ++l) {
      if (stacked) {
        b->MatMulSplit(x, qkv[l], outs);
        b->MatMulGlu(x, gate_up[l], up, gate);
      } else {
        b->MatMul(x, qkv[l].Slice(0, q), nullptr, yq);
        b->MatMul(x, qkv[l].Slice(q, q + kv), nullptr, yk);
        b->MatMul(x, qkv[l].Slice(q + kv, q + 2 * kv), nullptr, yv);
        b->MatMul(x, gate_up[l].Slice(0, f), nullptr, gate);
        b->MatMul(x, gate_up[l].Slice(f, 2 * f), nullptr, up);
        b->SwiGlu(gate, up, gate);
      }
    }
  });
  const double bytes = static_cast<double>((q + 2 * kv + 2 * f) * h * 2) * kLayers;
  state.counters["GB/s"] = t.Rate(bytes, 1e9);
  state.counters["us/layer"] = t.ops > 0 ? 1e6 * t.seconds / t.ops / kLayers : 0.0;
}
BENCHMARK(BM_LayerProjections)
    ->ArgNames({"stacked"})
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

struct PagedKv {
  Tensor k, v, pos, indptr, indices, lens, q, out, qpos, row_base;
  AttentionArgs args;
};

// One sequence of `context` tokens in shuffled pages of 16 (Llama-3.1-8B attention shape), and
// `queries` queries at its last positions.
PagedKv MakeKv(Backend& b, int64_t context, int64_t queries) {
  const int heads = 32, kv_heads = 8, d = 128, ps = 16;
  const int64_t pages_per_row = (context + ps - 1) / ps;
  const int64_t pages = pages_per_row * kv_heads;
  PagedKv p;
  p.k = Random(b, DType::kBF16, {pages, ps, d}, 3);
  p.v = Random(b, DType::kBF16, {pages, ps, d}, 4);
  std::vector<int32_t> ids(static_cast<size_t>(pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
  std::vector<int32_t> pos(static_cast<size_t>(pages * ps)), indptr = {0}, lens;
  for (int h = 0; h < kv_heads; ++h) {
    for (int64_t j = 0; j < pages_per_row; ++j) {
      const int32_t page = ids[h * pages_per_row + j];
      const int64_t len = std::min<int64_t>(ps, context - j * ps);
      for (int64_t o = 0; o < len; ++o) pos[page * ps + o] = static_cast<int32_t>(j * ps + o);
      lens.push_back(static_cast<int32_t>(len));
    }
    indptr.push_back(static_cast<int32_t>((h + 1) * pages_per_row));
  }
  std::vector<int32_t> indices(ids.begin(), ids.end());
  // Indices in row order: row h lists ids[h * pages_per_row ...].
  p.pos = UploadI32(b, pos, {static_cast<int64_t>(pos.size())});
  p.indptr = UploadI32(b, indptr, {static_cast<int64_t>(indptr.size())});
  p.indices = UploadI32(b, indices, {static_cast<int64_t>(indices.size())});
  p.lens = UploadI32(b, lens, {static_cast<int64_t>(lens.size())});
  std::vector<int32_t> qpos, rb(static_cast<size_t>(queries), 0);
  for (int64_t i = 0; i < queries; ++i) qpos.push_back(static_cast<int32_t>(context - queries + i));
  p.qpos = UploadI32(b, qpos, {static_cast<int64_t>(qpos.size())});
  p.row_base = UploadI32(b, rb, {static_cast<int64_t>(rb.size())});
  p.q = Random(b, DType::kBF16, {queries, heads, d}, 6);
  p.out = b.Allocate(DType::kBF16, {queries, heads, d}).value();
  AttentionArgs& a = p.args;
  a.q = p.q;
  a.out = p.out;
  a.positions = p.qpos;
  a.row_base = p.row_base;
  a.table = {p.indptr.data_as<int32_t>(), p.indices.data_as<int32_t>(), p.lens.data_as<int32_t>(),
             kv_heads};
  a.pool = {p.k.data(), p.v.data(), p.pos.data_as<int32_t>(), DType::kBF16, pages, ps, d};
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.scale = 1.0f / std::sqrt(128.0f);
  a.causal = true;
  return p;
}

void BM_DecodeAttention(benchmark::State& state) {
  Backend* b = Gpu();
  if (b == nullptr) return state.SkipWithError("no GPU");
  const int64_t context = state.range(0);
  PagedKv kv = MakeKv(*b, context, 1);
  const Timing t = TimeOp(state, *b, 20, [&] { b->Attention(kv.args); });
  // Bytes: K and V of every key (8 KV heads, d128, bf16).
  state.counters["GB/s"] = t.Rate(context * 8.0 * 128 * 2 * 2, 1e9);
}
BENCHMARK(BM_DecodeAttention)
    ->ArgName("context")
    ->Arg(4096)
    ->Arg(32768)
    ->Arg(131072)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_PrefillAttention(benchmark::State& state) {
  Backend* b = Gpu();
  if (b == nullptr) return state.SkipWithError("no GPU");
  const int64_t context = state.range(0), queries = state.range(1);
  PagedKv kv = MakeKv(*b, context, queries);
  const Timing t = TimeOp(state, *b, 2, [&] { b->Attention(kv.args); });
  // Causal MACs: every query against every earlier key, for q.k and p.v.
  const double pairs = queries * static_cast<double>(context - queries) +
                       queries * static_cast<double>(queries + 1) / 2;
  state.counters["TFLOP/s"] = t.Rate(4.0 * pairs * 32 * 128, 1e12);
}
BENCHMARK(BM_PrefillAttention)
    ->ArgNames({"context", "queries"})
    ->Args({4096, 4096})
    ->Args({32768, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_RmsNorm(benchmark::State& state) {
  Backend* b = Gpu();
  if (b == nullptr) return state.SkipWithError("no GPU");
  const int64_t n = state.range(0);
  Tensor x = Random(*b, DType::kBF16, {n, 4096}, 7);
  Tensor a = Random(*b, DType::kBF16, {n, 4096}, 8);
  Tensor w = Random(*b, DType::kF32, {4096}, 9);
  const Timing t = TimeOp(state, *b, 50, [&] { b->AddRmsNorm(a, x, w, 1e-5f, a); });
  // Bytes: read a and x, write a and the output (bf16), read w.
  state.counters["GB/s"] = t.Rate(n * 4096.0 * 2 * 4 + 4096.0 * 4, 1e9);
}
BENCHMARK(BM_RmsNorm)->Arg(1)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);

// One layer's SelectPages at batch 1 as icecache calls it after a bulk build: each KV head's list
// holds one full leaf of 16 tokens per 16 positions (in shuffled pool order), ranked by Q8_0 mean
// keys and their spreads (PageBounds over random keys), with a sink page, a window of 4 pages,
// and the engine's limits for `budget` tokens (pages_left: twice the budget's pages plus 4).
struct SelectSetup {
  static constexpr int kRows = 8, kGroup = 4, kDim = 128, kPage = 16;

  SelectSetup(Backend& b, int64_t context, int budget) : kv(MakeKv(b, context, 1)) {
    const int sink_pages = 1, window_pages = 4;
    pages = kv.k.dim(0);
    const int64_t per_row = pages / kRows;
    std::vector<int32_t> iota(static_cast<size_t>(pages)), full(static_cast<size_t>(pages), kPage);
    std::iota(iota.begin(), iota.end(), 0);
    const KvPoolView pool{kv.k.data(), kv.v.data(), kv.pos.data_as<int32_t>(), DType::kBF16, pages,
                          kPage,       kDim};
    PageBoundsArgs bounds{pool, UploadI32(b, iota, {pages}), UploadI32(b, full, {pages}),
                          UploadI32(b, iota, {pages}),
                          b.Allocate(kMeanKeyDType, {pages, 1, kDim}).value()};
    bounds.spread = b.Allocate(DType::kF32, {pages}).value();
    b.PageBounds(bounds);
    // The lists: MakeKv's table (row h: its pages in position order); summary row = page id.
    std::vector<int32_t> ids(static_cast<size_t>(pages)), limits;
    (void)b.Copy(kv.indices, Tensor(ids.data(), DType::kI32, {pages}));
    b.Synchronize();
    const int tokens_left = budget - (sink_pages + window_pages) * kPage;
    const int pages_left =
        std::min(2 * budget / kPage + 4 - sink_pages - window_pages, kMaxSelectPicks);
    for (int r = 0; r < kRows; ++r) {
      const int count = static_cast<int>(per_row);
      limits.insert(limits.end(),
                    {count, sink_pages, count - window_pages, tokens_left, pages_left});
    }
    a.q = Random(b, DType::kBF16, {kRows * kGroup * kDim}, 11);
    a.list_ids = UploadI32(b, ids, {kRows, per_row});
    a.list_lens = UploadI32(b, full, {kRows, per_row});
    a.list_rows = UploadI32(b, ids, {kRows, per_row});
    a.limits = UploadI32(b, limits, {kRows, 5});
    a.bounds = bounds.bounds;
    a.spread = bounds.spread;
    a.scores = b.Allocate(DType::kF32, {kRows, per_row}).value();
    const int64_t out = 2 * budget / kPage + 8;
    a.out_ids = b.Allocate(DType::kI32, {kRows, out}).value();
    a.out_lens = b.Allocate(DType::kI32, {kRows, out}).value();
    a.out_count = b.Allocate(DType::kI32, {kRows}).value();
    a.n_heads = kRows * kGroup;
  }

  PagedKv kv;
  PageSelectArgs a;
  int64_t pages = 0;
};

void BM_SelectPages(benchmark::State& state) {
  Backend* b = Gpu();
  if (b == nullptr) return state.SkipWithError("no GPU");
  SelectSetup sel(*b, state.range(0), static_cast<int>(state.range(1)));
  const Timing t = TimeOp(state, *b, 50, [&] { b->SelectPages(sel.a); });
  // Bytes: each candidate's list entry (id, length, summary row), mean key and spread.
  state.counters["GB/s"] =
      t.Rate(sel.pages * (12.0 + RowBytes(kMeanKeyDType, SelectSetup::kDim) + 4.0), 1e9);
}
BENCHMARK(BM_SelectPages)
    ->ArgNames({"context", "budget"})
    ->Args({32768, 256})
    ->Args({32768, 2048})
    ->Args({131072, 256})
    ->Args({131072, 2048})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// One layer's pages at 128K and budget 2048 in a host tier of pinned memory (8 KV heads of 8192
// pages of 16 tokens), 128 of them per head to bring in, and MapPages' arguments for that: two
// disjoint selections alternate and each head has just the slots one needs, so that every page
// of every map is a miss (8 MiB of K and V a call). The pages are random ones of each head's
// 8192, or with `consecutive` the first 128 and the next 128.
struct FetchSetup {
  static constexpr int kRows = 8, kDim = 128, kPage = 16, kPerRow = 8192, kPicks = 128;
  static constexpr int64_t kHostPages = int64_t{kRows} * kPerRow;
  static constexpr int64_t kSlotPages = int64_t{kRows} * kPicks;
  static constexpr int64_t kPageBytes = int64_t{kPage} * kDim * 2;
  static constexpr double kBytes = 2.0 * static_cast<double>(kSlotPages * kPageBytes);

  FetchSetup(Backend& b, bool prefetch, bool consecutive = false) : b(b) {
    hk = b.AllocateStaging(DType::kBF16, {kHostPages, kPage, kDim}).value();
    hv = b.AllocateStaging(DType::kBF16, {kHostPages, kPage, kDim}).value();
    hpos = b.AllocateStaging(DType::kI32, {kHostPages * kPage}).value();
    sk = b.Allocate(DType::kBF16, {kSlotPages, kPage, kDim}).value();
    sv = b.Allocate(DType::kBF16, {kSlotPages, kPage, kDim}).value();
    spos = b.Allocate(DType::kI32, {kSlotPages * kPage}).value();
    std::mt19937 rng(7);
    std::vector<int32_t> a_ids, b_ids;
    for (int r = 0; r < kRows; ++r) {
      std::vector<int32_t> pick(kPerRow);
      std::iota(pick.begin(), pick.end(), r * kPerRow);
      if (!consecutive) std::shuffle(pick.begin(), pick.end(), rng);
      a_ids.insert(a_ids.end(), pick.begin(), pick.begin() + kPicks);
      b_ids.insert(b_ids.end(), pick.begin() + kPicks, pick.begin() + 2 * kPicks);
    }
    sel[0] = UploadI32(b, a_ids, {kRows, kPicks});
    sel[1] = UploadI32(b, b_ids, {kRows, kPicks});
    m.sel_lens = UploadI32(b, std::vector<int32_t>(kRows * kPicks, kPage), {kRows, kPicks});
    m.sel_count = UploadI32(b, std::vector<int32_t>(kRows, kPicks), {kRows});
    m.host = {hk.data(), hv.data(), hpos.data_as<int32_t>(), DType::kBF16, kHostPages, kPage, kDim};
    m.slots = {sk.data(), sv.data(), spos.data_as<int32_t>(), DType::kBF16, kSlotPages,
               kPage,     kDim};
    m.capacity = kPicks;
    m.resident = UploadI32(b, std::vector<int32_t>(kHostPages, -1), {kHostPages});
    m.slot_page = UploadI32(b, std::vector<int32_t>(kSlotPages, -1), {kSlotPages});
    m.slot_len = UploadI32(b, std::vector<int32_t>(kSlotPages, -1), {kSlotPages});
    m.table = b.Allocate(DType::kI32, {kRows + 1 + 2 * kRows * kPicks}).value();
    m.fetch = b.Allocate(DType::kI32, {kRows * (1 + 2 * kPicks)}).value();
    m.counters = b.Allocate(DType::kI32, {8}).value();
    // Prefetch mode, as the engine's prefetch maps run (no pending page).
    if (prefetch) m.pending = UploadI32(b, std::vector<int32_t>(kRows, -1), {kRows});
  }
  void Map() {
    m.sel_ids = sel[calls++ % 2];
    b.MapPages(m);
  }
  // Whether every page of every map so far was a miss (no hits counted, none found resident).
  bool AllMissed() {
    std::vector<int64_t> counters(4);
    (void)b.Copy(m.counters, Tensor(counters.data(), DType::kI32, {8}));
    return counters[0] == 0;
  }

  Backend& b;
  Tensor hk, hv, hpos, sk, sv, spos, sel[2];
  PageMapArgs m;
  int64_t calls = 0;
};

// One layer's page fetch at 128K and budget 2048: 8 KV heads of 8192 pages of 16 tokens in the
// host tier (pinned host memory), 128 pages per head brought to the device, 8 KiB of K and V
// each (8 MiB a call), three ways:
//   0: MapPages as the engine runs it (AssignKernel, then FetchKernel: the SMs read the pages
//      through mapped host memory); two disjoint selections alternate and each head has just
//      the slots one needs, so every page is a miss;
//   1: the same bytes as two contiguous copies (K, V): the copy engines at their best, the
//      host link's ceiling;
//   2: the same bytes as 4 KiB blocks at an 8 KiB pitch (one strided copy each for K and V):
//      the copy engines moving page-sized pieces, the most a copy-engine fetch could reach
//      (it would also need each layer's fetch list on the host, which the device makes);
//   3: as 0, over consecutive pages (128 adjacent pages of each head): mode 0 against this one
//      tells what scattered reads of host memory cost the kernel;
//   4: as 2, the blocks spread over the whole host tier (a 256 KiB pitch): the same question for
//      the copy engines.
void BM_FetchPages(benchmark::State& state) {
  Backend* b = Gpu();
  if (b == nullptr) return state.SkipWithError("no GPU");
  const int mode = static_cast<int>(state.range(0));
  FetchSetup f(*b, false, mode == 3);
  Timing t;
  if (mode == 0 || mode == 3) {
    t = TimeOp(state, *b, 20, [&] { f.Map(); });
    if (!f.AllMissed()) return state.SkipWithError("a map found pages resident");
  } else {
    const int64_t page = FetchSetup::kPageBytes, slots = FetchSetup::kSlotPages;
    const int64_t count = mode == 1 ? 1 : slots;
    const int64_t block = mode == 1 ? slots * page : page;
    const int64_t pitch = mode == 1   ? block
                          : mode == 2 ? 2 * page
                                      : FetchSetup::kHostPages / slots * page;
    bool ok = true;
    t = TimeOp(state, *b, 20, [&] {
      ok = ok && b->CopyBlocksQueued(f.hk.data(), f.sk.data(), count, block, pitch, block).ok();
      ok = ok && b->CopyBlocksQueued(f.hv.data(), f.sv.data(), count, block, pitch, block).ok();
    });
    if (!ok) return state.SkipWithError("a copy failed");
  }
  state.counters["GB/s"] = t.Rate(FetchSetup::kBytes, 1e9);
}
BENCHMARK(BM_FetchPages)
    ->ArgNames({"mode"})
    ->DenseRange(0, 4)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// A prefetch beside the layer it overlaps, as the engine queues it: a map of one layer's pages
// in prefetch mode (FetchSetup, 8 MiB from pinned host memory) as side work, and the gate/up
// product of an MLP (1 x 4096 by 28672 x 4096, 235 MB of weights) on the main stream:
//   0: the product alone;  1: the map alone (as side work);  2: both, the map beside the product.
// With full overlap, mode 2 takes about the longer of modes 0 and 1.
void BM_FetchBeside(benchmark::State& state) {
  Backend* b = Gpu();
  if (b == nullptr) return state.SkipWithError("no GPU");
  const int mode = static_cast<int>(state.range(0));
  FetchSetup f(*b, true);
  Tensor x = Random(*b, DType::kBF16, {1, 4096}, 1);
  Tensor w = Random(*b, DType::kBF16, {28672, 4096}, 2, 0.02f);
  Tensor y = b->Allocate(DType::kBF16, {1, 28672}).value();
  TimeOp(state, *b, 20, [&] {
    if (mode != 0) {
      b->BeginSideWork();
      f.Map();
      b->EndSideWork();
    }
    if (mode != 1) b->MatMul(x, w, nullptr, y);
    b->JoinSideWork();
  });
  if (mode != 0 && !f.AllMissed()) return state.SkipWithError("a map found pages resident");
}
BENCHMARK(BM_FetchBeside)
    ->ArgNames({"mode"})
    ->DenseRange(0, 2)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The prefetch's chain beside the layer it overlaps, to tell which of its parts slows the main
// stream (docs/PERF.md, "The prefetch's chain alone"). The main stream runs one decode layer's
// products of the Llama-3.1-8B shape at batch 1 (stacked q/k/v, output, stacked gate/up, down:
// 436 MB of weights); beside it, as side work forked before them and joined after:
//   0: nothing (no fork);  1: an empty fork and join;  2: the query estimate's product (4096 x
//   4096);  3: the product and one layer's SelectPages at 128K, budget 2048;  4: those and a
//   prefetch map of 8 MiB (FetchSetup);  5: SelectPages alone.
// Mode n against mode 0 is what that much of the chain costs the layer.
void BM_ChainBeside(benchmark::State& state) {
  Backend* b = Gpu();
  if (b == nullptr) return state.SkipWithError("no GPU");
  const int mode = static_cast<int>(state.range(0));
  SelectSetup sel(*b, 131072, 2048);
  FetchSetup f(*b, true);
  struct Product {
    Tensor w, y;
  };
  Tensor x = Random(*b, DType::kBF16, {1, 4096}, 1);
  Tensor x_down = Random(*b, DType::kBF16, {1, 14336}, 2);
  std::vector<Product> layer;
  for (const auto& [m, k] :
       {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}}) {
    layer.push_back({Random(*b, DType::kBF16, {m, k}, 3 + layer.size(), 0.02f),
                     b->Allocate(DType::kBF16, {1, m}).value()});
  }
  Tensor wq = Random(*b, DType::kBF16, {4096, 4096}, 9, 0.02f);
  Tensor q = b->Allocate(DType::kBF16, {1, 4096}).value();
  const Timing t = TimeOp(state, *b, 20, [&] {
    if (mode != 0) {
      b->BeginSideWork();
      if (mode >= 2 && mode <= 4) b->MatMul(x, wq, nullptr, q);
      if (mode >= 3) b->SelectPages(sel.a);
      if (mode == 4) f.Map();
      b->EndSideWork();
    }
    for (const Product& p : layer) {
      b->MatMul(p.w.dim(1) == 4096 ? x : x_down, p.w, nullptr, p.y);
    }
    b->JoinSideWork();
  });
  state.counters["GB/s"] = t.Rate(436.0e6, 1e9);  // the layer's weights
}
BENCHMARK(BM_ChainBeside)
    ->ArgNames({"mode"})
    ->DenseRange(0, 5)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace icecache

BENCHMARK_MAIN();
