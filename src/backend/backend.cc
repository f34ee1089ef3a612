#include "backend/backend.h"

#include "core/check.h"
#include "kv/key_mean.h"

namespace icecache {

namespace {
bool SameShape(const Tensor& a, const Tensor& b) {
  if (a.ndim() != b.ndim()) return false;
  for (int i = 0; i < a.ndim(); ++i) {
    if (a.dim(i) != b.dim(i)) return false;
  }
  return true;
}
}  // namespace

void Backend::MatMul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  ICECACHE_CHECK(w.ndim() == 2);
  ICECACHE_CHECK(x.cols() == w.dim(1));
  ICECACHE_CHECK(y.cols() == w.dim(0) && y.rows() == x.rows());
  ICECACHE_CHECK(bias == nullptr || bias->numel() == w.dim(0));
  DoMatMul(x, w, bias, y);
}

void Backend::MatMulSplit(const Tensor& x, const Tensor& w, std::span<const Tensor> ys) {
  ICECACHE_CHECK(w.ndim() == 2 && x.cols() == w.dim(1) && !ys.empty());
  int64_t rows = 0;
  for (const Tensor& y : ys) {
    ICECACHE_CHECK(y.rows() == x.rows() && y.dtype() == ys[0].dtype());
    rows += y.cols();
  }
  ICECACHE_CHECK(rows == w.dim(0));
  DoMatMulSplit(x, w, ys);
}

void Backend::MatMulGlu(const Tensor& x, const Tensor& w, const Tensor& up, const Tensor& out) {
  ICECACHE_CHECK(w.ndim() == 2 && x.cols() == w.dim(1) && w.dim(0) == 2 * out.cols());
  ICECACHE_CHECK(out.rows() == x.rows() && SameShape(up, out) && up.dtype() == out.dtype());
  DoMatMulGlu(x, w, up, out);
}

void Backend::Embed(const Tensor& table, const Tensor& ids, const Tensor& out) {
  ICECACHE_CHECK(table.ndim() == 2 && ids.dtype() == DType::kI32);
  ICECACHE_CHECK(out.rows() == ids.numel() && out.cols() == table.dim(1));
  DoEmbed(table, ids, out);
}

void Backend::RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
  ICECACHE_CHECK(x.cols() == w.numel() && SameShape(x, out));
  DoRmsNorm(x, w, eps, out);
}

void Backend::Add(const Tensor& a, const Tensor& inout) {
  ICECACHE_CHECK(a.numel() == inout.numel());
  DoAdd(a, inout);
}

void Backend::Rope(const Tensor& positions, const Tensor& inv_freq, const Tensor& x) {
  ICECACHE_CHECK(x.ndim() == 3 && positions.numel() == x.dim(0));
  ICECACHE_CHECK(positions.dtype() == DType::kI32 && inv_freq.dtype() == DType::kF32);
  ICECACHE_CHECK(inv_freq.numel() * 2 == x.dim(2));
  DoRope(positions, inv_freq, x);
}

void Backend::SwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  ICECACHE_CHECK(SameShape(gate, up) && gate.numel() == out.numel());
  DoSwiGlu(gate, up, out);
}

void Backend::WriteKv(const KvWriteArgs& args) {
  ICECACHE_CHECK(args.k.ndim() == 3 && SameShape(args.k, args.v));
  ICECACHE_CHECK(args.k.dim(2) == args.pool.head_dim);
  ICECACHE_CHECK(args.slots.numel() == args.k.dim(0) * args.k.dim(1));
  ICECACHE_CHECK(args.positions.numel() == args.k.dim(0));
  DoWriteKv(args);
}

namespace {

void CheckAttention(const AttentionArgs& args) {
  ICECACHE_CHECK(args.q.ndim() == 3 && SameShape(args.q, args.out));
  ICECACHE_CHECK(args.q.dim(1) == args.n_heads && args.q.dim(2) == args.pool.head_dim);
  ICECACHE_CHECK(args.n_kv_heads > 0 && args.n_heads % args.n_kv_heads == 0);
  ICECACHE_CHECK(args.positions.numel() == args.q.dim(0));
  ICECACHE_CHECK(args.row_base.numel() == args.q.dim(0));
}

}  // namespace

void Backend::Attention(const AttentionArgs& args) {
  CheckAttention(args);
  DoAttention(args);
}

void Backend::AttentionBatch(std::span<const AttentionArgs> args) {
  for (const AttentionArgs& a : args) {
    CheckAttention(a);
    ICECACHE_CHECK(a.q.dim(0) == 1);
  }
  if (!args.empty()) DoAttentionBatch(args);
}

void Backend::CopyPages(const KvPoolView& src, const KvPoolView& dst, const Tensor& src_ids,
                        const Tensor& dst_ids) {
  ICECACHE_CHECK(src.page_size == dst.page_size && src.head_dim == dst.head_dim);
  ICECACHE_CHECK(src.dtype == dst.dtype);
  ICECACHE_CHECK(src_ids.dtype() == DType::kI32 && dst_ids.dtype() == DType::kI32);
  ICECACHE_CHECK(src_ids.numel() == dst_ids.numel());
  DoCopyPages(src, dst, src_ids, dst_ids);
}

void Backend::PageBounds(const PageBoundsArgs& args) {
  ICECACHE_CHECK(args.ids.dtype() == DType::kI32 && args.lens.dtype() == DType::kI32);
  ICECACHE_CHECK(args.ids.numel() == args.lens.numel() && args.rows.numel() == args.ids.numel());
  ICECACHE_CHECK(args.rows.dtype() == DType::kI32);
  ICECACHE_CHECK(args.bounds.ndim() == 3 && args.bounds.dim(2) == args.pool.head_dim);
  ICECACHE_CHECK(args.bounds.dim(1) == 2
                     ? args.bounds.dtype() == args.pool.dtype
                     : args.bounds.dim(1) == 1 && args.bounds.dtype() == kMeanKeyDType &&
                           MeanKeyFits(args.pool.head_dim));
  ICECACHE_CHECK(args.bounds.dim(1) == 2 ||
                 (args.spread.dtype() == DType::kF32 && args.spread.numel() == args.bounds.dim(0)));
  ICECACHE_CHECK(args.resident.empty() || (args.resident.numel() == args.pool.num_pages &&
                                           args.slot_page.numel() == args.slot_len.numel()));
  DoPageBounds(args);
}

namespace {

void CheckSelectPages(const PageSelectArgs& args) {
  const int64_t rows = args.list_ids.dim(0);
  ICECACHE_CHECK(args.list_ids.ndim() == 2 && SameShape(args.list_ids, args.list_lens));
  ICECACHE_CHECK(args.limits.numel() == rows * 5 && args.limits.dtype() == DType::kI32);
  ICECACHE_CHECK(args.scores.numel() == args.list_ids.numel());
  ICECACHE_CHECK(args.out_ids.ndim() == 2 && args.out_ids.dim(0) == rows);
  ICECACHE_CHECK(SameShape(args.out_ids, args.out_lens) && args.out_count.numel() == rows);
  ICECACHE_CHECK(rows > 0 && args.n_heads % rows == 0);
  ICECACHE_CHECK(args.q.numel() % args.n_heads == 0);
  ICECACHE_CHECK(SameShape(args.list_ids, args.list_rows) && args.list_rows.dtype() == DType::kI32);
  ICECACHE_CHECK(args.bounds.ndim() == 3 && (args.bounds.dim(1) == 1 || args.bounds.dim(1) == 2));
  ICECACHE_CHECK(args.bounds.dim(1) == 2 ||
                 (args.bounds.dtype() == kMeanKeyDType && args.spread.dtype() == DType::kF32 &&
                  args.spread.numel() == args.bounds.dim(0)));
  ICECACHE_CHECK(args.q.numel() == args.n_heads * args.bounds.dim(2));
}

void CheckMapPages(const PageMapArgs& args) {
  const int64_t rows = args.sel_ids.dim(0), stride = args.sel_ids.dim(1);
  ICECACHE_CHECK(args.sel_ids.ndim() == 2 && SameShape(args.sel_ids, args.sel_lens));
  ICECACHE_CHECK(args.sel_count.numel() == rows);
  ICECACHE_CHECK(args.host.page_size == args.slots.page_size);
  ICECACHE_CHECK(args.host.head_dim == args.slots.head_dim && args.host.dtype == args.slots.dtype);
  ICECACHE_CHECK(args.capacity > 0 && args.first_group >= 0);
  ICECACHE_CHECK((args.first_group + rows) * args.capacity <= args.slots.num_pages);
  ICECACHE_CHECK(args.resident.numel() == args.host.num_pages);
  ICECACHE_CHECK(args.slot_page.numel() == args.slots.num_pages);
  ICECACHE_CHECK(args.slot_len.numel() == args.slots.num_pages);
  ICECACHE_CHECK(args.table.numel() >= rows + 1 + 2 * rows * stride);
  ICECACHE_CHECK(args.fetch.numel() >= rows * (1 + 2 * int64_t{args.capacity}));
  ICECACHE_CHECK(args.counters.dtype() == DType::kI32 && args.counters.numel() >= 8);
  ICECACHE_CHECK(args.defer_limits.empty() ||
                 (args.counters.numel() >= 10 && args.defer_limits.dtype() == DType::kI32 &&
                  args.defer_limits.numel() == int64_t{rows} * 5));
  ICECACHE_CHECK(args.pending.empty() ||
                 (args.pending.dtype() == DType::kI32 && args.pending.numel() == rows));
  ICECACHE_CHECK(args.slot_used.empty() || (args.slot_used.dtype() == DType::kI32 &&
                                            args.slot_used.numel() == args.slots.num_pages));
}

}  // namespace

void Backend::SelectPages(const PageSelectArgs& args) {
  CheckSelectPages(args);
  DoSelectPages(args);
}

void Backend::MapPages(const PageMapArgs& args) {
  CheckMapPages(args);
  DoMapPages(args);
}

void Backend::RouteKeys(const KeyRouteArgs& args) {
  const int64_t n = args.slots.numel();
  ICECACHE_CHECK(args.slots.dtype() == DType::kI32 && args.out.dtype() == DType::kI32);
  ICECACHE_CHECK(args.ranges.dtype() == DType::kI32 && args.ranges.numel() == 3 * n);
  ICECACHE_CHECK(args.out.numel() == n);
  ICECACHE_CHECK(args.list_rows.dtype() == DType::kI32 && args.list_rows.ndim() == 2);
  ICECACHE_CHECK(args.bounds.ndim() == 3 && args.bounds.dim(1) == 1 &&
                 args.bounds.dtype() == kMeanKeyDType && args.bounds.dim(2) == args.pool.head_dim &&
                 MeanKeyFits(args.pool.head_dim));
  if (n > 0) DoRouteKeys(args);
}

void Backend::SelectPagesBatch(std::span<const PageSelectArgs> args) {
  for (const PageSelectArgs& a : args) CheckSelectPages(a);
  if (!args.empty()) DoSelectPagesBatch(args);
}

void Backend::MapPagesBatch(std::span<const PageMapArgs> args) {
  for (const PageMapArgs& a : args) CheckMapPages(a);
  if (!args.empty()) DoMapPagesBatch(args);
}

void Backend::FillRandom(const Tensor& t, uint64_t seed, float scale, float offset) {
  ICECACHE_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16);
  DoFillRandom(t, seed, scale, offset);
}

void Backend::ScatterI32(const Tensor& index, const Tensor& values, const Tensor& dst) {
  ICECACHE_CHECK(index.dtype() == DType::kI32 && values.dtype() == DType::kI32);
  ICECACHE_CHECK(dst.dtype() == DType::kI32 && index.numel() == values.numel());
  DoScatterI32(index, values, dst);
}

void Backend::AddRmsNorm(const Tensor& a, const Tensor& inout, const Tensor& w, float eps,
                         const Tensor& out) {
  ICECACHE_CHECK(a.numel() == inout.numel());
  ICECACHE_CHECK(inout.cols() == w.numel() && SameShape(inout, out));
  DoAddRmsNorm(a, inout, w, eps, out);
}

void Backend::RopeWriteKv(const Tensor& inv_freq, const Tensor& q, const KvWriteArgs& args) {
  ICECACHE_CHECK(q.ndim() == 3 && q.dim(0) == args.k.dim(0) && q.dim(2) == args.k.dim(2));
  ICECACHE_CHECK(args.positions.dtype() == DType::kI32 && inv_freq.dtype() == DType::kF32);
  ICECACHE_CHECK(inv_freq.numel() * 2 == q.dim(2));
  ICECACHE_CHECK(args.k.ndim() == 3 && SameShape(args.k, args.v));
  ICECACHE_CHECK(args.k.dim(2) == args.pool.head_dim);
  ICECACHE_CHECK(args.slots.numel() == args.k.dim(0) * args.k.dim(1));
  ICECACHE_CHECK(args.positions.numel() == args.k.dim(0));
  DoRopeWriteKv(inv_freq, q, args);
}

}  // namespace icecache
