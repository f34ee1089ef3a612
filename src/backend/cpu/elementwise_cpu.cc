// Row-wise and element-wise ops of the CPU backend: Embed, RmsNorm, Add, SwiGlu, Rope.
// Numerics follow Hugging Face transformers in f32 (operation order noted per op).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/simd.h"
#include "core/check.h"

namespace icecache::cpu {

namespace {

// Elements per work unit of the streaming ops; smaller calls run on the calling thread alone.
constexpr int64_t kUnitElems = 64 * 1024;

int64_t UnitsFor(int64_t elems) { return (elems + kUnitElems - 1) / kUnitElems; }

// f32 view of a small vector of any plain dtype (norm weights may be F32, F16 or BF16).
const float* AsF32(const CpuContext& ctx, const Tensor& t) {
  if (t.dtype() == DType::kF32) return t.data_as<const float>();
  ctx.workspace->ReserveShared(t.numel());
  DequantizeRows(t.dtype(), t.data(), t.numel(), 0, 1, ctx.workspace->shared());
  return ctx.workspace->shared();
}

}  // namespace

void EmbedCpu(const CpuContext& ctx, const Tensor& table, const Tensor& ids, const Tensor& out) {
  ICECACHE_CHECK(out.dtype() == DType::kF32 && CpuWeightTypeSupported(table.dtype()));
  const int64_t rows = ids.numel();
  const int64_t vocab = table.dim(0);
  const int64_t d = table.dim(1);
  const int32_t* id = ids.data_as<const int32_t>();
  for (int64_t i = 0; i < rows; ++i) ICECACHE_CHECK(id[i] >= 0 && id[i] < vocab);
  const int64_t rows_per_unit = std::max<int64_t>(1, kUnitElems / std::max<int64_t>(1, d));
  const int64_t units = (rows + rows_per_unit - 1) / rows_per_unit;
  float* o = out.data_as<float>();
  ParallelUnits(*ctx.pool, units, [&](int, int64_t u) {
    const int64_t end = std::min(rows, (u + 1) * rows_per_unit);
    for (int64_t i = u * rows_per_unit; i < end; ++i) {
      DequantizeRows(table.dtype(), table.data(), d, id[i], id[i] + 1, o + i * d);
    }
  });
}

// Hugging Face LlamaRMSNorm: variance = mean(x^2); h = x * rsqrt(variance + eps); out = w * h.
// The sum of squares uses 8-lane f32 partial sums (like torch's vectorised reduction) and
// rsqrt is 1 / sqrt, correctly rounded, as torch computes it on the CPU.
void RmsNormCpu(const CpuContext& ctx, const Tensor& x, const Tensor& w, float eps,
                const Tensor& out) {
  ICECACHE_CHECK(x.dtype() == DType::kF32 && out.dtype() == DType::kF32);
  const int64_t rows = x.rows();
  const int64_t d = x.cols();
  if (rows == 0 || d == 0) return;
  const float* wp = AsF32(ctx, w);
  const float* xp = x.data_as<const float>();
  float* op = out.data_as<float>();
  const int64_t d8 = d / 8 * 8;
  const int64_t rows_per_unit = std::max<int64_t>(1, kUnitElems / d);
  const int64_t units = (rows + rows_per_unit - 1) / rows_per_unit;
  ParallelUnits(*ctx.pool, units, [&](int, int64_t u) {
    const int64_t end = std::min(rows, (u + 1) * rows_per_unit);
    for (int64_t r = u * rows_per_unit; r < end; ++r) {
      const float* xr = xp + r * d;
      float* orow = op + r * d;
      __m256 acc = _mm256_setzero_ps();
      int64_t i = 0;
      for (; i < d8; i += 8) {
        const __m256 v = _mm256_loadu_ps(xr + i);
        acc = _mm256_fmadd_ps(v, v, acc);
      }
      float ss = HorizontalSum(acc);
      for (; i < d; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
      const __m256 vinv = _mm256_set1_ps(inv);
      for (i = 0; i < d8; i += 8) {
        const __m256 h = _mm256_mul_ps(_mm256_loadu_ps(xr + i), vinv);
        _mm256_storeu_ps(orow + i, _mm256_mul_ps(_mm256_loadu_ps(wp + i), h));
      }
      for (; i < d; ++i) orow[i] = wp[i] * (xr[i] * inv);
    }
  });
}

void AddCpu(const CpuContext& ctx, const Tensor& a, const Tensor& inout) {
  ICECACHE_CHECK(a.dtype() == DType::kF32 && inout.dtype() == DType::kF32);
  const int64_t n = a.numel();
  const float* ap = a.data_as<const float>();
  float* yp = inout.data_as<float>();
  ParallelUnits(*ctx.pool, UnitsFor(n), [&](int, int64_t u) {
    const int64_t begin = u * kUnitElems;
    const int64_t end = std::min(n, begin + kUnitElems);
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      _mm256_storeu_ps(yp + i, _mm256_add_ps(_mm256_loadu_ps(yp + i), _mm256_loadu_ps(ap + i)));
    }
    for (; i < end; ++i) yp[i] += ap[i];
  });
}

// torch's silu: x / (1 + exp(-x)); then * up.
void SwiGluCpu(const CpuContext& ctx, const Tensor& gate, const Tensor& up, const Tensor& out) {
  ICECACHE_CHECK(gate.dtype() == DType::kF32 && up.dtype() == DType::kF32 &&
                 out.dtype() == DType::kF32);
  const int64_t n = gate.numel();
  const float* g = gate.data_as<const float>();
  const float* u = up.data_as<const float>();
  float* o = out.data_as<float>();
  ParallelUnits(*ctx.pool, UnitsFor(n), [&](int, int64_t unit) {
    const int64_t begin = unit * kUnitElems;
    const int64_t end = std::min(n, begin + kUnitElems);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      const __m256 gv = _mm256_loadu_ps(g + i);
      const __m256 e = ExpPs(_mm256_xor_ps(gv, sign));
      const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    if (i < end) {  // masked tail, same arithmetic
      const __m256i mask = TailMask(static_cast<int>(end - i));
      const __m256 gv = _mm256_maskload_ps(g + i, mask);
      const __m256 e = ExpPs(_mm256_xor_ps(gv, sign));
      const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
      _mm256_maskstore_ps(o + i, mask, _mm256_mul_ps(silu, _mm256_maskload_ps(u + i, mask)));
    }
  });
}

// Hugging Face rotate_half RoPE: angle = float(pos) * inv_freq[i] (one f32 product), cos and
// sin of it in f32, then out[i] = x[i] * cos - x[i + half] * sin and
// out[i + half] = x[i + half] * cos + x[i] * sin, each product rounded before the sum (no FMA).
void RopeCpu(const CpuContext& ctx, const Tensor& positions, const Tensor& inv_freq,
             const Tensor& x) {
  ICECACHE_CHECK(x.dtype() == DType::kF32);
  const int64_t n = x.dim(0);
  const int64_t heads = x.dim(1);
  const int64_t hd = x.dim(2);
  const int64_t half = hd / 2;
  const int64_t half8 = half / 8 * 8;
  if (n == 0 || heads == 0 || half == 0) return;
  const int32_t* pos = positions.data_as<const int32_t>();
  const float* freq = inv_freq.data_as<const float>();
  float* xp = x.data_as<float>();
  ctx.workspace->ReservePerThread(2 * half);
  const int64_t tokens_per_unit = std::max<int64_t>(1, kUnitElems / (heads * hd) / 4);
  const int64_t units = (n + tokens_per_unit - 1) / tokens_per_unit;
  ParallelUnits(*ctx.pool, units, [&](int thread, int64_t u) {
    float* cs = ctx.workspace->thread_buffer(thread);
    float* sn = cs + half;
    const int64_t end = std::min(n, (u + 1) * tokens_per_unit);
    for (int64_t t = u * tokens_per_unit; t < end; ++t) {
      const float p = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = p * freq[i];
        cs[i] = std::cos(angle);
        sn[i] = std::sin(angle);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* a = xp + (t * heads + h) * hd;
        float* b = a + half;
        int64_t i = 0;
        for (; i < half8; i += 8) {
          const __m256 c = _mm256_loadu_ps(cs + i);
          const __m256 s = _mm256_loadu_ps(sn + i);
          const __m256 x0 = _mm256_loadu_ps(a + i);
          const __m256 x1 = _mm256_loadu_ps(b + i);
          _mm256_storeu_ps(a + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
          _mm256_storeu_ps(b + i, _mm256_add_ps(_mm256_mul_ps(x1, c), _mm256_mul_ps(x0, s)));
        }
        for (; i < half; ++i) {
          const float x0 = a[i];
          const float x1 = b[i];
          const float r0 = x0 * cs[i] - x1 * sn[i];
          const float r1 = x1 * cs[i] + x0 * sn[i];
          a[i] = r0;
          b[i] = r1;
        }
      }
    }
  });
}

}  // namespace icecache::cpu
