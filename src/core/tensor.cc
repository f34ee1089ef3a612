#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "core/check.h"

namespace icecache {

const char* DeviceName(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

Tensor::Tensor(void* data, DType dtype, std::span<const int64_t> shape, Device device,
               std::shared_ptr<void> keepalive)
    : data_(data), dtype_(dtype), device_(device), keepalive_(std::move(keepalive)) {
  ICECACHE_CHECK(shape.size() <= static_cast<size_t>(kMaxDims));
  ndim_ = static_cast<int>(shape.size());
  for (int i = 0; i < ndim_; ++i) shape_[i] = shape[i];
  ICECACHE_CHECK(cols() % BlockElems(dtype) == 0);
}

Result<Tensor> Tensor::Host(DType dtype, std::span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxDims)) return InvalidArgument("too many dims");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument("negative dimension");
    n *= d;
  }
  const int64_t inner = shape.empty() ? 1 : shape.back();
  if (inner % BlockElems(dtype) != 0) {
    return InvalidArgument("innermost dimension is not a multiple of the block size");
  }
  const int64_t bytes = inner == 0 ? 0 : (n / inner) * RowBytes(dtype, inner);
  // Large buffers come straight from mmap: zero pages that cost RAM only once written, so a KV
  // pool sized for the longest context is cheap until used.
  constexpr size_t kMmapThreshold = size_t{1} << 20;
  const size_t want = static_cast<size_t>(bytes) + 64;
  std::shared_ptr<void> owner;
  void* p = nullptr;
  if (want >= kMmapThreshold) {
    p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
             0);
    if (p == MAP_FAILED) {
      return ResourceExhausted("cannot reserve " + std::to_string(bytes) + " bytes of memory");
    }
    owner = std::shared_ptr<void>(p, [want](void* q) { munmap(q, want); });
  } else {
    const size_t alloc = (want + 63) / 64 * 64;
    p = std::aligned_alloc(64, alloc);
    if (p == nullptr) {
      return ResourceExhausted("cannot allocate " + std::to_string(bytes) + " bytes of memory");
    }
    std::memset(p, 0, alloc);
    owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  return Tensor(p, dtype, shape, Device::kCpu, std::move(owner));
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= shape_[i];
  return n;
}

Tensor Tensor::Reshape(std::initializer_list<int64_t> shape) const {
  Tensor t = *this;
  ICECACHE_CHECK(shape.size() <= static_cast<size_t>(kMaxDims));
  int64_t n = 1;
  t.ndim_ = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t d : shape) {
    t.shape_[i++] = d;
    n *= d;
  }
  ICECACHE_CHECK(n == numel());
  ICECACHE_CHECK(t.cols() % BlockElems(dtype_) == 0);
  return t;
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  ICECACHE_CHECK(ndim_ >= 1 && 0 <= begin && begin <= end && end <= shape_[0]);
  Tensor t = *this;
  const int64_t per_outer = shape_[0] == 0 ? 0 : nbytes() / shape_[0];
  t.data_ = static_cast<char*>(data_) + begin * per_outer;
  t.shape_[0] = end - begin;
  return t;
}

std::string Tensor::ShapeString() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape_[i]);
  }
  return s + "]";
}

}  // namespace icecache
