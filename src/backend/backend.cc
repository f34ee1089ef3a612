#include "backend/backend.h"

#include "core/check.h"

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

void Backend::Attention(const AttentionArgs& args) {
  ICECACHE_CHECK(args.q.ndim() == 3 && SameShape(args.q, args.out));
  ICECACHE_CHECK(args.q.dim(1) == args.n_heads && args.q.dim(2) == args.pool.head_dim);
  ICECACHE_CHECK(args.n_kv_heads > 0 && args.n_heads % args.n_kv_heads == 0);
  ICECACHE_CHECK(args.positions.numel() == args.q.dim(0));
  ICECACHE_CHECK(args.row_base.numel() == args.q.dim(0));
  DoAttention(args);
}

void Backend::CopyPages(const KvPoolView& src, const KvPoolView& dst, const Tensor& src_ids,
                        const Tensor& dst_ids) {
  ICECACHE_CHECK(src.page_size == dst.page_size && src.head_dim == dst.head_dim);
  ICECACHE_CHECK(src.dtype == dst.dtype);
  ICECACHE_CHECK(src_ids.dtype() == DType::kI32 && dst_ids.dtype() == DType::kI32);
  ICECACHE_CHECK(src_ids.numel() == dst_ids.numel());
  DoCopyPages(src, dst, src_ids, dst_ids);
}

void Backend::FillRandom(const Tensor& t, uint64_t seed, float scale, float offset) {
  ICECACHE_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16);
  DoFillRandom(t, seed, scale, offset);
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
