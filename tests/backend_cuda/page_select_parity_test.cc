// The device-side selection kernels (PageBounds, SelectPages, MapPages) against the CPU
// reference ops on the same bf16 data, with min/max bounds (quest) and Q8_0 mean keys (icecache),
// written to summary rows that are a permutation of the page ids. Keys and queries are multiples
// of 1/4 in [-2, 2] and mean keys average 1, 2, 4, 8 or 16 keys, so every bound and mean is
// exact in f32 (and bf16), and both backends quantize the means to the same bytes and compute the
// same spreads. Min/max scores are exact whatever the summation order; against Q8_0 means,
// queries have one nonzero dimension per head, so q.c is a single product and |q|^2 exact. Scores
// tie often and the tie-breaking (lower entry first) is checked too. Mean-key scores are also
// compared bit for bit on random, inexact data (the kernel keeps the CPU's order of operations).
// MapPages is compared in all its modes: normal, prefetch, in two stages, and deferring the pages
// that are not current (fetch behind) followed by the copies behind.
// Then, through the engine on the GPU, quest and icecache selecting on the device against selecting
// on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "cuda_test_util.h"
#include "icecache/engine.h"
#include "kv/key_mean.h"

namespace icecache {
namespace {

using testing::I32ToDevice;
using testing::I32ToHost;

constexpr int kPage = 16, kDim = 128, kHostPages = 4096;

float Quarter(std::mt19937& rng) {
  return static_cast<float>(static_cast<int>(rng() % 17) - 8) / 4;
}

// A pool of bf16 pages in `backend`'s memory and its host copy.
struct Pool {
  std::vector<uint16_t> k, v;
  std::vector<int32_t> pos;
  Tensor dk, dv, dpos;
  KvPoolView View(bool device, int64_t pages) {
    if (device) {
      return {dk.data(), dv.data(), dpos.data_as<int32_t>(), DType::kBF16, pages, kPage, kDim};
    }
    return {k.data(), v.data(), pos.data(), DType::kBF16, pages, kPage, kDim};
  }
};

Pool MakePool(Backend& gpu, int64_t pages, std::mt19937* rng, bool fill) {
  Pool p;
  const int64_t n = pages * kPage * kDim;
  p.k.resize(n);
  p.v.resize(n);
  p.pos.resize(pages * kPage);
  if (fill) {
    for (int64_t i = 0; i < n; ++i) {
      p.k[i] = F32ToBf16(Quarter(*rng));
      p.v[i] = F32ToBf16(Quarter(*rng));
    }
    std::iota(p.pos.begin(), p.pos.end(), 0);
  }
  p.dk = gpu.Allocate(DType::kBF16, {n}).value();
  p.dv = gpu.Allocate(DType::kBF16, {n}).value();
  p.dpos = gpu.Allocate(DType::kI32, {pages * kPage}).value();
  EXPECT_TRUE(gpu.Copy(Tensor(p.k.data(), DType::kBF16, {n}), p.dk).ok());
  EXPECT_TRUE(gpu.Copy(Tensor(p.v.data(), DType::kBF16, {n}), p.dv).ok());
  EXPECT_TRUE(gpu.Copy(Tensor(p.pos.data(), DType::kI32, {pages * kPage}), p.dpos).ok());
  return p;
}

// Summary rows: a permutation of the page ids, so that the kernels must read rows, not ids.
std::vector<int32_t> RowsOf(const std::vector<int32_t>& ids) {
  std::vector<int32_t> rows(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) rows[i] = ids[i] < 0 ? -1 : (ids[i] * 7 + 3) % kHostPages;
  return rows;
}

// Page summaries for every summary row, on both backends (`host` backs `cpu`), and with mean
// keys their spreads (`host_spread` backs `cpu_spread`).
struct Summaries {
  std::vector<uint8_t> host;
  std::vector<float> host_spread;
  Tensor cpu, gpu, cpu_spread, gpu_spread;
};

// Summarizes pages `ids` of `pool` on both backends and checks that the bytes agree.
Summaries Summarize(Backend& cpu, Backend& gpu, Pool& pool, const std::vector<int32_t>& ids,
                    const std::vector<int32_t>& lens, int bound_rows) {
  const DType t = bound_rows == 2 ? DType::kBF16 : kMeanKeyDType;
  Summaries s;
  s.host.assign(static_cast<size_t>(kHostPages * RowBytes(t, int64_t{bound_rows} * kDim)), 0);
  s.cpu = Tensor(s.host.data(), t, {kHostPages, bound_rows, kDim});
  s.gpu = gpu.Allocate(t, {kHostPages, bound_rows, kDim}).value();
  if (bound_rows == 1) {
    s.host_spread.assign(kHostPages, 0.0f);
    s.cpu_spread = Tensor(s.host_spread.data(), DType::kF32, {kHostPages});
    s.gpu_spread = gpu.Allocate(DType::kF32, {kHostPages}).value();
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  const std::vector<int32_t> rows = RowsOf(ids);
  PageBoundsArgs c{pool.View(false, kHostPages), testing::I32Tensor(ids, {n}),
                   testing::I32Tensor(lens, {n}), testing::I32Tensor(rows, {n}), s.cpu};
  c.spread = s.cpu_spread;
  cpu.PageBounds(c);
  PageBoundsArgs g{pool.View(true, kHostPages), I32ToDevice(gpu, ids, {n}),
                   I32ToDevice(gpu, lens, {n}), I32ToDevice(gpu, rows, {n}), s.gpu};
  g.spread = s.gpu_spread;
  gpu.PageBounds(g);
  std::vector<uint8_t> back(s.host.size());
  EXPECT_TRUE(gpu.Copy(s.gpu, Tensor(back.data(), t, {kHostPages, bound_rows, kDim})).ok());
  gpu.Synchronize();
  EXPECT_EQ(back, s.host);
  if (bound_rows == 1) {  // KeySpread's arithmetic, operation for operation
    std::vector<float> spread(kHostPages);
    EXPECT_TRUE(gpu.Copy(s.gpu_spread, Tensor(spread.data(), DType::kF32, {kHostPages})).ok());
    gpu.Synchronize();
    EXPECT_EQ(0, std::memcmp(spread.data(), s.host_spread.data(), spread.size() * 4));
  }
  return s;
}

// Query heads: multiples of 1/4 (min/max bounds), or one dimension of +-1/2 or +-1 per head
// (mean keys).
std::vector<uint16_t> Queries(std::mt19937& rng, int heads, int bound_rows) {
  std::vector<uint16_t> q(static_cast<size_t>(heads) * kDim, F32ToBf16(0.0f));
  for (int h = 0; h < heads; ++h) {
    if (bound_rows == 2) {
      for (int j = 0; j < kDim; ++j) q[h * kDim + j] = F32ToBf16(Quarter(rng));
    } else {
      const float v[4] = {-1.0f, -0.5f, 0.5f, 1.0f};
      q[h * kDim + rng() % kDim] = F32ToBf16(v[rng() % 4]);
    }
  }
  return q;
}

std::vector<uint16_t> ToHostU16(Backend& b, const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  EXPECT_TRUE(b.Copy(t, Tensor(out.data(), DType::kBF16, {t.numel()})).ok());
  b.Synchronize();
  return out;
}

// One SelectPages call over the same lists, limits, query and page summaries, on the CPU backend
// (`cpu`, outputs in the host vectors) and on the GPU (`gpu`, outputs in device memory).
struct SelectOnBoth {
  std::vector<float> c_scores;
  std::vector<int32_t> list_rows, c_ids, c_lens, c_count;
  PageSelectArgs cpu, gpu;
};

void SelectPagesOnBoth(Backend& cpu, Backend& gpu, std::vector<uint16_t>& q,
                       std::vector<int32_t>& list_ids, std::vector<int32_t>& list_lens,
                       std::vector<int32_t>& limits, const Summaries& sums, int rows, int group,
                       int stride, int out_stride, SelectOnBoth* out) {
  out->c_scores.assign(rows * stride, 0.0f);
  out->c_ids.assign(rows * out_stride, 0);
  out->c_lens.assign(rows * out_stride, 0);
  out->c_count.assign(rows, 0);
  out->list_rows = RowsOf(list_ids);
  PageSelectArgs& s = out->cpu;
  s.q = Tensor(q.data(), DType::kBF16, {static_cast<int64_t>(q.size())});
  s.list_ids = Tensor(list_ids.data(), DType::kI32, {rows, stride});
  s.list_lens = Tensor(list_lens.data(), DType::kI32, {rows, stride});
  s.list_rows = Tensor(out->list_rows.data(), DType::kI32, {rows, stride});
  s.limits = Tensor(limits.data(), DType::kI32, {rows, 5});
  s.bounds = sums.cpu;
  s.spread = sums.cpu_spread;
  s.scores = Tensor(out->c_scores.data(), DType::kF32, {rows, stride});
  s.out_ids = Tensor(out->c_ids.data(), DType::kI32, {rows, out_stride});
  s.out_lens = Tensor(out->c_lens.data(), DType::kI32, {rows, out_stride});
  s.out_count = Tensor(out->c_count.data(), DType::kI32, {rows});
  s.n_heads = rows * group;
  cpu.SelectPages(s);
  PageSelectArgs& g = out->gpu;
  g = s;
  g.q = gpu.Allocate(DType::kBF16, {static_cast<int64_t>(q.size())}).value();
  ASSERT_TRUE(gpu.Copy(s.q, g.q).ok());
  g.list_ids = I32ToDevice(gpu, list_ids, {rows, stride});
  g.list_lens = I32ToDevice(gpu, list_lens, {rows, stride});
  g.list_rows = I32ToDevice(gpu, out->list_rows, {rows, stride});
  g.limits = I32ToDevice(gpu, limits, {rows, 5});
  g.bounds = sums.gpu;
  g.spread = sums.gpu_spread;
  g.scores = gpu.Allocate(DType::kF32, {rows, stride}).value();
  g.out_ids = gpu.Allocate(DType::kI32, {rows, out_stride}).value();
  g.out_lens = gpu.Allocate(DType::kI32, {rows, out_stride}).value();
  g.out_count = gpu.Allocate(DType::kI32, {rows}).value();
  gpu.SelectPages(g);
}

// `bound_rows`: 2 for min/max bounds, 1 for mean keys.
void CheckKernels(int bound_rows) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  auto cpu = MakeCpuBackend({.threads = 1});
  std::mt19937 rng(11);
  Pool host = MakePool(*gpu, kHostPages, &rng, true);

  // Summaries of every page, with random token counts (powers of two for means).
  std::vector<int32_t> ids(kHostPages), lens(kHostPages);
  std::iota(ids.begin(), ids.end(), 0);
  for (int32_t& l : lens) {
    l = bound_rows == 2 ? 1 + static_cast<int>(rng() % kPage) : 1 << (rng() % 5);
  }
  Summaries sums = Summarize(*cpu, *gpu, host, ids, lens, bound_rows);

  // Rows of 8 KV heads, group 4; lists are random distinct pages (full, one partial each).
  const int rows = 8, group = 4, stride = 512, out_stride = 160, cap = 200, groups = 3;
  // The working-set slots: host vectors for the CPU, d* tensors for the GPU.
  Pool slots = MakePool(*gpu, int64_t{groups} * cap, &rng, false);
  std::vector<int32_t> resident(kHostPages, -1), slot_page(groups * cap, -1),
      slot_len(groups * cap, 0);
  Tensor g_resident = I32ToDevice(*gpu, resident, {kHostPages});
  Tensor g_slot_page = I32ToDevice(*gpu, slot_page, {groups * cap});
  Tensor g_slot_len = I32ToDevice(*gpu, slot_len, {groups * cap});
  std::vector<int32_t> slot_used(groups * cap, -1);
  Tensor g_slot_used = I32ToDevice(*gpu, slot_used, {groups * cap});
  alignas(8) int32_t c_counters[10] = {};
  Tensor g_counters = I32ToDevice(*gpu, std::vector<int32_t>(10, 0), {10});
  const int64_t table_n = rows + 1 + 2 * rows * out_stride;
  std::vector<int32_t> c_table(table_n), c_fetch(rows * (1 + 2 * cap));
  Tensor g_table = gpu->Allocate(DType::kI32, {table_n}).value();
  Tensor g_fetch = gpu->Allocate(DType::kI32, {rows * (1 + 2 * cap)}).value();

  int64_t lookups = 0;
  for (int step = 0; step < 12; ++step) {
    SCOPED_TRACE(step);
    std::vector<int32_t> list_ids(rows * stride, -1), list_lens(rows * stride, 0), limits;
    for (int r = 0; r < rows; ++r) {
      // Lists draw from a slice of the pool so that later steps see earlier pages again.
      const int count = 40 + static_cast<int>(rng() % (stride - 40));
      std::vector<int32_t> pick(kHostPages / rows);
      std::iota(pick.begin(), pick.end(), r * (kHostPages / rows));
      std::shuffle(pick.begin(), pick.end(), rng);
      for (int e = 0; e < count; ++e) {
        list_ids[r * stride + e] = pick[e];
        list_lens[r * stride + e] = e == count / 2 ? 5 : kPage;  // one partial candidate
      }
      const int sink = 1 + static_cast<int>(rng() % 2), window = 2 + static_cast<int>(rng() % 4);
      const int pages_left = r == 0 ? count : 1 + static_cast<int>(rng() % 120);
      const int tokens_left = r == 1 ? 37 : pages_left * kPage;
      if (r == 2) {
        limits.insert(limits.end(), {std::min(count, out_stride), 0, 0, 0, 0});  // covered
      } else {
        limits.insert(limits.end(), {count, sink, count - window, tokens_left,
                                     std::min(pages_left, out_stride - sink - window)});
      }
    }
    std::vector<uint16_t> q = Queries(rng, rows * group, bound_rows);

    SelectOnBoth both;
    ASSERT_NO_FATAL_FAILURE(SelectPagesOnBoth(*cpu, *gpu, q, list_ids, list_lens, limits, sums,
                                              rows, group, stride, out_stride, &both));
    const PageSelectArgs &s = both.cpu, &g = both.gpu;
    const std::vector<int32_t>& c_count = both.c_count;
    const std::vector<int32_t>& c_out_ids = both.c_ids;
    const std::vector<int32_t>& c_out_lens = both.c_lens;
    EXPECT_EQ(I32ToHost(*gpu, g.out_count), c_count);
    const std::vector<int32_t> g_ids = I32ToHost(*gpu, g.out_ids);
    const std::vector<int32_t> g_lens = I32ToHost(*gpu, g.out_lens);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < c_count[r]; ++i) {
        ASSERT_EQ(g_ids[r * out_stride + i], c_out_ids[r * out_stride + i]) << r << "," << i;
        ASSERT_EQ(g_lens[r * out_stride + i], c_out_lens[r * out_stride + i]);
      }
      lookups += std::min(c_count[r], cap);
    }

    // Map both into working-set groups 1..; the GPU reads the device copy of the pool.
    const int rows_mapped = 2;  // groups 1 and 2
    PageMapArgs m;
    m.sel_ids = s.out_ids.Slice(0, rows_mapped);
    m.sel_lens = s.out_lens.Slice(0, rows_mapped);
    m.sel_count = s.out_count.Slice(0, rows_mapped);
    m.host = host.View(false, kHostPages);
    m.slots = slots.View(false, int64_t{groups} * cap);
    m.first_group = 1;
    m.capacity = cap;
    m.resident = Tensor(resident.data(), DType::kI32, {kHostPages});
    m.slot_page = Tensor(slot_page.data(), DType::kI32, {groups * cap});
    m.slot_len = Tensor(slot_len.data(), DType::kI32, {groups * cap});
    m.slot_used = Tensor(slot_used.data(), DType::kI32, {groups * cap});
    m.clock = step + 1;
    m.table = Tensor(c_table.data(), DType::kI32, {table_n});
    m.fetch = Tensor(c_fetch.data(), DType::kI32, {static_cast<int64_t>(c_fetch.size())});
    m.counters = Tensor(c_counters, DType::kI32, {10});
    // Every fourth step fetches behind: rows 0 and 1's sink and window entries are mapped, the
    // others not current in a slot deferred.
    const bool behind = step % 4 == 2;
    if (behind) m.defer_limits = testing::I32Tensor(limits, {rows, 5}).Slice(0, rows_mapped);
    m.defer_after = step % 8 == 6 ? 2 : 0;  // every other such step maps 2 more entries now
    PageMapArgs gm = m;
    if (behind) gm.defer_limits = I32ToDevice(*gpu, limits, {rows, 5}).Slice(0, rows_mapped);
    gm.sel_ids = g.out_ids.Slice(0, rows_mapped);
    gm.sel_lens = g.out_lens.Slice(0, rows_mapped);
    gm.sel_count = g.out_count.Slice(0, rows_mapped);
    gm.host = host.View(true, kHostPages);
    gm.slots = slots.View(true, int64_t{groups} * cap);
    gm.resident = g_resident;
    gm.slot_page = g_slot_page;
    gm.slot_len = g_slot_len;
    gm.slot_used = g_slot_used;
    gm.table = g_table;
    gm.fetch = g_fetch;
    gm.counters = g_counters;
    // Some maps run on the device in two calls (MapStage::kPlace, then kCopy), as the early
    // prefetch does; they must end where the CPU's single call ends.
    auto gpu_map = [&](PageMapArgs a, bool split) {
      if (split) {
        a.stage = MapStage::kPlace;
        gpu->MapPages(a);
        a.stage = MapStage::kCopy;
      }
      gpu->MapPages(a);
    };
    if (step % 2 == 1) {
      // Prefetch mode first (the same selection; row 0's first page pending): the same slots,
      // residency and counters on both, and the map that follows finds them resident.
      std::vector<int32_t> pending = {c_out_ids[0], -1};
      PageMapArgs pm = m;
      pm.pending = Tensor(pending.data(), DType::kI32, {rows_mapped});
      pm.prefetch_pages = step % 4 == 3 ? 3 : 0;  // every other prefetch: each row's first 3
      cpu->MapPages(pm);
      PageMapArgs gpm = gm;
      gpm.pending = I32ToDevice(*gpu, pending, {rows_mapped});
      gpm.prefetch_pages = pm.prefetch_pages;
      gpu_map(gpm, step % 4 == 1);
      EXPECT_EQ(I32ToHost(*gpu, g_resident), resident);
      EXPECT_EQ(I32ToHost(*gpu, g_slot_page), slot_page);
      EXPECT_EQ(I32ToHost(*gpu, g_slot_len), slot_len);
      EXPECT_EQ(I32ToHost(*gpu, g_counters), std::vector<int32_t>(c_counters, c_counters + 10));
    }
    cpu->MapPages(m);
    gpu_map(gm, step % 3 == 2);
    const std::vector<int32_t> gt = I32ToHost(*gpu, g_table);
    const int total = c_table[rows_mapped];
    ASSERT_EQ(gt[rows_mapped], total);
    for (int i = 0; i <= rows_mapped; ++i) EXPECT_EQ(gt[i], c_table[i]);
    for (int i = 0; i < total; ++i) {
      EXPECT_EQ(gt[rows_mapped + 1 + i], c_table[rows_mapped + 1 + i]);
    }
    EXPECT_EQ(I32ToHost(*gpu, g_resident), resident);
    EXPECT_EQ(I32ToHost(*gpu, g_slot_page), slot_page);
    EXPECT_EQ(I32ToHost(*gpu, g_slot_used), slot_used);
    EXPECT_EQ(I32ToHost(*gpu, g_counters), std::vector<int32_t>(c_counters, c_counters + 10));
    const std::vector<int32_t> c_lens(
        c_table.begin() + rows_mapped + 1 + rows_mapped * out_stride,
        c_table.begin() + rows_mapped + 1 + rows_mapped * out_stride + total);
    const std::vector<int32_t> g_lens_listed(
        gt.begin() + rows_mapped + 1 + rows_mapped * out_stride,
        gt.begin() + rows_mapped + 1 + rows_mapped * out_stride + total);
    EXPECT_EQ(g_lens_listed, c_lens);
    // The device slots hold what the CPU slots hold in the rows listed, for every mapped slot
    // (a slot's rows past its count are unspecified: the CPU copies only the listed ones).
    const std::vector<uint16_t> gk = ToHostU16(*gpu, slots.dk);
    for (int i = 0; i < total; ++i) {
      if (c_lens[i] == 0) continue;  // a deferred entry: no slot of its own
      const int64_t s0 = int64_t{c_table[rows_mapped + 1 + i]} * kPage * kDim;
      ASSERT_EQ(0, std::memcmp(&gk[s0], &slots.k[s0], int64_t{c_lens[i]} * kDim * 2))
          << "slot entry " << i;
    }
    if (behind) {
      const int64_t* cc = reinterpret_cast<const int64_t*>(c_counters);
      EXPECT_GT(cc[4], 0) << "pages were deferred";
      // The copies behind: a prefetch-mode map of the same selection with no pending page.
      const std::vector<int32_t> none(rows_mapped, -1);
      PageMapArgs cb = m, gb = gm;
      cb.defer_limits = gb.defer_limits = Tensor();
      cb.pending = testing::I32Tensor(none, {rows_mapped});
      gb.pending = I32ToDevice(*gpu, none, {rows_mapped});
      cpu->MapPages(cb);
      gpu->MapPages(gb);
      EXPECT_EQ(I32ToHost(*gpu, g_resident), resident);
      EXPECT_EQ(I32ToHost(*gpu, g_slot_page), slot_page);
      EXPECT_EQ(I32ToHost(*gpu, g_slot_len), slot_len);
      EXPECT_EQ(I32ToHost(*gpu, g_counters), std::vector<int32_t>(c_counters, c_counters + 10));
      const std::vector<uint16_t> gk2 = ToHostU16(*gpu, slots.dk);
      for (int64_t j = 0; j < groups * cap; ++j) {  // the rows each occupied slot holds
        if (slot_page[j] < 0 || slot_len[j] <= 0) continue;
        const int64_t s0 = j * kPage * kDim;
        ASSERT_EQ(0, std::memcmp(&gk2[s0], &slots.k[s0], int64_t{slot_len[j]} * kDim * 2))
            << "slot " << j;
      }
    }
  }
  // Summarizing pages with a residency map marks their resident copies stale, on both.
  std::vector<int32_t> again(ids.begin(), ids.begin() + kHostPages / 2);
  const int64_t half = kHostPages / 2;
  const std::vector<int32_t> again_rows = RowsOf(again);
  PageBoundsArgs c_again{
      host.View(false, kHostPages),
      testing::I32Tensor(again, {half}),
      testing::I32Tensor(std::vector<int32_t>(lens.begin(), lens.begin() + half), {half}),
      testing::I32Tensor(again_rows, {half}),
      sums.cpu,
      Tensor(resident.data(), DType::kI32, {kHostPages}),
      Tensor(slot_page.data(), DType::kI32, {groups * cap}),
      Tensor(slot_len.data(), DType::kI32, {groups * cap}),
      sums.cpu_spread};
  cpu->PageBounds(c_again);
  PageBoundsArgs g_again{
      host.View(true, kHostPages),
      I32ToDevice(*gpu, again, {half}),
      I32ToDevice(*gpu, std::vector<int32_t>(lens.begin(), lens.begin() + half), {half}),
      I32ToDevice(*gpu, again_rows, {half}),
      sums.gpu,
      g_resident,
      g_slot_page,
      g_slot_len,
      sums.gpu_spread};
  gpu->PageBounds(g_again);
  EXPECT_EQ(I32ToHost(*gpu, g_slot_len), slot_len);
  EXPECT_GT(std::count(slot_len.begin(), slot_len.end(), -1), 0);
  const int64_t* c = reinterpret_cast<const int64_t*>(c_counters);
  std::printf("[ page select, %d bound rows ] %lld hits, %lld fetched, %lld tokens over 12 steps\n",
              bound_rows, static_cast<long long>(c[0]), static_cast<long long>(c[1]),
              static_cast<long long>(c[2]));
  EXPECT_GT(c[0], 0);
  EXPECT_GT(c[1], 0);
  EXPECT_GT(c[2], c[0] + c[1]);
}

TEST(CudaPageSelect, KernelsMatchTheCpuReferenceWithMinMaxBounds) { CheckKernels(2); }
TEST(CudaPageSelect, KernelsMatchTheCpuReferenceWithMeanKeys) { CheckKernels(1); }

// A policy on the GPU selecting on the device against selecting on the host (same engine
// shape); icecache and lychee on the host rank by centroid as the device does.
void CompareDeviceAndHost(const std::string& policy) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  gpu.reset();
  EngineOptions o{
      .device = "cuda", .context_size = 2048, .prefill_chunk = 256, .synthetic = "tiny"};
  o.kv.policy = policy;
  o.kv.budget = 256;
  o.kv_offload = "on";
  o.kv_timing = true;
  if (policy == "lychee") o.kv.rank = "centroid";  // lychee's "auto" is its host search
  EngineOptions h = o;
  h.kv_select = "host";
  h.kv.rank = "centroid";
  o.kv_select = "device";
  auto dev = Engine::Create(o);
  auto host = Engine::Create(h);
  ASSERT_TRUE(dev.ok() && host.ok());
  ScoreRequest r;
  const int vocab = (*dev)->info().vocab;
  for (int i = 0; i < 1500; ++i) r.context.push_back((i * 53 + 11) % vocab);
  for (int i = 0; i < 32; ++i) r.continuation.push_back((i * 97 + 5) % vocab);
  r.full_logprobs = true;
  auto a = (*dev)->Score(r);
  auto b = (*host)->Score(r);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().message();
  EXPECT_TRUE(a->kv.device_select);
  EXPECT_FALSE(b->kv.device_select);
  int same = 0;
  double worst = 0;
  for (size_t s = 0; s < a->logprobs.size(); ++s) {
    same += a->top1[s] == b->top1[s];
    for (size_t v = 0; v < a->logprobs[s].size(); ++v) {
      worst = std::max(worst, std::abs(static_cast<double>(a->logprobs[s][v]) - b->logprobs[s][v]));
    }
  }
  std::printf(
      "[ tiny ] %s budget 256: device vs host selection: top-1 equal at %d of %zu steps, "
      "max |diff| %.3g; device: %.1f tokens (host %.1f), hit rate %.2f, select %.3f ms, fetch "
      "%.3f ms, attend %.3f ms per step\n",
      policy.c_str(), same, a->logprobs.size(), worst, a->kv.tokens_attended, b->kv.tokens_attended,
      a->kv.hit_rate, a->kv.select_seconds * 1e3, a->kv.fetch_seconds * 1e3,
      a->kv.attend_seconds * 1e3);
  EXPECT_EQ(same, static_cast<int>(a->logprobs.size()));
  EXPECT_LT(worst, 1e-3);
  EXPECT_DOUBLE_EQ(a->kv.tokens_attended, b->kv.tokens_attended);
  EXPECT_GT(a->kv.select_seconds, 0.0);
  EXPECT_GT(a->kv.hit_rate, 0.0);
}

// Rows of more candidates than RankKernel keeps in registers (8192) take its other path, and a
// row just under that its register path at full occupancy: both rank as the CPU does.
TEST(CudaPageSelect, LongRowsRankAsTheCpu) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  auto cpu = MakeCpuBackend({.threads = 1});
  std::mt19937 rng(5);
  Pool host = MakePool(*gpu, kHostPages, &rng, true);
  std::vector<int32_t> ids(kHostPages), lens(kHostPages, kPage);
  std::iota(ids.begin(), ids.end(), 0);
  Summaries sums = Summarize(*cpu, *gpu, host, ids, lens, 1);
  const int rows = 2, group = 4, stride = 12000, out_stride = 300;
  const int counts[rows] = {11000, 8190};
  std::vector<int32_t> list_ids(rows * stride, -1), list_lens(rows * stride, 0), limits;
  for (int r = 0; r < rows; ++r) {
    for (int e = 0; e < counts[r]; ++e) {
      list_ids[r * stride + e] = static_cast<int32_t>(rng() % kHostPages);  // repeats tie
      list_lens[r * stride + e] = kPage;
    }
    limits.insert(limits.end(), {counts[r], 1, counts[r] - 4, 250 * kPage, 250});
  }
  std::vector<uint16_t> q = Queries(rng, rows * group, 1);
  SelectOnBoth both;
  ASSERT_NO_FATAL_FAILURE(SelectPagesOnBoth(*cpu, *gpu, q, list_ids, list_lens, limits, sums, rows,
                                            group, stride, out_stride, &both));
  const PageSelectArgs& g = both.gpu;
  const std::vector<int32_t>& c_count = both.c_count;
  const std::vector<int32_t>& c_ids = both.c_ids;
  EXPECT_EQ(I32ToHost(*gpu, g.out_count), c_count);
  EXPECT_EQ(c_count[0], 1 + 250 + 4);
  const std::vector<int32_t> g_ids = I32ToHost(*gpu, g.out_ids);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < c_count[r]; ++i) {
      ASSERT_EQ(g_ids[r * out_stride + i], c_ids[r * out_stride + i]) << r << "," << i;
    }
  }
}

// Mean-key scores need no exact inputs: the score kernel repeats CentroidScore's operations in
// its order (and PageBounds KeyMean's and KeySpread's), so on keys and queries drawn from a
// normal distribution, with partly filled pages, the GPU's summaries, scores and selections equal
// the CPU reference's bit for bit, for groups of 4 (Llama-3.1-8B) and 3 (SmolLM2), rows long
// enough to take the counting rank (picks <= 512) and the bitonic one (more).
TEST(CudaPageSelect, MeanKeyScoresEqualTheCpuBitForBitOnRandomData) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  auto cpu = MakeCpuBackend({.threads = 1});
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  Pool host = MakePool(*gpu, kHostPages, &rng, true);
  for (uint16_t& k : host.k) k = F32ToBf16(normal(rng));
  ASSERT_TRUE(
      gpu->Copy(Tensor(host.k.data(), DType::kBF16, {static_cast<int64_t>(host.k.size())}), host.dk)
          .ok());
  std::vector<int32_t> ids(kHostPages), lens(kHostPages);
  std::iota(ids.begin(), ids.end(), 0);
  for (int32_t& l : lens) l = 1 + static_cast<int>(rng() % kPage);
  Summaries sums = Summarize(*cpu, *gpu, host, ids, lens, 1);  // checks the bytes agree
  for (const int group : {4, 3}) {
    for (const int pages_left : {200, 700}) {
      SCOPED_TRACE(::testing::Message() << "group " << group << ", pages_left " << pages_left);
      const int rows = 8, stride = 3000, out_stride = pages_left + 40;
      std::vector<int32_t> list_ids(rows * stride, -1), list_lens(rows * stride, 0), limits;
      for (int r = 0; r < rows; ++r) {
        const int count = stride - 7 * r;
        for (int e = 0; e < count; ++e) {
          list_ids[r * stride + e] = static_cast<int32_t>(rng() % kHostPages);
          list_lens[r * stride + e] = lens[list_ids[r * stride + e]];
        }
        limits.insert(limits.end(), {count, 2, count - 6, pages_left * kPage / 2, pages_left});
      }
      std::vector<uint16_t> q(static_cast<size_t>(rows) * group * kDim);
      for (uint16_t& x : q) x = F32ToBf16(normal(rng));
      SelectOnBoth both;
      ASSERT_NO_FATAL_FAILURE(SelectPagesOnBoth(*cpu, *gpu, q, list_ids, list_lens, limits, sums,
                                                rows, group, stride, out_stride, &both));
      std::vector<float> g_scores(both.c_scores.size());
      ASSERT_TRUE(
          gpu->Copy(both.gpu.scores, Tensor(g_scores.data(), DType::kF32, {rows, int64_t{stride}}))
              .ok());
      gpu->Synchronize();
      int compared = 0;
      for (int r = 0; r < rows; ++r) {
        for (int e = 2; e < limits[r * 5 + 2]; ++e, ++compared) {
          ASSERT_EQ(0, std::memcmp(&g_scores[r * stride + e], &both.c_scores[r * stride + e], 4))
              << "row " << r << ", entry " << e << ": " << g_scores[r * stride + e] << " against "
              << both.c_scores[r * stride + e];
        }
      }
      EXPECT_GT(compared, 20000);
      EXPECT_EQ(I32ToHost(*gpu, both.gpu.out_count), both.c_count);
      EXPECT_EQ(I32ToHost(*gpu, both.gpu.out_ids), both.c_ids);
      EXPECT_EQ(I32ToHost(*gpu, both.gpu.out_lens), both.c_lens);
    }
  }
}

// One sequence's device-side selection state for the batch test: lists, limits, outputs, a
// working set of its own and its residency map, all in device memory.
struct BatchEntry {
  int rows = 0, stride = 0;
  Tensor q, list_ids, list_lens, list_rows, limits, scores, out_ids, out_lens, out_count;
  Pool slots;
  Tensor resident, slot_page, slot_len, slot_used, table, fetch, counters, att_q, att_out;
  Tensor positions, row_base;
};

constexpr int kBatchOut = 48, kBatchCap = 64, kBatchGroup = 4;

BatchEntry MakeBatchEntry(Backend& gpu, int rows, int stride, std::mt19937* rng) {
  BatchEntry e;
  e.rows = rows;
  e.stride = stride;
  e.list_ids = gpu.Allocate(DType::kI32, {rows, stride}).value();
  e.list_lens = gpu.Allocate(DType::kI32, {rows, stride}).value();
  e.list_rows = gpu.Allocate(DType::kI32, {rows, stride}).value();
  e.limits = gpu.Allocate(DType::kI32, {rows, 5}).value();
  e.q = gpu.Allocate(DType::kBF16, {int64_t{rows} * kBatchGroup * kDim}).value();
  e.scores = gpu.Allocate(DType::kF32, {rows, stride}).value();
  e.out_ids = gpu.Allocate(DType::kI32, {rows, kBatchOut}).value();
  e.out_lens = gpu.Allocate(DType::kI32, {rows, kBatchOut}).value();
  e.out_count = gpu.Allocate(DType::kI32, {rows}).value();
  const int64_t slots = int64_t{rows} * kBatchCap;
  e.slots = MakePool(gpu, slots, rng, false);
  e.resident = I32ToDevice(gpu, std::vector<int32_t>(kHostPages, -1), {kHostPages});
  e.slot_page = I32ToDevice(gpu, std::vector<int32_t>(slots, -1), {slots});
  e.slot_len = I32ToDevice(gpu, std::vector<int32_t>(slots, 0), {slots});
  e.slot_used = I32ToDevice(gpu, std::vector<int32_t>(slots, -1), {slots});
  e.table = gpu.Allocate(DType::kI32, {rows + 1 + 2 * rows * kBatchOut}).value();
  e.fetch = gpu.Allocate(DType::kI32, {rows * (1 + 2 * kBatchCap)}).value();
  e.counters = I32ToDevice(gpu, std::vector<int32_t>(8, 0), {8});
  e.att_q = gpu.Allocate(DType::kBF16, {1, rows * kBatchGroup, kDim}).value();
  e.att_out = gpu.Allocate(DType::kBF16, {1, rows * kBatchGroup, kDim}).value();
  e.positions = I32ToDevice(gpu, {1 << 30}, {1});
  e.row_base = I32ToDevice(gpu, {0}, {1});
  return e;
}

// Batched SelectPages, MapPages and decode attention over many sequences' states (more than
// one launch holds) against one call per sequence on a twin state: the same selections, maps,
// residency, counters and slot contents bit for bit, and the same attention up to the rounding
// of a different split of the page lists.
void CheckBatchedOps(int bound_rows) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  auto cpu = MakeCpuBackend({.threads = 1});
  std::mt19937 rng(23);
  Pool host = MakePool(*gpu, kHostPages, &rng, true);
  std::vector<int32_t> ids(kHostPages), lens(kHostPages);
  std::iota(ids.begin(), ids.end(), 0);
  for (int32_t& l : lens) l = bound_rows == 2 ? 1 + static_cast<int>(rng() % kPage) : kPage;
  Summaries sums = Summarize(*cpu, *gpu, host, ids, lens, bound_rows);
  const int n = 18;  // two launches of the kernels' batch
  std::vector<BatchEntry> one, many;
  for (int i = 0; i < n; ++i) {
    const int rows = i % 2 == 0 ? 8 : 4, stride = 256 + 128 * (i % 3);
    one.push_back(MakeBatchEntry(*gpu, rows, stride, &rng));
    many.push_back(MakeBatchEntry(*gpu, rows, stride, &rng));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE(step);
    std::vector<PageSelectArgs> sel;
    std::vector<PageMapArgs> map;
    std::vector<AttentionArgs> att;
    for (int i = 0; i < n; ++i) {
      const int rows = one[i].rows, stride = one[i].stride;
      std::vector<int32_t> list_ids(rows * stride, -1), list_lens(rows * stride, 0), limits;
      for (int r = 0; r < rows; ++r) {
        // Rows own distinct pages (a residency map is per page); sequences share them.
        const int count = 20 + static_cast<int>(rng() % (stride - 20));
        std::vector<int32_t> pick(kHostPages / 8);
        std::iota(pick.begin(), pick.end(), r * (kHostPages / 8));
        std::shuffle(pick.begin(), pick.end(), rng);
        for (int e = 0; e < count; ++e) {
          list_ids[r * stride + e] = pick[e];
          list_lens[r * stride + e] = lens[pick[e]];
        }
        const int sink = 1, window = 3;
        const int pages_left = 1 + static_cast<int>(rng() % (kBatchOut - sink - window));
        limits.insert(limits.end(), {count, sink, count - window, pages_left * kPage, pages_left});
      }
      const std::vector<int32_t> summary_rows = RowsOf(list_ids);
      const std::vector<uint16_t> q = Queries(rng, rows * kBatchGroup, bound_rows);
      const std::vector<float> att_q = testing::Bf16Exact(rng, int64_t{rows} * kBatchGroup * kDim);
      for (BatchEntry* e : {&one[i], &many[i]}) {
        ASSERT_TRUE(gpu->Copy(testing::I32Tensor(list_ids, {rows, stride}), e->list_ids).ok());
        ASSERT_TRUE(gpu->Copy(testing::I32Tensor(list_lens, {rows, stride}), e->list_lens).ok());
        ASSERT_TRUE(gpu->Copy(testing::I32Tensor(summary_rows, {rows, stride}), e->list_rows).ok());
        ASSERT_TRUE(gpu->Copy(testing::I32Tensor(limits, {rows, 5}), e->limits).ok());
        ASSERT_TRUE(gpu->Copy(Tensor(const_cast<uint16_t*>(q.data()), DType::kBF16,
                                     {static_cast<int64_t>(q.size())}),
                              e->q)
                        .ok());
        e->att_q = testing::ToDevice(*gpu, att_q, DType::kBF16, {1, rows * kBatchGroup, kDim});
      }
      for (BatchEntry* e : {&one[i], &many[i]}) {
        PageSelectArgs s;
        s.q = e->q;
        s.list_ids = e->list_ids;
        s.list_lens = e->list_lens;
        s.list_rows = e->list_rows;
        s.limits = e->limits;
        s.bounds = sums.gpu;
        s.spread = sums.gpu_spread;
        s.scores = e->scores;
        s.out_ids = e->out_ids;
        s.out_lens = e->out_lens;
        s.out_count = e->out_count;
        s.n_heads = rows * kBatchGroup;
        PageMapArgs m;
        m.sel_ids = e->out_ids;
        m.sel_lens = e->out_lens;
        m.sel_count = e->out_count;
        m.host = host.View(true, kHostPages);
        m.slots = e->slots.View(true, int64_t{rows} * kBatchCap);
        m.first_group = 0;
        m.capacity = kBatchCap;
        m.resident = e->resident;
        m.slot_page = e->slot_page;
        m.slot_len = e->slot_len;
        m.slot_used = e->slot_used;
        m.clock = step + 1;
        m.table = e->table;
        m.fetch = e->fetch;
        m.counters = e->counters;
        const int32_t* t = e->table.data_as<const int32_t>();
        AttentionArgs a;
        a.q = e->att_q;
        a.out = e->att_out;
        a.positions = e->positions;
        a.row_base = e->row_base;
        a.table = {t, t + rows + 1, t + rows + 1 + rows * kBatchOut, rows};
        a.pool = m.slots;
        a.n_heads = rows * kBatchGroup;
        a.n_kv_heads = rows;
        a.scale = scale;
        a.causal = true;
        if (e == &one[i]) {
          gpu->SelectPages(s);
          gpu->MapPages(m);
          gpu->Attention(a);
        } else {
          sel.push_back(s);
          map.push_back(m);
          att.push_back(a);
        }
      }
    }
    gpu->SelectPagesBatch(sel);
    gpu->MapPagesBatch(map);
    gpu->AttentionBatch(att);
    for (int i = 0; i < n; ++i) {
      SCOPED_TRACE(i);
      const BatchEntry &a = one[i], &b = many[i];
      EXPECT_EQ(I32ToHost(*gpu, a.out_count), I32ToHost(*gpu, b.out_count));
      EXPECT_EQ(I32ToHost(*gpu, a.out_ids), I32ToHost(*gpu, b.out_ids));
      EXPECT_EQ(I32ToHost(*gpu, a.table), I32ToHost(*gpu, b.table));
      EXPECT_EQ(I32ToHost(*gpu, a.resident), I32ToHost(*gpu, b.resident));
      EXPECT_EQ(I32ToHost(*gpu, a.slot_page), I32ToHost(*gpu, b.slot_page));
      EXPECT_EQ(I32ToHost(*gpu, a.slot_used), I32ToHost(*gpu, b.slot_used));
      EXPECT_EQ(I32ToHost(*gpu, a.counters), I32ToHost(*gpu, b.counters));
      EXPECT_EQ(ToHostU16(*gpu, a.slots.dk), ToHostU16(*gpu, b.slots.dk));
      const std::vector<float> oa = testing::ToHostF32(*gpu, a.att_out);
      const std::vector<float> ob = testing::ToHostF32(*gpu, b.att_out);
      double worst = 0, norm = 0;
      for (size_t k = 0; k < oa.size(); ++k) {
        worst = std::max(worst, std::abs(static_cast<double>(oa[k]) - ob[k]));
        norm = std::max(norm, std::abs(static_cast<double>(oa[k])));
      }
      EXPECT_GT(norm, 0.0);
      EXPECT_LT(worst, 2e-2 * std::max(1.0, norm));
    }
  }
  const std::vector<int32_t> c = I32ToHost(*gpu, many[0].counters);
  EXPECT_GT(reinterpret_cast<const int64_t*>(c.data())[1], 0);  // pages were fetched
}

TEST(CudaPageSelect, BatchedOpsMatchOneCallEachWithMinMaxBounds) { CheckBatchedOps(2); }
TEST(CudaPageSelect, BatchedOpsMatchOneCallEachWithMeanKeys) { CheckBatchedOps(1); }

TEST(CudaPageSelect, QuestOnTheDeviceAgreesWithQuestOnTheHost) { CompareDeviceAndHost("quest"); }
TEST(CudaPageSelect, IceCacheOnTheDeviceAgreesWithIceCacheOnTheHost) {
  CompareDeviceAndHost("icecache");
}
TEST(CudaPageSelect, LycheeCentroidOnTheDeviceAgreesWithTheHost) { CompareDeviceAndHost("lychee"); }

}  // namespace
}  // namespace icecache
