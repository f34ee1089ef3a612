#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backend/cpu/quant_dot.h"
#include "core/check.h"

namespace icecache {

namespace cpu {

void AlignedBuffer::Free::operator()(float* p) const { std::free(p); }

void AlignedBuffer::Reserve(int64_t floats) {
  if (floats <= size_) return;
  // Grow geometrically so that a slowly growing demand (longer contexts) reallocates rarely.
  const int64_t n = std::max<int64_t>(floats, size_ + size_ / 2);
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  ICECACHE_CHECK_MSG(p != nullptr, "out of memory for CPU scratch");
  data_.reset(p);
  size_ = n;
}

void Workspace::ReservePerThread(int64_t floats) {
  for (auto& b : per_thread_) b.Reserve(floats);
}

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : pool_(options.threads), workspace_(pool_.size()) {
  // All parallelism comes from our pool; OpenBLAS runs on whichever thread calls it.
  static std::once_flag blas_once;
  std::call_once(blas_once, [] { openblas_set_num_threads(1); });
}

std::string CpuBackend::Describe() const {
  return "cpu (" + std::to_string(pool_.size()) + " threads, AVX2)";
}

Result<Tensor> CpuBackend::Allocate(DType dtype, std::span<const int64_t> shape) {
  // Large tensors (KV pools, long-lived buffers) come from anonymous mappings: zero-filled by
  // the OS, committed page by page on first write (a large KV capacity costs address space, not
  // RAM) and backed by transparent huge pages where the kernel allows, which keeps TLB misses
  // out of attention's scattered page reads.
  constexpr int64_t kMapThreshold = 4 << 20;
  int64_t elems = 1;
  for (int64_t d : shape) elems = d < 0 ? -1 : elems * d;
  const int64_t inner = shape.empty() ? 1 : shape.back();
  if (elems < 0 || shape.size() > static_cast<size_t>(Tensor::kMaxDims) || inner == 0 ||
      inner % BlockElems(dtype) != 0) {
    return Tensor::Host(dtype, shape);  // reports the error
  }
  const int64_t bytes = elems / inner * RowBytes(dtype, inner);
  if (bytes < kMapThreshold) return Tensor::Host(dtype, shape);
  const size_t len = static_cast<size_t>(bytes);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhausted("cannot map " + std::to_string(bytes) + " bytes of host memory");
  }
  madvise(p, len, MADV_HUGEPAGE);  // advisory; failure only costs speed
  std::shared_ptr<void> owner(p, [len](void* q) { munmap(q, len); });
  return Tensor(p, dtype, shape, Device::kCpu, std::move(owner));
}

Status CpuBackend::Copy(const Tensor& src, const Tensor& dst) {
  if (src.device() != Device::kCpu || dst.device() != Device::kCpu) {
    return Unsupported(std::string("CPU backend: cannot copy ") + DeviceName(src.device()) +
                       " -> " + DeviceName(dst.device()));
  }
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel()) {
    return InvalidArgument("copy " + std::string(DTypeName(src.dtype())) + src.ShapeString() +
                           " -> " + std::string(DTypeName(dst.dtype())) + dst.ShapeString() +
                           ": dtype or size differs");
  }
  if (src.data() != dst.data() && src.nbytes() > 0) {
    std::memmove(dst.data(), src.data(), static_cast<size_t>(src.nbytes()));
  }
  return Status::Ok();
}

Status CpuBackend::CopyBlocks(const void* src, void* dst, int64_t count, int64_t block_bytes,
                              int64_t src_pitch, int64_t dst_pitch) {
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(static_cast<char*>(dst) + i * dst_pitch,
                static_cast<const char*>(src) + i * src_pitch, static_cast<size_t>(block_bytes));
  }
  return Status::Ok();
}

Result<Tensor> CpuBackend::PrepareWeight(const Tensor& host_weight) {
  if (host_weight.device() != Device::kCpu) {
    return InvalidArgument("CPU backend: weight is not in host memory");
  }
  if (!CpuWeightTypeSupported(host_weight.dtype())) {
    return Unsupported("CPU backend: weights of dtype " +
                       std::string(DTypeName(host_weight.dtype())) + " are not supported");
  }
  return host_weight;  // borrowed as is: the kernels read every supported format directly
}

void CpuBackend::DoMatMul(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  MatMulCpu(context(), x, w, bias, y);
}
void CpuBackend::DoEmbed(const Tensor& table, const Tensor& ids, const Tensor& out) {
  EmbedCpu(context(), table, ids, out);
}
void CpuBackend::DoRmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
  RmsNormCpu(context(), x, w, eps, out);
}
void CpuBackend::DoAdd(const Tensor& a, const Tensor& inout) { AddCpu(context(), a, inout); }
void CpuBackend::DoRope(const Tensor& positions, const Tensor& inv_freq, const Tensor& x) {
  RopeCpu(context(), positions, inv_freq, x);
}
void CpuBackend::DoSwiGlu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  SwiGluCpu(context(), gate, up, out);
}
void CpuBackend::DoWriteKv(const KvWriteArgs& args) { WriteKvCpu(context(), args); }
void CpuBackend::DoAttention(const AttentionArgs& args) { AttentionCpu(context(), args); }
void CpuBackend::DoCopyPages(const KvPoolView& src, const KvPoolView& dst, const Tensor& src_ids,
                             const Tensor& dst_ids) {
  CopyPagesCpu(context(), src, dst, src_ids, dst_ids);
}
void CpuBackend::DoFillRandom(const Tensor& t, uint64_t seed, float scale, float offset) {
  FillRandomCpu(context(), t, seed, scale, offset);
}

void CpuBackend::DoScatterI32(const Tensor& index, const Tensor& values, const Tensor& dst) {
  const int32_t* idx = index.data_as<int32_t>();
  const int32_t* val = values.data_as<int32_t>();
  int32_t* out = dst.data_as<int32_t>();
  for (int64_t i = 0; i < index.numel(); ++i) {
    ICECACHE_CHECK_MSG(idx[i] >= 0 && idx[i] < dst.numel(), "ScatterI32: index out of range");
    out[idx[i]] = val[i];
  }
}

void CpuBackend::DoPageBounds(const PageBoundsArgs& args) { PageBoundsCpu(args); }
void CpuBackend::DoSelectPages(const PageSelectArgs& args) { SelectPagesCpu(args); }
void CpuBackend::DoMapPages(const PageMapArgs& args) { MapPagesCpu(args); }
void CpuBackend::DoRouteKeys(const KeyRouteArgs& args) { RouteKeysCpu(args); }

}  // namespace cpu

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<cpu::CpuBackend>(options);
}

}  // namespace icecache
