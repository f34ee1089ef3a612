// The ops of the CUDA backend: dtype and placement checks, then the kernel launchers of
// src/kernels/cuda (no CUDA headers here).
#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_matmul.h"
#include "core/check.h"

namespace icecache::cuda {

namespace {

using kernels::ElemType;

ElemType Elem(const Tensor& t) {
  ICECACHE_CHECK_MSG(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
                     "CUDA backend: tensors must be f32 or bf16");
  return t.dtype() == DType::kF32 ? ElemType::kF32 : ElemType::kBF16;
}

void OnDevice(const Tensor& t) {
  ICECACHE_CHECK_MSG(t.device() == Device::kCuda, "CUDA backend: tensor is not in GPU memory");
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether x w^T runs as the small-batch GEMV (else cuBLASLt): few rows, bf16, 16-byte rows.
bool GemvFits(const Tensor& x, const Tensor& w) {
  return x.rows() <= kernels::kGemvMaxRows && w.dim(1) % 8 == 0 && x.dtype() == DType::kBF16 &&
         w.dtype() == DType::kBF16 && Aligned16(x.data()) && Aligned16(w.data());
}

// The kernel parameters of an attention call, after the CUDA kernels' own checks.
kernels::AttentionParams ToParams(const AttentionArgs& a) {
  OnDevice(a.q);
  ICECACHE_CHECK_MSG(a.q.dtype() == DType::kBF16 && a.out.dtype() == DType::kBF16,
                     "CUDA attention: q and out must be bf16");
  ICECACHE_CHECK_MSG(a.pool.dtype == DType::kBF16, "CUDA attention: the KV pool must be bf16");
  ICECACHE_CHECK_MSG(kernels::AttentionSupportsHeadDim(a.pool.head_dim),
                     "CUDA attention supports head_dim 64 and 128");
  kernels::AttentionParams p;
  p.q = a.q.data();
  p.out = a.out.data();
  p.q_pos = a.positions.data_as<const int32_t>();
  p.row_base = a.row_base.data_as<const int32_t>();
  p.indptr = a.table.indptr;
  p.indices = a.table.indices;
  p.lens = a.table.lens;
  p.num_rows = a.table.num_rows;
  p.pool_k = a.pool.k;
  p.pool_v = a.pool.v;
  p.pool_pos = a.pool.positions;
  p.num_pages = a.pool.num_pages;
  p.page_size = a.pool.page_size;
  p.n_tokens = static_cast<int>(a.q.dim(0));
  p.n_heads = a.n_heads;
  p.n_kv_heads = a.n_kv_heads;
  p.head_dim = a.pool.head_dim;
  p.scale = a.scale;
  p.causal = a.causal;
  return p;
}

kernels::KvWriteParams ToParams(const KvWriteArgs& a) {
  ICECACHE_CHECK_MSG(a.pool.dtype == DType::kBF16, "CUDA backend: the KV pool must be bf16");
  ICECACHE_CHECK(a.k.dtype() == a.v.dtype());
  kernels::KvWriteParams p;
  p.k = a.k.data();
  p.v = a.v.data();
  p.act_type = Elem(a.k);
  p.slots = a.slots.data_as<const int32_t>();
  p.positions = a.positions.data_as<const int32_t>();
  p.n_tokens = a.k.dim(0);
  p.kv_heads = a.k.dim(1);
  p.head_dim = a.k.dim(2);
  p.pool_k = a.pool.k;
  p.pool_v = a.pool.v;
  p.pool_pos = a.pool.positions;
  p.num_slots = a.pool.num_pages * a.pool.page_size;
  return p;
}

// Launches `launch` over `args` in chunks of up to kernels::kBatchCap, each entry's kernel
// parameters made by `params`.
template <class Args, class Params, class Launch>
void LaunchInBatches(std::span<const Args> args, Params params, Launch launch, const char* what) {
  kernels::ParamBatch<decltype(params(args[0]))> b;
  for (size_t i = 0; i < args.size(); i += kernels::kBatchCap) {
    b.n = static_cast<int>(std::min<size_t>(kernels::kBatchCap, args.size() - i));
    for (int k = 0; k < b.n; ++k) b.p[k] = params(args[i + k]);
    CheckCuda(launch(b), what);
  }
}

}  // namespace

void CudaBackend::DoMatMul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  OnDevice(x);
  OnDevice(w);
  OnDevice(y);
  ICECACHE_CHECK_MSG(x.dtype() == DType::kBF16 && w.dtype() == DType::kBF16,
                     "CUDA MatMul: x and w must be bf16");
  ICECACHE_CHECK(bias == nullptr || bias->dtype() == DType::kF32);
  const int64_t n = x.rows(), m = w.dim(0), k = w.dim(1);
  if (n == 0 || m == 0) return;
  const ElemType yt = Elem(y);
  const float* b = bias != nullptr ? bias->data_as<const float>() : nullptr;
  if (GemvFits(x, w)) {
    CheckCuda(kernels::LaunchGemv(stream(), x.data(), w.data(), b, y.data(), yt, n, m, k), "GEMV");
    return;
  }
  ICECACHE_CHECK_MSG(lane_ < 0, "matrix products are not lane work (one GEMM workspace)");
  const int st = (on_side_ ? side_gemm_ : gemm_)
                     ->Run(stream(), x.data(), w.data(), y.data(), yt == ElemType::kF32, n, m, k);
  ICECACHE_CHECK_MSG(st == 0, ("cuBLASLt matmul failed with status " + std::to_string(st) +
                               " for n=" + std::to_string(n) + " m=" + std::to_string(m) +
                               " k=" + std::to_string(k))
                                  .c_str());
  if (b != nullptr) CheckCuda(kernels::LaunchAddBias(stream(), y.data(), yt, b, n, m), "bias");
}

void CudaBackend::DoMatMulSplit(const Tensor& x, const Tensor& w, std::span<const Tensor> ys) {
  OnDevice(x);
  OnDevice(w);
  if (ys.size() > 3 || !GemvFits(x, w)) return Backend::DoMatMulSplit(x, w, ys);
  void* out[3];
  int64_t widths[3];
  for (size_t i = 0; i < ys.size(); ++i) {
    OnDevice(ys[i]);
    out[i] = ys[i].data();
    widths[i] = ys[i].cols();
  }
  CheckCuda(kernels::LaunchGemvSplit(stream(), x.data(), w.data(), out, widths,
                                     static_cast<int>(ys.size()), Elem(ys[0]), x.rows(), w.dim(1)),
            "GEMV (split)");
}

void CudaBackend::DoMatMulGlu(const Tensor& x, const Tensor& w, const Tensor& up,
                              const Tensor& out) {
  OnDevice(x);
  OnDevice(w);
  OnDevice(out);
  if (!GemvFits(x, w)) return Backend::DoMatMulGlu(x, w, up, out);
  CheckCuda(kernels::LaunchGemvGlu(stream(), x.data(), w.data(), out.data(), Elem(out), x.rows(),
                                   out.cols(), w.dim(1)),
            "GEMV (SwiGLU)");
}

void CudaBackend::DoEmbed(const Tensor& table, const Tensor& ids, const Tensor& out) {
  OnDevice(table);
  OnDevice(ids);
  OnDevice(out);
  CheckCuda(kernels::LaunchEmbed(stream(), table.data(), Elem(table), table.dim(0),
                                 ids.data_as<const int32_t>(), ids.numel(), table.dim(1),
                                 out.data(), Elem(out)),
            "Embed");
}

void CudaBackend::DoRmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
  OnDevice(x);
  OnDevice(w);
  ICECACHE_CHECK_MSG(w.dtype() == DType::kF32, "CUDA RmsNorm: norm weights must be f32");
  CheckCuda(kernels::LaunchRmsNorm(stream(), x.data(), Elem(x), w.data_as<const float>(), eps,
                                   x.rows(), x.cols(), out.data(), Elem(out)),
            "RmsNorm");
}

void CudaBackend::DoAddRmsNorm(const Tensor& a, const Tensor& inout, const Tensor& w, float eps,
                               const Tensor& out) {
  OnDevice(a);
  OnDevice(inout);
  ICECACHE_CHECK_MSG(w.dtype() == DType::kF32, "CUDA RmsNorm: norm weights must be f32");
  ICECACHE_CHECK(a.dtype() == inout.dtype() && out.dtype() == inout.dtype());
  CheckCuda(kernels::LaunchAddRmsNorm(stream(), a.data(), inout.data(), Elem(inout),
                                      w.data_as<const float>(), eps, inout.rows(), inout.cols(),
                                      out.data()),
            "AddRmsNorm");
}

void CudaBackend::DoAdd(const Tensor& a, const Tensor& inout) {
  OnDevice(a);
  ICECACHE_CHECK(a.dtype() == inout.dtype());
  CheckCuda(kernels::LaunchAdd(stream(), a.data(), inout.data(), Elem(inout), inout.numel()),
            "Add");
}

void CudaBackend::DoRope(const Tensor& positions, const Tensor& inv_freq, const Tensor& x) {
  OnDevice(x);
  OnDevice(positions);
  CheckCuda(kernels::LaunchRope(stream(), positions.data_as<const int32_t>(),
                                inv_freq.data_as<const float>(), x.data(), Elem(x), x.dim(0),
                                x.dim(1), x.dim(2)),
            "Rope");
}

void CudaBackend::DoSwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  OnDevice(gate);
  ICECACHE_CHECK(gate.dtype() == up.dtype() && gate.dtype() == out.dtype());
  CheckCuda(
      kernels::LaunchSwiGlu(stream(), gate.data(), up.data(), out.data(), Elem(out), out.numel()),
      "SwiGlu");
}

void CudaBackend::DoWriteKv(const KvWriteArgs& args) {
  OnDevice(args.k);
  CheckCuda(kernels::LaunchRopeWriteKv(stream(), nullptr, nullptr, 0, ToParams(args)), "WriteKv");
}

void CudaBackend::DoRopeWriteKv(const Tensor& inv_freq, const Tensor& q, const KvWriteArgs& args) {
  OnDevice(q);
  OnDevice(args.k);
  ICECACHE_CHECK(q.dtype() == args.k.dtype());
  CheckCuda(kernels::LaunchRopeWriteKv(stream(), inv_freq.data_as<const float>(), q.data(),
                                       q.dim(1), ToParams(args)),
            "RopeWriteKv");
}

void CudaBackend::DoAttention(const AttentionArgs& args) {
  const kernels::AttentionParams p = ToParams(args);
  if (p.n_tokens == 0) return;
  // One query per sequence (decode) or a few: split-KV decode kernel; runs of many queries
  // per row (prefill chunks): the tensor-core kernel. Both are exact for any mapping.
  const int64_t seqs = std::max<int64_t>(1, p.num_rows / std::max(1, p.n_kv_heads));
  if (p.n_tokens < 4 * seqs) {
    // A lane's workspace is a slice of the main one: the splits stay those of the main one
    // whenever they fit the slice, so that a sequence's result does not depend on lanes.
    const int splits = kernels::DecodeSplits(p, decode_ws(), num_sms_);
    CheckCuda(kernels::LaunchDecodeAttention(stream(), p, splits, decode_ws()), "decode attention");
  } else {
    CheckCuda(kernels::LaunchPrefillAttention(stream(), p), "prefill attention");
  }
}

void CudaBackend::DoAttentionBatch(std::span<const AttentionArgs> args) {
  // Decode tokens of separate calls (Backend::AttentionBatch): runs of entries of one head shape,
  // up to kBatchCap per launch, each launch split as one call of that many tokens would be (as the
  // workspace left allows).
  // Consecutive decode launches may overlap (programmatic dependent launch), so each takes the
  // workspace past the one before it.
  kernels::ParamBatch<kernels::AttentionParams> b;
  kernels::DecodeWorkspace ws = decode_ws();
  auto launch = [&] {
    if (b.n == 0) return;
    kernels::AttentionParams shape = b.p[0];
    shape.n_tokens = b.n;
    const int splits = kernels::DecodeSplits(shape, ws, num_sms_);
    CheckCuda(kernels::LaunchDecodeAttentionBatch(stream(), b, splits, ws),
              "decode attention (batch)");
    kernels::SkipDecodeWorkspace(shape, splits, &ws);
    b.n = 0;
  };
  for (const AttentionArgs& a : args) {
    const kernels::AttentionParams p = ToParams(a);
    if (b.n == kernels::kBatchCap ||
        (b.n > 0 && (p.n_heads != b.p[0].n_heads || p.n_kv_heads != b.p[0].n_kv_heads ||
                     p.head_dim != b.p[0].head_dim))) {
      launch();
    }
    b.p[b.n++] = p;
  }
  launch();
}

void CudaBackend::DoCopyPages(const KvPoolView& src, const KvPoolView& dst, const Tensor& src_ids,
                              const Tensor& dst_ids) {
  OnDevice(src_ids);
  OnDevice(dst_ids);
  ICECACHE_CHECK_MSG(src.dtype == DType::kBF16, "CUDA CopyPages: the KV pool must be bf16");
  CheckCuda(kernels::LaunchCopyPages(
                stream(), src.k, src.v, src.positions, src.num_pages, dst.k, dst.v, dst.positions,
                dst.num_pages, src_ids.data_as<const int32_t>(), dst_ids.data_as<const int32_t>(),
                src_ids.numel(), src.page_size, src.head_dim),
            "CopyPages");
}

void CudaBackend::DoFillRandom(const Tensor& t, uint64_t seed, float scale, float offset) {
  OnDevice(t);
  CheckCuda(kernels::LaunchFillRandom(stream(), t.data(), Elem(t), t.numel(), seed, scale, offset),
            "FillRandom");
}

void CudaBackend::DoScatterI32(const Tensor& index, const Tensor& values, const Tensor& dst) {
  OnDevice(index);
  OnDevice(values);
  OnDevice(dst);
  CheckCuda(kernels::LaunchScatterI32(stream(), index.data_as<const int32_t>(),
                                      values.data_as<const int32_t>(), index.numel(),
                                      dst.data_as<int32_t>(), dst.numel()),
            "ScatterI32");
}

void CudaBackend::DoPageBounds(const PageBoundsArgs& args) {
  OnDevice(args.ids);
  OnDevice(args.lens);
  OnDevice(args.rows);
  OnDevice(args.bounds);
  ICECACHE_CHECK_MSG(args.pool.dtype == DType::kBF16, "CUDA PageBounds: the KV pool must be bf16");
  kernels::PageBoundsParams p;
  p.pool_k = args.pool.k;
  p.pool_pages = args.pool.num_pages;
  p.page_size = args.pool.page_size;
  p.head_dim = args.pool.head_dim;
  p.ids = args.ids.data_as<const int32_t>();
  p.lens = args.lens.data_as<const int32_t>();
  p.summary_rows = args.rows.data_as<const int32_t>();
  p.n = args.ids.numel();
  p.bounds = args.bounds.data();
  p.summaries = args.bounds.dim(0);
  p.rows = static_cast<int>(args.bounds.dim(1));
  if (p.rows == 1) {
    OnDevice(args.spread);
    p.spread = args.spread.data_as<float>();
  }
  if (!args.resident.empty()) {
    for (const Tensor* t : {&args.resident, &args.slot_page, &args.slot_len}) OnDevice(*t);
    p.resident = args.resident.data_as<const int32_t>();
    p.slot_page = args.slot_page.data_as<const int32_t>();
    p.slot_len = args.slot_len.data_as<int32_t>();
    p.slot_pages = args.slot_page.numel();
  }
  CheckCuda(kernels::LaunchPageBounds(stream(), p), "PageBounds");
}

void CudaBackend::DoRouteKeys(const KeyRouteArgs& args) {
  for (const Tensor* t : {&args.slots, &args.ranges, &args.list_rows, &args.bounds, &args.out}) {
    OnDevice(*t);
  }
  ICECACHE_CHECK_MSG(args.pool.dtype == DType::kBF16, "CUDA RouteKeys: the KV pool must be bf16");
  kernels::KeyRouteParams p;
  p.pool_k = args.pool.k;
  p.pool_slots = args.pool.num_pages * args.pool.page_size;
  p.head_dim = args.pool.head_dim;
  p.slots = args.slots.data_as<const int32_t>();
  p.ranges = args.ranges.data_as<const int32_t>();
  p.list_rows = args.list_rows.data_as<const int32_t>();
  p.rows = static_cast<int>(args.list_rows.dim(0));
  p.stride = static_cast<int>(args.list_rows.dim(1));
  p.bounds = args.bounds.data();
  p.summaries = args.bounds.dim(0);
  p.out = args.out.data_as<int32_t>();
  p.n = args.slots.numel();
  CheckCuda(kernels::LaunchRouteKeys(stream(), p), "RouteKeys");
}

kernels::PageSelectParams CudaBackend::SelectParams(const PageSelectArgs& args) {
  for (const Tensor* t :
       {&args.q, &args.list_ids, &args.list_lens, &args.list_rows, &args.limits, &args.bounds,
        &args.scores, &args.out_ids, &args.out_lens, &args.out_count}) {
    OnDevice(*t);
  }
  ICECACHE_CHECK_MSG(args.q.dtype() == DType::kBF16 &&
                         (args.bounds.dim(1) == 1 || args.bounds.dtype() == DType::kBF16),
                     "CUDA SelectPages: queries and min/max bounds must be bf16");
  kernels::PageSelectParams p;
  p.q = args.q.data();
  p.list_ids = args.list_ids.data_as<const int32_t>();
  p.list_lens = args.list_lens.data_as<const int32_t>();
  p.list_rows = args.list_rows.data_as<const int32_t>();
  p.stride = static_cast<int>(args.list_ids.dim(1));
  p.limits = args.limits.data_as<const int32_t>();
  p.bounds = args.bounds.data();
  p.summaries = args.bounds.dim(0);
  p.bound_rows = static_cast<int>(args.bounds.dim(1));
  if (p.bound_rows == 1) {
    OnDevice(args.spread);
    p.spread = args.spread.data_as<const float>();
  }
  p.scores = args.scores.data_as<float>();
  p.out_ids = args.out_ids.data_as<int32_t>();
  p.out_lens = args.out_lens.data_as<int32_t>();
  p.out_count = args.out_count.data_as<int32_t>();
  p.out_stride = static_cast<int>(args.out_ids.dim(1));
  p.rows = static_cast<int>(args.list_ids.dim(0));
  p.group = args.n_heads / p.rows;
  p.head_dim = static_cast<int>(args.bounds.dim(2));
  return p;
}

void CudaBackend::DoSelectPages(const PageSelectArgs& args) {
  CheckCuda(kernels::LaunchSelectPages(stream(), SelectParams(args)), "SelectPages");
}

void CudaBackend::DoSelectPagesBatch(std::span<const PageSelectArgs> args) {
  LaunchInBatches(
      args, [this](const PageSelectArgs& a) { return SelectParams(a); },
      [this](const auto& b) { return kernels::LaunchSelectPagesBatch(stream(), b); },
      "SelectPages (batch)");
}

kernels::PageMapParams CudaBackend::MapParams(const PageMapArgs& args) {
  for (const Tensor* t :
       {&args.sel_ids, &args.sel_lens, &args.sel_count, &args.resident, &args.slot_page,
        &args.slot_len, &args.table, &args.fetch, &args.counters}) {
    OnDevice(*t);
  }
  ICECACHE_CHECK_MSG(args.host.dtype == DType::kBF16, "CUDA MapPages: the KV pools must be bf16");
  kernels::PageMapParams p;
  p.sel_ids = args.sel_ids.data_as<const int32_t>();
  p.sel_lens = args.sel_lens.data_as<const int32_t>();
  p.sel_count = args.sel_count.data_as<const int32_t>();
  p.stride = static_cast<int>(args.sel_ids.dim(1));
  p.rows = static_cast<int>(args.sel_ids.dim(0));
  p.first_group = args.first_group;
  p.capacity = args.capacity;
  p.host_k = args.host.k;
  p.host_v = args.host.v;
  p.host_pos = args.host.positions;
  p.host_pages = args.host.num_pages;
  p.slot_k = args.slots.k;
  p.slot_v = args.slots.v;
  p.slot_pos = args.slots.positions;
  p.slot_pages = args.slots.num_pages;
  p.page_size = args.host.page_size;
  p.head_dim = args.host.head_dim;
  p.resident = args.resident.data_as<int32_t>();
  p.slot_page = args.slot_page.data_as<int32_t>();
  p.slot_len = args.slot_len.data_as<int32_t>();
  p.table = args.table.data_as<int32_t>();
  p.fetch = args.fetch.data_as<int32_t>();
  p.counters = reinterpret_cast<unsigned long long*>(args.counters.data());
  if (!args.slot_used.empty()) {
    OnDevice(args.slot_used);
    p.slot_used = args.slot_used.data_as<int32_t>();
  }
  p.clock = args.clock;
  if (!args.defer_limits.empty()) p.defer_limits = args.defer_limits.data_as<const int32_t>();
  p.defer_after = args.defer_after;
  p.stage = static_cast<int>(args.stage);
  if (!args.pending.empty()) {
    OnDevice(args.pending);
    p.pending = args.pending.data_as<const int32_t>();
    p.prefetch_pages = args.prefetch_pages;
  }
  return p;
}

void CudaBackend::DoMapPages(const PageMapArgs& args) {
  CheckCuda(kernels::LaunchMapPages(stream(), MapParams(args)), "MapPages");
}

void CudaBackend::DoMapPagesBatch(std::span<const PageMapArgs> args) {
  LaunchInBatches(
      args, [this](const PageMapArgs& a) { return MapParams(a); },
      [this](const auto& b) { return kernels::LaunchMapPagesBatch(stream(), b); },
      "MapPages (batch)");
}

}  // namespace icecache::cuda
