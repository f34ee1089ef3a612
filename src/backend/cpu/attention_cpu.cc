// Attention over paged KV on the CPU.
//
// Tokens are grouped into runs that share a page-table row block (row_base). Long runs (a
// prefill chunk) go to the blocked sgemm path (attention_prefill_cpu.cc). The other tokens
// (decode, or short runs) take the decode path here: for each (token, KV head) the group's
// query heads walk the row's pages; each page yields scores, a page maximum and exp-weighted
// sums that are merged into the running (max, sum, acc) state by log-sum-exp. When there are
// fewer (token, KV head) items than threads can keep busy, each row's page list is split into
// chunks whose partial states are merged the same way at the end: a shorter page list (sparse
// attention) is the same code.
#include "backend/cpu/attention_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/parallel.h"
#include "backend/cpu/simd.h"
#include "core/check.h"
#include "core/half.h"

namespace icecache::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Runs of at least this many tokens sharing row_base take the prefill path.
constexpr int64_t kPrefillMinTokens = 16;
// Split rows into page chunks only while a chunk keeps at least this many pages.
constexpr int64_t kMinPagesPerChunk = 8;
// The decode path prefetches the page this many entries ahead.
constexpr int64_t kPrefetchPages = 4;
// Chunk merges over fewer partial-state floats than this run on the calling thread.
constexpr int64_t kSerialMergeFloats = 64 * 1024;
// Aim for this many work units per thread when splitting.
constexpr int64_t kUnitsPerThread = 8;

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Per-thread scratch of the decode path.
struct DecodeScratch {
  float* q;       // [group][dp], scaled queries
  float* scores;  // [group][pr]
  float* m;       // [group] running max
  float* l;       // [group] running sum of exp
  float* acc;     // [group][dp] running exp-weighted sum of values
  float* page;    // [2][page_size][dp]: a page converted to padded f32 (F16 pool or odd d)
  float* zero;    // [dp] zeros: stands in for missing keys of a partial 8-key group
};

int64_t ScoresStride(const AttnDims& dims) {
  return RoundUp(std::max<int64_t>(dims.page_size, 1), 8);
}

DecodeScratch CarveDecode(float* base, const AttnDims& dims, int64_t* floats) {
  Carver c(base);
  DecodeScratch s;
  s.q = c.Take(dims.group * dims.dp);
  s.scores = c.Take(dims.group * ScoresStride(dims));
  s.m = c.Take(dims.group);
  s.l = c.Take(dims.group);
  s.acc = c.Take(dims.group * dims.dp);
  s.page = c.Take(2 * dims.page_size * dims.dp);
  s.zero = c.Take(dims.dp);
  *floats = c.used();
  return s;
}

// Lane i: dot(q, k[i]) over dp (a multiple of 8).
inline __m256 Dot8Keys(const float* q, const float* const k[8], int64_t dp) {
  __m256 a[8];
  for (auto& v : a) v = _mm256_setzero_ps();
  for (int64_t c = 0; c < dp; c += 8) {
    const __m256 qv = _mm256_loadu_ps(q + c);
    for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[i] + c), a[i]);
  }
  return HorizontalSum8(a);
}

// acc[0, 8 * NV) = acc * alpha + sum_j p[j] * v[j * dp + (0, 8 * NV)].
template <int NV>
void PvChunk(float* acc, float alpha, const float* p, const float* v, int64_t len, int64_t dp) {
  __m256 a[NV];
  const __m256 va = _mm256_set1_ps(alpha);
  for (int i = 0; i < NV; ++i) a[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * i), va);
  for (int64_t j = 0; j < len; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const float* vj = v + j * dp;
    for (int i = 0; i < NV; ++i) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * i), a[i]);
  }
  for (int i = 0; i < NV; ++i) _mm256_storeu_ps(acc + 8 * i, a[i]);
}

void AccumulatePv(float* acc, float alpha, const float* p, const float* v, int64_t len,
                  int64_t dp) {
  using Chunk = void (*)(float*, float, const float*, const float*, int64_t, int64_t);
  static constexpr Chunk kChunks[] = {PvChunk<1>, PvChunk<2>, PvChunk<3>, PvChunk<4>,
                                      PvChunk<5>, PvChunk<6>, PvChunk<7>, PvChunk<8>};
  for (int64_t c = 0; c < dp; c += 64) {
    kChunks[std::min<int64_t>(8, (dp - c) / 8) - 1](acc + c, alpha, p, v + c, len, dp);
  }
}

// Asks for the K and V rows of `page` (pages are scattered in the pool, so the hardware
// prefetcher cannot guess the next one), one cache line at a time, into L2: measured on Zen 4
// with cold KV (decode reads each layer's KV once per token), L2 prefetches a few pages ahead
// cut the time by about a quarter, where L1 prefetches (which hold L1 miss buffers) gain little.
void PrefetchPage(const KvPoolView& pool, int32_t page) {
  if (page < 0 || page >= pool.num_pages) return;  // checked properly when the page is read
  const int64_t bytes =
      int64_t{pool.page_size} * pool.head_dim * (pool.dtype == DType::kF32 ? 4 : 2);
  const char* k = static_cast<const char*>(pool.k) + page * bytes;
  const char* v = static_cast<const char*>(pool.v) + page * bytes;
  for (int64_t off = 0; off < bytes; off += 64) {
    _mm_prefetch(k + off, _MM_HINT_T1);
    _mm_prefetch(v + off, _MM_HINT_T1);
  }
  _mm_prefetch(reinterpret_cast<const char*>(pool.positions + page * pool.page_size), _MM_HINT_T1);
}

// Attends the group's query heads (s.q, at position qpos) over entries [e0, e1) of the page
// table, updating the running state s.m, s.l, s.acc.
void AttendPages(const AttentionArgs& args, const AttnDims& dims, int32_t qpos, int64_t e0,
                 int64_t e1, const DecodeScratch& s) {
  const KvPoolView& pool = args.pool;
  const int64_t dp = dims.dp;
  const int64_t ps = dims.page_size;
  const int64_t pr = ScoresStride(dims);
  const bool direct = pool.dtype == DType::kF32 && dims.d == dp;
  const __m256i vqpos = _mm256_set1_epi32(qpos);
  for (int64_t e = e0; e < e1; ++e) {
    const int32_t page = args.table.indices[e];
    const int32_t len = args.table.lens[e];
    CheckEntry(pool, page, len);
    if (e + kPrefetchPages < e1) PrefetchPage(pool, args.table.indices[e + kPrefetchPages]);
    if (len == 0) continue;
    const float* k;
    const float* v;
    if (direct) {
      k = static_cast<const float*>(pool.k) + page * ps * dp;
      v = static_cast<const float*>(pool.v) + page * ps * dp;
    } else {
      for (int64_t j = 0; j < len; ++j) {
        LoadPoolRow(pool, pool.k, page * ps + j, s.page + j * dp, dp);
        LoadPoolRow(pool, pool.v, page * ps + j, s.page + (ps + j) * dp, dp);
      }
      k = s.page;
      v = s.page + ps * dp;
    }
    const int32_t* pos = pool.positions + page * ps;

    // Scores of 8 keys at a time for every head of the group; masked keys get -inf.
    for (int64_t j0 = 0; j0 < len; j0 += 8) {
      const int n = static_cast<int>(std::min<int64_t>(8, len - j0));
      const float* rows[8];
      for (int i = 0; i < 8; ++i) rows[i] = i < n ? k + (j0 + i) * dp : s.zero;
      const __m256i lanes = TailMask(n);
      __m256 valid = _mm256_castsi256_ps(lanes);
      if (dims.causal) {
        const __m256i pv = _mm256_maskload_epi32(pos + j0, lanes);
        valid = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(pv, vqpos)), valid);
      }
      for (int64_t h = 0; h < dims.group; ++h) {
        const __m256 sc = Dot8Keys(s.q + h * dp, rows, dp);
        _mm256_storeu_ps(s.scores + h * pr + j0,
                         _mm256_blendv_ps(_mm256_set1_ps(kNegInf), sc, valid));
      }
    }

    // Merge this page's softmax terms into each head's running state.
    const int64_t len8 = RoundUp(len, 8);
    for (int64_t h = 0; h < dims.group; ++h) {
      float* sc = s.scores + h * pr;
      __m256 mx = _mm256_set1_ps(kNegInf);
      for (int64_t j = 0; j < len8; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sc + j));
      const float page_max = HorizontalMax(mx);
      if (page_max == kNegInf) continue;  // every key of this page is masked for this query
      const float m_new = std::max(s.m[h], page_max);
      // exp(m_old - m_new): 1 when the maximum holds (most pages), 0 while the state is empty.
      const float alpha = m_new == s.m[h] ? 1.0f : std::exp(s.m[h] - m_new);
      const __m256 vm = _mm256_set1_ps(m_new);
      __m256 sum = _mm256_setzero_ps();
      for (int64_t j = 0; j < len8; j += 8) {
        const __m256 p = ExpPs(_mm256_sub_ps(_mm256_loadu_ps(sc + j), vm));
        _mm256_storeu_ps(sc + j, p);
        sum = _mm256_add_ps(sum, p);
      }
      s.l[h] = s.l[h] * alpha + HorizontalSum(sum);
      s.m[h] = m_new;
      AccumulatePv(s.acc + h * dp, alpha, sc, v, len, dp);
    }
  }
}

// out[0, d) = acc / l, or zeros when nothing was attended.
void WriteNormalized(const float* acc, float l, int64_t d, float* out) {
  if (l == 0.0f) {
    std::memset(out, 0, static_cast<size_t>(d) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < d; ++i) out[i] = acc[i] / l;
}

// The decode path over `tokens` (indices into the call's tokens).
void DecodeTokens(const CpuContext& ctx, const AttentionArgs& args, const AttnDims& dims,
                  const std::vector<int64_t>& tokens) {
  const int64_t items = static_cast<int64_t>(tokens.size()) * dims.kv_heads;
  if (items == 0) return;
  int64_t scratch_floats = 0;
  CarveDecode(nullptr, dims, &scratch_floats);
  ctx.workspace->ReservePerThread(scratch_floats);

  // Split rows into page chunks when the items alone cannot keep the threads busy.
  int64_t chunks = 1;
  const int64_t want = kUnitsPerThread * ctx.threads();
  if (ctx.threads() > 1 && items < want) {
    int64_t max_pages = 0;
    for (int64_t t : tokens) {
      for (int64_t g = 0; g < dims.kv_heads; ++g) {
        int64_t b, e;
        RowRange(args.table, args.row_base.data_as<const int32_t>()[t] + g, &b, &e);
        max_pages = std::max(max_pages, e - b);
      }
    }
    chunks = std::clamp<int64_t>(max_pages / kMinPagesPerChunk, 1, (want + items - 1) / items);
  }
  const int64_t state_stride = RoundUp(dims.group * (dims.dp + 2), 16);
  if (chunks > 1) ctx.workspace->ReserveShared(items * chunks * state_stride);

  const float* q = args.q.data_as<const float>();
  float* out = args.out.data_as<float>();
  const int32_t* qpos = args.positions.data_as<const int32_t>();
  const int32_t* row_base = args.row_base.data_as<const int32_t>();
  const int64_t dp = dims.dp;
  const int64_t d = dims.d;
  ParallelUnits(*ctx.pool, items * chunks, [&](int thread, int64_t u) {
    const int64_t item = u / chunks;
    const int64_t c = u % chunks;
    const int64_t t = tokens[item / dims.kv_heads];
    const int64_t g = item % dims.kv_heads;
    int64_t b, e;
    RowRange(args.table, row_base[t] + g, &b, &e);
    const int64_t e0 = b + (e - b) * c / chunks;
    const int64_t e1 = b + (e - b) * (c + 1) / chunks;

    int64_t unused;
    const DecodeScratch s = CarveDecode(ctx.workspace->thread_buffer(thread), dims, &unused);
    std::memset(s.zero, 0, static_cast<size_t>(dp) * sizeof(float));
    for (int64_t h = 0; h < dims.group; ++h) {
      const float* qh = q + (t * dims.heads + g * dims.group + h) * d;
      float* qs = s.q + h * dp;
      for (int64_t i = 0; i < d; ++i) qs[i] = qh[i] * dims.scale;
      for (int64_t i = d; i < dp; ++i) qs[i] = 0.0f;
      s.m[h] = kNegInf;
      s.l[h] = 0.0f;
    }
    std::memset(s.acc, 0, static_cast<size_t>(dims.group * dp) * sizeof(float));
    AttendPages(args, dims, qpos[t], e0, e1, s);

    if (chunks == 1) {
      for (int64_t h = 0; h < dims.group; ++h) {
        WriteNormalized(s.acc + h * dp, s.l[h], d, out + (t * dims.heads + g * dims.group + h) * d);
      }
      return;
    }
    float* st = ctx.workspace->shared() + u * state_stride;  // [m][l][acc] per unit
    std::memcpy(st, s.m, static_cast<size_t>(dims.group) * sizeof(float));
    std::memcpy(st + dims.group, s.l, static_cast<size_t>(dims.group) * sizeof(float));
    std::memcpy(st + 2 * dims.group, s.acc, static_cast<size_t>(dims.group * dp) * sizeof(float));
  });
  if (chunks == 1) return;

  // Merge the chunks of each item by log-sum-exp; small merges (decode) stay on this thread,
  // where they cost less than a dispatch.
  auto merge = [&](int thread, int64_t item) {
    const int64_t t = tokens[item / dims.kv_heads];
    const int64_t g = item % dims.kv_heads;
    const float* base = ctx.workspace->shared() + item * chunks * state_stride;
    float* merged = ctx.workspace->thread_buffer(thread);
    for (int64_t h = 0; h < dims.group; ++h) {
      float m = kNegInf;
      for (int64_t c = 0; c < chunks; ++c) m = std::max(m, base[c * state_stride + h]);
      std::memset(merged, 0, static_cast<size_t>(dp) * sizeof(float));
      float l = 0.0f;
      if (m != kNegInf) {
        for (int64_t c = 0; c < chunks; ++c) {
          const float* st = base + c * state_stride;
          if (st[h] == kNegInf) continue;
          const float w = std::exp(st[h] - m);
          l += st[dims.group + h] * w;
          const float* acc = st + 2 * dims.group + h * dp;
          for (int64_t i = 0; i < dp; ++i) merged[i] += acc[i] * w;
        }
      }
      WriteNormalized(merged, l, d, out + (t * dims.heads + g * dims.group + h) * d);
    }
  };
  if (items * chunks * state_stride < kSerialMergeFloats) {
    for (int64_t item = 0; item < items; ++item) merge(0, item);
  } else {
    ParallelUnits(*ctx.pool, items, merge);
  }
}

}  // namespace

AttnDims MakeAttnDims(const AttentionArgs& args) {
  AttnDims dims;
  dims.tokens = args.q.dim(0);
  dims.heads = args.n_heads;
  dims.kv_heads = args.n_kv_heads;
  dims.group = args.n_heads / args.n_kv_heads;
  dims.d = args.pool.head_dim;
  dims.dp = RoundUp(dims.d, 8);
  dims.page_size = args.pool.page_size;
  dims.scale = args.scale;
  dims.causal = args.causal;
  return dims;
}

void LoadPoolRow(const KvPoolView& pool, const void* base, int64_t slot, float* dst, int64_t dp) {
  const int64_t d = pool.head_dim;
  if (pool.dtype == DType::kF32) {
    std::memcpy(dst, static_cast<const float*>(base) + slot * d,
                static_cast<size_t>(d) * sizeof(float));
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(base) + slot * d;
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) _mm256_storeu_ps(dst + i, LoadF16(src + i));
    for (; i < d; ++i) dst[i] = F16ToF32(src[i]);
  }
  for (int64_t i = d; i < dp; ++i) dst[i] = 0.0f;
}

void RowRange(const PageTableView& table, int64_t row, int64_t* begin, int64_t* end) {
  ICECACHE_CHECK_MSG(row >= 0 && row < table.num_rows, "attention: page-table row out of range");
  *begin = table.indptr[row];
  *end = table.indptr[row + 1];
  ICECACHE_CHECK(0 <= *begin && *begin <= *end);
}

void CheckEntry(const KvPoolView& pool, int32_t page, int32_t len) {
  ICECACHE_CHECK_MSG(page >= 0 && page < pool.num_pages, "attention: page id out of range");
  ICECACHE_CHECK_MSG(len >= 0 && len <= pool.page_size, "attention: page length out of range");
}

void AttentionCpu(const CpuContext& ctx, const AttentionArgs& args) {
  ICECACHE_CHECK(args.q.dtype() == DType::kF32 && args.out.dtype() == DType::kF32);
  ICECACHE_CHECK(args.positions.dtype() == DType::kI32 && args.row_base.dtype() == DType::kI32);
  ICECACHE_CHECK(args.pool.dtype == DType::kF32 || args.pool.dtype == DType::kF16);
  const AttnDims dims = MakeAttnDims(args);
  if (dims.tokens == 0) return;
  const int32_t* row_base = args.row_base.data_as<const int32_t>();

  // Runs of tokens sharing row_base: long ones are prefill segments, the rest decode tokens.
  std::vector<int64_t>& list = ctx.workspace->ints();
  list.clear();
  int64_t prefill_segments = 0;
  for (int64_t t0 = 0; t0 < dims.tokens;) {
    int64_t t1 = t0 + 1;
    while (t1 < dims.tokens && row_base[t1] == row_base[t0]) ++t1;
    if (t1 - t0 < kPrefillMinTokens) {
      for (int64_t t = t0; t < t1; ++t) list.push_back(t);
    } else {
      ++prefill_segments;
    }
    t0 = t1;
  }
  DecodeTokens(ctx, args, dims, list);
  if (prefill_segments == 0) return;

  // Prefill segments: list holds (first, count, first unit) per segment.
  list.clear();
  int64_t units = 0;
  for (int64_t t0 = 0; t0 < dims.tokens;) {
    int64_t t1 = t0 + 1;
    while (t1 < dims.tokens && row_base[t1] == row_base[t0]) ++t1;
    if (t1 - t0 >= kPrefillMinTokens) {
      list.push_back(t0);
      list.push_back(t1 - t0);
      list.push_back(units);
      units += PrefillUnits(dims, {t0, t1 - t0});
    }
    t0 = t1;
  }
  ctx.workspace->ReservePerThread(PrefillScratchFloats(dims));
  ParallelUnits(*ctx.pool, units, [&](int thread, int64_t u) {
    int64_t s = 0;
    while (s + 1 < prefill_segments && list[3 * (s + 1) + 2] <= u) ++s;
    const PrefillSegment seg{list[3 * s], list[3 * s + 1]};
    PrefillUnit(args, dims, seg, u - list[3 * s + 2], ctx.workspace->thread_buffer(thread));
  });
}

}  // namespace icecache::cpu
