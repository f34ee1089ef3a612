// CPU backend kernels at SmolLM2-135M shapes (hidden 576, ffn 1536, vocab 49152, 9 query heads,
// 3 KV heads, head_dim 64, pages of 16): MatMul per weight dtype for decode (n = 1) and prefill
// (n = 512), attention decode over 2K/8K tokens, a 512-token prefill chunk over 2K, and the
// ThreadPool dispatch cost.
//
//   ninja -C build-x cpu_ops_bench && build-x/bench/cpu_ops_bench [--benchmark_filter=MatMul]
//   ICECACHE_BENCH_THREADS=1 build-x/bench/cpu_ops_bench   # single-threaded kernels
//   ... --benchmark_repetitions=10 --benchmark_report_aggregates_only=true  # min/max/median
//
// Counters: GB/s = weight (or KV) bytes read per second; GFLOP/s = 2 * multiply-adds per second.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace icecache {
namespace {

// Threads of the backend and pools: ICECACHE_BENCH_THREADS, else all hardware threads.
const int kThreads = [] {
  const char* s = std::getenv("ICECACHE_BENCH_THREADS");
  return s != nullptr ? std::atoi(s) : 0;
}();

Tensor MustHost(DType dtype, std::initializer_list<int64_t> shape) {
  auto t = Tensor::Host(dtype, shape);
  if (!t.ok()) {
    std::fprintf(stderr, "cpu_ops_bench: %s\n", t.status().ToString().c_str());
    std::abort();
  }
  return std::move(t).value();
}

void FillRandom(float* p, int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) p[i] = dist(rng);
}

Tensor RandomWeight(DType type, int64_t m, int64_t k) {
  std::vector<float> row(static_cast<size_t>(k));
  Tensor w = MustHost(type, {m, k});
  for (int64_t j = 0; j < m; ++j) {
    FillRandom(row.data(), k, static_cast<uint32_t>(j));
    QuantizeRow(type, row.data(), w.row(j), k);
  }
  return w;
}

// Real time, plus min and max over --benchmark_repetitions: on a shared machine the best
// repetition (min time, max rate) is the one least disturbed by other processes.
void Common(benchmark::internal::Benchmark* b) {
  b->UseRealTime();
  b->ComputeStatistics(
      "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
  b->ComputeStatistics(
      "max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}

Backend& SharedBackend() {
  static std::unique_ptr<Backend> backend = MakeCpuBackend({.threads = kThreads});
  return *backend;
}

// Args: dtype, n, m, k.
void BM_MatMul(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t n = state.range(1), m = state.range(2), k = state.range(3);
  Backend& backend = SharedBackend();
  Tensor w = RandomWeight(type, m, k);
  Tensor x = MustHost(DType::kF32, {n, k});
  FillRandom(x.data_as<float>(), n * k, 7);
  Tensor y = MustHost(DType::kF32, {n, m});
  backend.MatMul(x, w, nullptr, y);  // warm-up: scratch sized, weights in cache if they fit
  for (auto _ : state) {
    backend.MatMul(x, w, nullptr, y);
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.nbytes()) * iters / 1e9,
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * m * k * iters / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(DTypeName(type)));
}

void MatMulArgs(benchmark::internal::Benchmark* b) {
  const DType all[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                       DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  for (int64_t n : {1, 512}) {
    for (DType t : all) {
      // gate / up (k = 576 is not a multiple of the K-quants' 256: SmolLM2 files never use
      // them there), then down.
      if (576 % BlockElems(t) == 0) b->Args({static_cast<int64_t>(t), n, 1536, 576});
      b->Args({static_cast<int64_t>(t), n, 576, 1536});
    }
  }
  for (DType t : {DType::kQ8_0, DType::kQ4_1, DType::kF32}) {
    b->Args({static_cast<int64_t>(t), 1, 49152, 576});  // tied embedding as output head
  }
  for (int64_t n : {2, 4, 5, 8, 12, 16, 32}) {  // small batches: GEMV groups or panels
    b->Args({static_cast<int64_t>(DType::kQ4_1), n, 1536, 576});
  }
  b->ArgNames({"dtype", "n", "m", "k"})->Apply(Common)->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_MatMul)->Apply(MatMulArgs);

// The decode step's weight matrices in model order, SmolLM2-135M layers in Q4_1 (q, k, v, o,
// gate, up, down) and, with all 30 layers, the Q8_0 output head: 96 MB that do not fit in cache,
// read once per token, one n = 1 MatMul at a time as the engine issues them. GB/s is the figure
// to compare with BM_MemoryRead.
void BM_DecodeStepMatMuls(benchmark::State& state) {
  const int64_t layers = state.range(0);
  Backend& backend = SharedBackend();
  struct Shape {
    int64_t m, k;
  };
  const Shape layer[] = {{576, 576},  {192, 576},  {192, 576}, {576, 576},
                         {1536, 576}, {1536, 576}, {576, 1536}};
  std::vector<Tensor> weights;
  int64_t bytes = 0;
  for (int64_t l = 0; l < layers; ++l) {
    for (const Shape& sh : layer) {
      weights.push_back(RandomWeight(DType::kQ4_1, sh.m, sh.k));
      bytes += weights.back().nbytes();
    }
  }
  if (layers == 30) {
    weights.push_back(RandomWeight(DType::kQ8_0, 49152, 576));
    bytes += weights.back().nbytes();
  }
  Tensor x = MustHost(DType::kF32, {1, 1536});
  FillRandom(x.data_as<float>(), 1536, 7);
  Tensor y = MustHost(DType::kF32, {1, 49152});
  auto step = [&] {
    for (const Tensor& w : weights) {
      backend.MatMul(Tensor(x.data(), DType::kF32, {1, w.dim(1)}), w, nullptr,
                     Tensor(y.data(), DType::kF32, {1, w.dim(0)}));
    }
  };
  step();
  for (auto _ : state) step();
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeStepMatMuls)
    ->Arg(30)  // the whole model: weights come from memory
    ->Arg(3)   // 3 layers (7 MB, cache-resident): the same kernels without memory stalls
    ->ArgName("layers")
    ->Apply(Common)
    ->Unit(benchmark::kMicrosecond);

// Baseline for the prefill path: cblas_sgemm on f32 weights that were dequantized beforehand,
// the weight rows split in one contiguous half per thread (our pool, OpenBLAS single-threaded).
void BM_SgemmBaseline(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1), k = state.range(2);
  SharedBackend();  // sets OpenBLAS to one thread
  static ThreadPool pool(kThreads);
  Tensor w = MustHost(DType::kF32, {m, k});
  FillRandom(w.data_as<float>(), m * k, 3);
  Tensor x = MustHost(DType::kF32, {n, k});
  FillRandom(x.data_as<float>(), n * k, 7);
  Tensor y = MustHost(DType::kF32, {n, m});
  const int parts = pool.size();
  for (auto _ : state) {
    pool.ParallelFor(parts, 1, [&](int, int64_t b, int64_t) {
      const int64_t j0 = m * b / parts, j1 = m * (b + 1) / parts;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
                  static_cast<int>(j1 - j0), static_cast<int>(k), 1.0f, x.data_as<float>(),
                  static_cast<int>(k), w.data_as<float>() + j0 * k, static_cast<int>(k), 0.0f,
                  y.data_as<float>() + j0, static_cast<int>(m));
    });
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * n * m * k * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SgemmBaseline)
    ->Args({512, 1536, 576})
    ->Args({512, 576, 1536})
    ->ArgNames({"n", "m", "k"})
    ->Apply(Common)
    ->Unit(benchmark::kMicrosecond);

// A paged KV pool (allocated by the backend, as the engine does) holding one sequence of
// `context` tokens in each of `layers` layers, 3 KV heads, in full pages whose ids are shuffled
// over the whole pool (the engine's pages of one row are scattered among other rows' pages).
struct AttnSetup {
  static constexpr int kHeads = 9, kKvHeads = 3, kHeadDim = 64, kPage = 16;
  Tensor k, v, pos;
  std::vector<int32_t> indptr, indices, lens;
  int64_t pages = 0;

  AttnSetup(int64_t context, int64_t layers) {
    const int64_t pages_per_row = (context + kPage - 1) / kPage;
    pages = pages_per_row * kKvHeads * layers;
    k = SharedBackend().Allocate(DType::kF32, {pages, kPage, kHeadDim}).value();
    v = SharedBackend().Allocate(DType::kF32, {pages, kPage, kHeadDim}).value();
    pos = SharedBackend().Allocate(DType::kI32, {pages, kPage}).value();
    FillRandom(k.data_as<float>(), k.numel(), 11);
    FillRandom(v.data_as<float>(), v.numel(), 12);
    std::vector<int32_t> ids(static_cast<size_t>(pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
    indptr.push_back(0);
    for (int64_t row = 0; row < kKvHeads * layers; ++row) {
      for (int64_t p = 0; p < pages_per_row; ++p) {
        const int32_t id = ids[row * pages_per_row + p];
        const int64_t len = std::min<int64_t>(kPage, context - p * kPage);
        for (int64_t j = 0; j < len; ++j) {
          pos.data_as<int32_t>()[id * kPage + j] = static_cast<int32_t>(p * kPage + j);
        }
        indices.push_back(id);
        lens.push_back(static_cast<int32_t>(len));
      }
      indptr.push_back(static_cast<int32_t>(indices.size()));
    }
  }
  KvPoolView pool() {
    return {k.data(), v.data(), pos.data_as<int32_t>(), DType::kF32, pages, kPage, kHeadDim};
  }
  // The page table of one layer: its KV heads' rows.
  PageTableView table(int64_t layer) const {
    return {indptr.data() + layer * kKvHeads, indices.data(), lens.data(), kKvHeads};
  }
};

AttentionArgs MakeArgs(AttnSetup& s, int64_t n, int64_t first_pos, Tensor& q, Tensor& out,
                       Tensor& positions, Tensor& row_base) {
  q = MustHost(DType::kF32, {n, AttnSetup::kHeads, AttnSetup::kHeadDim});
  out = MustHost(DType::kF32, {n, AttnSetup::kHeads, AttnSetup::kHeadDim});
  FillRandom(q.data_as<float>(), q.numel(), 13);
  positions = MustHost(DType::kI32, {n});
  row_base = MustHost(DType::kI32, {n});
  for (int64_t i = 0; i < n; ++i)
    positions.data_as<int32_t>()[i] = static_cast<int32_t>(first_pos + i);
  AttentionArgs a;
  a.q = q;
  a.out = out;
  a.positions = positions;
  a.row_base = row_base;
  a.table = s.table(0);
  a.pool = s.pool();
  a.n_heads = AttnSetup::kHeads;
  a.n_kv_heads = AttnSetup::kKvHeads;
  a.scale = 0.125f;
  a.causal = true;
  return a;
}

// Args: context length, layers. One decode token attending over every page of a layer. With
// 1 layer the same KV is read each time (it stays in L3: kernel speed); with 30 layers each
// iteration takes the next layer, as decode does, so KV comes from memory.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t context = state.range(0), layers = state.range(1);
  AttnSetup s(context, layers);
  Tensor q, out, positions, row_base;
  AttentionArgs args = MakeArgs(s, 1, context, q, out, positions, row_base);
  Backend& backend = SharedBackend();
  backend.Attention(args);
  int64_t layer = 0;
  for (auto _ : state) {
    args.table = s.table(layer);
    layer = (layer + 1) % layers;
    backend.Attention(args);
    benchmark::ClobberMemory();
  }
  const double kv_bytes = 2.0 * context * AttnSetup::kKvHeads * AttnSetup::kHeadDim * 4;
  state.counters["GB/s"] = benchmark::Counter(
      kv_bytes * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionDecode)
    ->Args({2048, 1})
    ->Args({8192, 1})
    ->Args({2048, 30})
    ->Args({8192, 30})
    ->ArgNames({"ctx", "layers"})
    ->Apply(Common)
    ->Unit(benchmark::kMicrosecond);

// Args: chunk, context. The last `chunk` tokens of the context attend causally.
void BM_AttentionPrefill(benchmark::State& state) {
  const int64_t chunk = state.range(0), context = state.range(1);
  AttnSetup s(context, 1);
  Tensor q, out, positions, row_base;
  AttentionArgs args = MakeArgs(s, chunk, context - chunk, q, out, positions, row_base);
  Backend& backend = SharedBackend();
  backend.Attention(args);
  for (auto _ : state) {
    backend.Attention(args);
    benchmark::ClobberMemory();
  }
  // Multiply-adds actually needed under the causal mask: QK^T and PV, per visible key.
  double visible = 0;
  for (int64_t i = 0; i < chunk; ++i) visible += static_cast<double>(context - chunk + i + 1);
  const double flops = 2.0 * 2.0 * visible * AttnSetup::kHeads * AttnSetup::kHeadDim;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionPrefill)->Args({512, 2048})->Apply(Common)->Unit(benchmark::kMillisecond);

// Memory read bandwidth for reference: sums a 256 MiB buffer (far larger than the caches), the
// threads taking contiguous halves. Decode GEMV on weights that do not fit in cache, and decode
// attention over long contexts, are bounded by this figure.
void BM_MemoryRead(benchmark::State& state) {
  static ThreadPool pool(kThreads);
  const int64_t n = int64_t{64} << 20;  // floats
  Tensor buf = SharedBackend().Allocate(DType::kF32, {n}).value();
  FillRandom(buf.data_as<float>(), n, 1);
  std::vector<float> sums(static_cast<size_t>(pool.size()));
  struct Job {
    const float* p;
    int64_t n;
    int parts;
    float* sums;
  } job{buf.data_as<const float>(), n, pool.size(), sums.data()};
  for (auto _ : state) {
    pool.ParallelFor(job.parts, 1, [j = &job](int t, int64_t b, int64_t) {
      const int64_t i0 = j->n * b / j->parts, i1 = j->n * (b + 1) / j->parts;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = i0; i + 32 <= i1; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(j->p + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(j->p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(j->p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(j->p + i + 24));
      }
      float tmp[8];
      _mm256_storeu_ps(tmp, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      j->sums[t] = tmp[0] + tmp[7];
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] = benchmark::Counter(
      4.0 * n * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MemoryRead)->Apply(Common)->Unit(benchmark::kMillisecond);

// Round trip of one ParallelFor in which every thread takes part: each range announces itself
// and waits (at most 1 ms) until all ranges have started, so the time is the latency of waking
// the workers and collecting them, which a parallel op pays at least once.
void BM_ThreadPoolRoundTrip(benchmark::State& state) {
  static ThreadPool pool(kThreads);
  struct Shared {
    std::atomic<int> started{0};
    int size = 0;
    int64_t timeouts = 0;
  } shared;
  shared.size = pool.size();
  for (auto _ : state) {
    shared.started.store(0);
    pool.ParallelFor(pool.size(), 1, [s = &shared](int, int64_t, int64_t) {
      s->started.fetch_add(1);
      const auto t0 = std::chrono::steady_clock::now();
      while (s->started.load() < s->size) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(1)) {
          ++s->timeouts;  // only the range that waited counts; races are harmless here
          break;
        }
      }
    });
  }
  state.counters["timeouts"] = static_cast<double>(shared.timeouts);
}
BENCHMARK(BM_ThreadPoolRoundTrip)->Apply(Common);

}  // namespace
}  // namespace icecache

BENCHMARK_MAIN();
