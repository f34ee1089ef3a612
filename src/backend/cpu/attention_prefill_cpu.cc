// The prefill path of CPU attention: many queries (a chunk of one sequence) over one page-table
// row per KV head.
//
// A work unit is (KV head, block of query tokens). Its queries (all heads of the group, scaled)
// form a matrix Q [rows, dp]. The row's keys are gathered from their pages into contiguous key
// blocks (Kb, Vb [block, dp], dropping keys that no query of the unit may see); for each block
// S = Q Kb^T and O += P Vb run as sgemm, with an online softmax in between: per query row a
// running max m and sum l; S is masked by position, P = exp(S - m_new) and O, l are rescaled by
// exp(m_old - m_new).
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/attention_cpu.h"
#include "backend/cpu/simd.h"
#include "core/check.h"

namespace icecache::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Query rows (tokens x group heads) per unit and keys per block: S is 192 x 256 floats.
constexpr int64_t kTargetRows = 192;
constexpr int64_t kKeyBlock = 256;

int64_t TokensPerUnit(const AttnDims& dims) {
  return std::max<int64_t>(1, kTargetRows / dims.group);
}

struct PrefillScratch {
  float* q;       // [rows][dp] scaled queries
  float* o;       // [rows][dp] unnormalised output
  float* m;       // [rows]
  float* l;       // [rows]
  int32_t* qpos;  // [rows]
  float* s;       // [rows][kKeyBlock] scores, then probabilities
  float* kb;      // [kKeyBlock][dp]
  float* vb;      // [kKeyBlock][dp]
  int32_t* kpos;  // [kKeyBlock]
};

PrefillScratch CarvePrefill(float* base, const AttnDims& dims, int64_t* floats) {
  const int64_t rows = TokensPerUnit(dims) * dims.group;
  Carver c(base);
  PrefillScratch s;
  s.q = c.Take(rows * dims.dp);
  s.o = c.Take(rows * dims.dp);
  s.m = c.Take(rows);
  s.l = c.Take(rows);
  s.qpos = c.TakeInts(rows);
  s.s = c.Take(rows * kKeyBlock);
  s.kb = c.Take(kKeyBlock * dims.dp);
  s.vb = c.Take(kKeyBlock * dims.dp);
  s.kpos = c.TakeInts(kKeyBlock);
  *floats = c.used();
  return s;
}

// One key block: scores, mask, online softmax update, O += P V.
void ProcessBlock(const AttnDims& dims, int64_t rows, int64_t nb, int32_t min_qpos,
                  const PrefillScratch& s) {
  const int64_t dp = dims.dp;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(nb),
              static_cast<int>(dp), 1.0f, s.q, static_cast<int>(dp), s.kb, static_cast<int>(dp),
              0.0f, s.s, static_cast<int>(kKeyBlock));
  int32_t max_kpos = std::numeric_limits<int32_t>::min();
  for (int64_t j = 0; j < nb; ++j) max_kpos = std::max(max_kpos, s.kpos[j]);
  const bool mask = dims.causal && max_kpos > min_qpos;
  const int64_t nb8 = (nb + 7) / 8 * 8;
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s.s + r * kKeyBlock;
    for (int64_t j = nb; j < nb8; ++j) sr[j] = kNegInf;
    if (mask) {
      const __m256i qp = _mm256_set1_epi32(s.qpos[r]);
      for (int64_t j = 0; j < nb; j += 8) {
        const __m256i lanes = TailMask(static_cast<int>(std::min<int64_t>(8, nb - j)));
        const __m256i kp = _mm256_maskload_epi32(s.kpos + j, lanes);
        const __m256 hide =
            _mm256_castsi256_ps(_mm256_and_si256(_mm256_cmpgt_epi32(kp, qp), lanes));
        _mm256_storeu_ps(sr + j, _mm256_blendv_ps(_mm256_loadu_ps(sr + j), neg_inf, hide));
      }
    }
    __m256 mx = neg_inf;
    for (int64_t j = 0; j < nb8; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sr + j));
    const float row_max = HorizontalMax(mx);
    if (row_max == kNegInf) {  // nothing visible in this block for this query
      std::memset(sr, 0, static_cast<size_t>(nb8) * sizeof(float));
      continue;
    }
    const float m_new = std::max(s.m[r], row_max);
    const float alpha = m_new == s.m[r] ? 1.0f : std::exp(s.m[r] - m_new);
    const __m256 vm = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < nb8; j += 8) {
      const __m256 p = ExpPs(_mm256_sub_ps(_mm256_loadu_ps(sr + j), vm));
      _mm256_storeu_ps(sr + j, p);
      sum = _mm256_add_ps(sum, p);
    }
    s.l[r] = s.l[r] * alpha + HorizontalSum(sum);
    s.m[r] = m_new;
    if (alpha != 1.0f) {
      float* orow = s.o + r * dp;
      const __m256 va = _mm256_set1_ps(alpha);
      for (int64_t i = 0; i < dp; i += 8) {
        _mm256_storeu_ps(orow + i, _mm256_mul_ps(_mm256_loadu_ps(orow + i), va));
      }
    }
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(dp), static_cast<int>(nb), 1.0f, s.s, static_cast<int>(kKeyBlock),
              s.vb, static_cast<int>(dp), 1.0f, s.o, static_cast<int>(dp));
}

}  // namespace

int64_t PrefillScratchFloats(const AttnDims& dims) {
  int64_t floats = 0;
  CarvePrefill(nullptr, dims, &floats);
  return floats;
}

int64_t PrefillUnits(const AttnDims& dims, const PrefillSegment& seg) {
  const int64_t tpu = TokensPerUnit(dims);
  return (seg.count + tpu - 1) / tpu * dims.kv_heads;
}

void PrefillUnit(const AttentionArgs& args, const AttnDims& dims, const PrefillSegment& seg,
                 int64_t unit, float* scratch) {
  int64_t unused;
  const PrefillScratch s = CarvePrefill(scratch, dims, &unused);
  const int64_t tpu = TokensPerUnit(dims);
  const int64_t blocks = (seg.count + tpu - 1) / tpu;
  // Latest query blocks first: under the causal mask they see the most keys.
  const int64_t qb = blocks - 1 - unit / dims.kv_heads;
  const int64_t g = unit % dims.kv_heads;
  const int64_t t0 = seg.first + qb * tpu;
  const int64_t t1 = std::min(seg.first + seg.count, t0 + tpu);
  const int64_t rows = (t1 - t0) * dims.group;
  const int64_t d = dims.d;
  const int64_t dp = dims.dp;

  const float* q = args.q.data_as<const float>();
  const int32_t* qpos = args.positions.data_as<const int32_t>();
  int32_t min_qpos = std::numeric_limits<int32_t>::max();
  int32_t max_qpos = std::numeric_limits<int32_t>::min();
  for (int64_t t = t0; t < t1; ++t) {
    min_qpos = std::min(min_qpos, qpos[t]);
    max_qpos = std::max(max_qpos, qpos[t]);
    for (int64_t h = 0; h < dims.group; ++h) {
      const int64_t r = (t - t0) * dims.group + h;
      const float* src = q + (t * dims.heads + g * dims.group + h) * d;
      float* dst = s.q + r * dp;
      for (int64_t i = 0; i < d; ++i) dst[i] = src[i] * dims.scale;
      for (int64_t i = d; i < dp; ++i) dst[i] = 0.0f;
      s.qpos[r] = qpos[t];
      s.m[r] = kNegInf;
      s.l[r] = 0.0f;
    }
  }
  std::memset(s.o, 0, static_cast<size_t>(rows * dp) * sizeof(float));

  // Gather the row's keys into blocks, skipping keys later than every query of the unit.
  const KvPoolView& pool = args.pool;
  const int64_t ps = dims.page_size;
  int64_t b, e;
  RowRange(args.table, args.row_base.data_as<const int32_t>()[t0] + g, &b, &e);
  int64_t nb = 0;
  for (int64_t entry = b; entry < e; ++entry) {
    const int32_t page = args.table.indices[entry];
    const int32_t len = args.table.lens[entry];
    CheckEntry(pool, page, len);
    const int32_t* pos = pool.positions + page * ps;
    for (int64_t j = 0; j < len; ++j) {
      if (dims.causal && pos[j] > max_qpos) continue;
      LoadPoolRow(pool, pool.k, page * ps + j, s.kb + nb * dp, dp);
      LoadPoolRow(pool, pool.v, page * ps + j, s.vb + nb * dp, dp);
      s.kpos[nb] = pos[j];
      if (++nb == kKeyBlock) {
        ProcessBlock(dims, rows, nb, min_qpos, s);
        nb = 0;
      }
    }
  }
  if (nb > 0) ProcessBlock(dims, rows, nb, min_qpos, s);

  float* out = args.out.data_as<float>();
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t h = 0; h < dims.group; ++h) {
      const int64_t r = (t - t0) * dims.group + h;
      float* dst = out + (t * dims.heads + g * dims.group + h) * d;
      const float l = s.l[r];
      if (l == 0.0f) {
        std::memset(dst, 0, static_cast<size_t>(d) * sizeof(float));
      } else {
        for (int64_t i = 0; i < d; ++i) dst[i] = s.o[r * dp + i] / l;
      }
    }
  }
}

}  // namespace icecache::cpu
