// Weight preparation and device sampling of the CUDA backend (host-side logic on top of
// Allocate/Copy and the kernel launchers; no CUDA headers).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/check.h"
#include "core/half.h"
#include "core/quant.h"

namespace icecache::cuda {

namespace {

// Elements converted per upload chunk (f32 and the converted copy live on the host).
constexpr int64_t kUploadChunkElems = int64_t{8} << 20;

}  // namespace

Result<Tensor> CudaBackend::PrepareWeight(const Tensor& w) {
  const bool vector = w.ndim() == 1;
  if (w.ndim() != 1 && w.ndim() != 2) {
    return InvalidArgument("CUDA backend: weights must be 1-D or 2-D, got " + w.ShapeString());
  }
  if (w.device() == Device::kCuda) {
    // Made on the device already (synthetic models): the backend's own layout only.
    if ((vector && w.dtype() == DType::kF32) || (!vector && w.dtype() == DType::kBF16)) return w;
    return InvalidArgument("CUDA backend: a device weight must be f32 (1-D) or bf16 (2-D), got " +
                           std::string(DTypeName(w.dtype())));
  }
  if (w.dtype() == DType::kI32) return InvalidArgument("CUDA backend: integer weight");
  // Norms and biases stay f32; matrices become bf16.
  return UploadConverted(w, vector ? DType::kF32 : DType::kBF16);
}

Result<Tensor> CudaBackend::PrepareStacked(std::span<const Tensor* const> parts) {
  if (parts.empty()) return InvalidArgument("CUDA backend: nothing to stack");
  if (!stacking_enabled_) return Tensor();
  const Tensor& first = *parts.front();
  int64_t rows = 0;
  bool adjacent = true;  // device parts already laid out one after another
  const char* next = static_cast<const char*>(first.data());
  for (const Tensor* p : parts) {
    if (p->ndim() != 2 || p->cols() != first.cols() || p->device() != first.device()) {
      return InvalidArgument("CUDA backend: stacked weights must be matrices of one width, got " +
                             p->ShapeString());
    }
    if (p->dtype() == DType::kI32) return InvalidArgument("CUDA backend: integer weight");
    adjacent = adjacent && p->data() == next && p->dtype() == DType::kBF16;
    next = static_cast<const char*>(p->data()) + p->nbytes();
    rows += p->dim(0);
  }
  if (first.device() == Device::kCuda) {
    // Made on the device (synthetic models): a view when they are adjacent, else kept apart
    // (a copy would hold the weights twice).
    if (!adjacent) return Tensor();
    return Tensor(first.data(), DType::kBF16, {rows, first.cols()}, Device::kCuda,
                  first.keepalive());
  }
  ICECACHE_ASSIGN_OR_RETURN(Tensor dev, Allocate(DType::kBF16, {rows, first.cols()}));
  int64_t row = 0;
  for (const Tensor* p : parts) {
    ICECACHE_RETURN_IF_ERROR(UploadInto(*p, dev.Slice(row, row + p->dim(0))));
    row += p->dim(0);
  }
  return dev;
}

Result<Tensor> CudaBackend::UploadConverted(const Tensor& host, DType dtype) {
  Tensor dev;
  if (host.ndim() == 1) {
    ICECACHE_ASSIGN_OR_RETURN(dev, Allocate(dtype, {host.cols()}));
  } else {
    ICECACHE_ASSIGN_OR_RETURN(dev, Allocate(dtype, {host.dim(0), host.cols()}));
  }
  ICECACHE_RETURN_IF_ERROR(UploadInto(host, dev));
  return dev;
}

Status CudaBackend::UploadInto(const Tensor& host, const Tensor& dev) {
  const DType dtype = dev.dtype();
  const int64_t rows = host.ndim() == 1 ? 1 : host.dim(0);
  const int64_t cols = host.cols();
  if (rows == 0 || cols == 0) return Status::Ok();
  const int64_t chunk_rows = std::max<int64_t>(1, kUploadChunkElems / cols);
  const int64_t elem_bytes = dtype == DType::kF32 ? 4 : 2;
  const int64_t need = chunk_rows * cols * elem_bytes;
  if (upload_staging_.empty() || upload_staging_.nbytes() < need) {
    ICECACHE_ASSIGN_OR_RETURN(upload_staging_, AllocateStaging(DType::kI32, {(need + 3) / 4}));
  }
  std::vector<float> row(static_cast<size_t>(cols));
  const char* src = static_cast<const char*>(host.data());
  const int64_t src_row_bytes = host.row_bytes();
  char* dst = static_cast<char*>(dev.data());
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    for (int64_t r = 0; r < n; ++r) {
      DequantizeRow(host.dtype(), src + (r0 + r) * src_row_bytes, row.data(), cols);
      if (dtype == DType::kF32) {
        std::memcpy(upload_staging_.data_as<float>() + r * cols, row.data(),
                    static_cast<size_t>(cols) * sizeof(float));
      } else {
        uint16_t* out = upload_staging_.data_as<uint16_t>() + r * cols;
        for (int64_t c = 0; c < cols; ++c) out[c] = F32ToBf16(row[c]);
      }
    }
    const int64_t bytes = n * cols * elem_bytes;
    ICECACHE_RETURN_IF_ERROR(
        CopyBlocks(upload_staging_.data(), dst + r0 * cols * elem_bytes, 1, bytes, bytes, bytes));
  }
  return Status::Ok();
}

Status CudaBackend::SampleTokens(const Tensor& logits, std::span<const SampleRowParams> params,
                                 std::span<int32_t> out) {
  if (sample_pending_ != 0) {
    return Internal("SampleTokens: asynchronous samples are still pending");
  }
  const int64_t rows = logits.ndim() == 2 ? logits.dim(0) : 0;
  if (sample_ids_dev_.empty() || sample_ids_dev_.numel() < rows) {
    ICECACHE_ASSIGN_OR_RETURN(sample_ids_dev_,
                              Allocate(DType::kI32, {std::max<int64_t>(rows, 64)}));
  }
  ICECACHE_RETURN_IF_ERROR(SampleTokensAsync(logits, params, sample_ids_dev_));
  return TakeSampledTokens(out);
}

}  // namespace icecache::cuda
