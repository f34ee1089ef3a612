// Tensor: a contiguous, row-major n-d array (at most 4 dims) of one dtype on one device.
//
// A Tensor is a cheap view: copying it copies the pointer and shares the keep-alive handle of the
// storage behind it (an owned allocation, a memory-mapped file, a device buffer). The innermost
// dimension is the last one; for block-quantized dtypes it must be a multiple of the block size.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "core/dtype.h"
#include "icecache/status.h"

namespace icecache {

enum class Device : uint8_t { kCpu, kCuda };
const char* DeviceName(Device d);

class Tensor {
 public:
  static constexpr int kMaxDims = 4;

  Tensor() = default;
  // A view of `data` (not owned; `keepalive` may hold whatever owns it).
  Tensor(void* data, DType dtype, std::span<const int64_t> shape, Device device = Device::kCpu,
         std::shared_ptr<void> keepalive = {});
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
         Device device = Device::kCpu, std::shared_ptr<void> keepalive = {})
      : Tensor(data, dtype, std::span<const int64_t>(shape.begin(), shape.size()), device,
               std::move(keepalive)) {}

  // A new host tensor, 64-byte aligned, zero-filled. Fails only when memory is exhausted.
  static Result<Tensor> Host(DType dtype, std::span<const int64_t> shape);
  static Result<Tensor> Host(DType dtype, std::initializer_list<int64_t> shape) {
    return Host(dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }

  bool empty() const { return data_ == nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t dim(int i) const { return shape_[i < 0 ? ndim_ + i : i]; }
  std::span<const int64_t> shape() const { return {shape_.data(), static_cast<size_t>(ndim_)}; }
  int64_t numel() const;
  // Elements per row (the innermost dim) and rows (product of the others).
  int64_t cols() const { return ndim_ == 0 ? 1 : shape_[ndim_ - 1]; }
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }
  int64_t row_bytes() const { return RowBytes(dtype_, cols()); }
  int64_t nbytes() const { return rows() * row_bytes(); }
  const std::shared_ptr<void>& keepalive() const { return keepalive_; }

  // Same storage, new shape with the same number of elements and innermost divisibility.
  Tensor Reshape(std::initializer_list<int64_t> shape) const;
  // Rows [begin, end) of the outermost dimension.
  Tensor Slice(int64_t begin, int64_t end) const;
  // Pointer to row `r` when the tensor is viewed as [rows(), cols()].
  void* row(int64_t r) const { return static_cast<char*>(data_) + r * row_bytes(); }

  std::string ShapeString() const;  // "[30, 576]"

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
  std::shared_ptr<void> keepalive_;
};

}  // namespace icecache
