// MatMul on the CPU: y[n, m] = x[n, k] w[m, k]^T (+ bias).
//
// n <= kGemvMaxBatch (decode, small batches): fused dequantize-and-dot over weight rows
// (quant_dot.cc); threads take chunks of output rows, and each chunk (a few KiB of weights, so it
// stays in L1/L2) is dotted with the activation rows kGemvMaxRows at a time: weights come from
// memory once.
// Larger n (prefill): weight rows are dequantized panel by panel into per-thread f32 scratch and
// multiplied with cblas_sgemm (OpenBLAS, single-threaded); threads take panels.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/quant_dot.h"
#include "core/check.h"

namespace icecache::cpu {

namespace {

// Below this many multiply-adds a call runs on one thread (dispatch costs a few microseconds).
constexpr int64_t kMinParallelMacs = 64 * 1024;
// Bytes of weights per GEMV work unit: about 1/16 of a thread's share, within these bounds; large
// enough to amortise the atomic counter and to let the row prefetch run ahead, small enough to
// balance two cores that other processes also use.
constexpr int64_t kGemvMinUnitBytes = 16 * 1024;
constexpr int64_t kGemvMaxUnitBytes = 256 * 1024;
// Batches up to this size take the GEMV path (measured on Zen 4: 8 rows as two GEMV groups take
// about 70% of the time of dequantized panels + sgemm; at 12 rows the two are even).
constexpr int64_t kGemvMaxBatch = 8;
// Most f32 elements of one dequantized panel (256 rows of 1024).
constexpr int64_t kPanelMaxElems = 256 * 1024;

void Gemv(const CpuContext& ctx, const Tensor& x, const Tensor& w, const float* bias,
          const Tensor& y) {
  const int64_t n = x.rows();
  const int64_t k = x.cols();
  const int64_t m = w.dim(0);
  const int64_t row_bytes = std::max<int64_t>(1, w.row_bytes());
  const int64_t unit_bytes =
      std::clamp(m * row_bytes / (16 * ctx.threads()), kGemvMinUnitBytes, kGemvMaxUnitBytes);
  const int64_t rows_per_unit = std::max<int64_t>(4, unit_bytes / row_bytes);
  const int64_t units = n * m * k < kMinParallelMacs ? 1 : (m + rows_per_unit - 1) / rows_per_unit;
  const int64_t unit_rows = (m + units - 1) / units;
  const float* xp = x.data_as<const float>();
  float* yp = y.data_as<float>();
  const float* xsum = nullptr;
  if (GemvNeedsSegmentSums(w.dtype())) {
    ctx.workspace->ReserveShared(n * (k / 32));
    SegmentSums(xp, k, static_cast<int>(n), k, ctx.workspace->shared());
    xsum = ctx.workspace->shared();
  }
  const int64_t segs = k / 32;
  // Contiguous blocks of units per thread: each thread streams one region of the weights, and
  // the row prefetch of one unit runs on into the next.
  ParallelUnitsContiguous(*ctx.pool, units, [&](int, int64_t u) {
    const int64_t j0 = u * unit_rows;
    const int64_t j1 = std::min(m, j0 + unit_rows);
    for (int64_t r = 0; j0 < j1 && r < n; r += kGemvMaxRows) {
      const int nr = static_cast<int>(std::min<int64_t>(kGemvMaxRows, n - r));
      GemvRows(w.dtype(), w.data(), k, xp + r * k, k, nr,
               xsum != nullptr ? xsum + r * segs : nullptr, bias, yp + r * m, m, j0, j1, m);
    }
  });
}

void Gemm(const CpuContext& ctx, const Tensor& x, const Tensor& w, const float* bias,
          const Tensor& y) {
  const int64_t n = x.rows();
  const int64_t k = x.cols();
  const int64_t m = w.dim(0);
  const int threads = ctx.threads();
  // Panels of up to kPanelMaxElems, their count a multiple of the thread count so that the
  // last round of panels does not leave a core idle.
  const int64_t max_rows = std::max<int64_t>(16, kPanelMaxElems / k);
  const int64_t rounds = (m + max_rows * threads - 1) / (max_rows * threads);
  int64_t panels = std::min<int64_t>(rounds * threads, (m + 15) / 16);
  if (n * m * k < kMinParallelMacs) panels = 1;
  int64_t panel_rows = (m + panels - 1) / panels;
  panel_rows = std::min(m, (panel_rows + 15) / 16 * 16);
  panels = (m + panel_rows - 1) / panel_rows;

  const bool dequant = w.dtype() != DType::kF32;
  if (dequant) ctx.workspace->ReservePerThread(panel_rows * k);
  const float* xp = x.data_as<const float>();
  float* yp = y.data_as<float>();
  ParallelUnits(*ctx.pool, panels, [&](int thread, int64_t p) {
    const int64_t j0 = p * panel_rows;
    const int64_t rows = std::min(m, j0 + panel_rows) - j0;
    const float* panel;
    if (dequant) {
      float* buf = ctx.workspace->thread_buffer(thread);
      DequantizeRows(w.dtype(), w.data(), k, j0, j0 + rows, buf);
      panel = buf;
    } else {
      panel = w.data_as<const float>() + j0 * k;
    }
    float* yc = yp + j0;
    float beta = 0.0f;
    if (bias != nullptr) {
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(yc + i * m, bias + j0, static_cast<size_t>(rows) * sizeof(float));
      }
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
                static_cast<int>(rows), static_cast<int>(k), 1.0f, xp, static_cast<int>(k), panel,
                static_cast<int>(k), beta, yc, static_cast<int>(m));
  });
}

}  // namespace

void MatMulCpu(const CpuContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias,
               const Tensor& y) {
  ICECACHE_CHECK(x.device() == Device::kCpu && w.device() == Device::kCpu &&
                 y.device() == Device::kCpu);
  ICECACHE_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32);
  ICECACHE_CHECK(CpuWeightTypeSupported(w.dtype()));
  ICECACHE_CHECK(bias == nullptr || bias->dtype() == DType::kF32);
  const float* b = bias != nullptr ? bias->data_as<const float>() : nullptr;
  const int64_t n = x.rows();
  const int64_t m = w.dim(0);
  if (n == 0 || m == 0) return;
  if (x.cols() == 0) {
    float* yp = y.data_as<float>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) yp[i * m + j] = b != nullptr ? b[j] : 0.0f;
    }
    return;
  }
  if (n <= kGemvMaxBatch) {
    Gemv(ctx, x, w, b, y);
  } else {
    Gemm(ctx, x, w, b, y);
  }
}

}  // namespace icecache::cpu
