#include "model/weight_convert.h"

#include <cstring>
#include <vector>

#include "core/quant.h"

namespace icecache {

Result<Tensor> ToF32(const Tensor& t) {
  if (t.empty() || t.dtype() == DType::kF32) return t;
  if (t.dtype() == DType::kI32) return InvalidArgument("cannot convert an integer tensor to f32");
  ICECACHE_ASSIGN_OR_RETURN(Tensor out, Tensor::Host(DType::kF32, t.shape()));
  for (int64_t r = 0; r < t.rows(); ++r) {
    DequantizeRow(t.dtype(), t.row(r), static_cast<float*>(out.row(r)), t.cols());
  }
  return out;
}

Result<Tensor> UnpermuteQkRows(const Tensor& t, int n_heads, int head_dim) {
  const int64_t rows = t.ndim() == 1 ? t.numel() : t.dim(0);
  if (rows != static_cast<int64_t>(n_heads) * head_dim || head_dim % 2 != 0) {
    return Corrupt("cannot un-permute Q/K rows: " + std::to_string(rows) + " rows for " +
                   std::to_string(n_heads) + " heads of " + std::to_string(head_dim));
  }
  ICECACHE_ASSIGN_OR_RETURN(Tensor out, Tensor::Host(t.dtype(), t.shape()));
  // Bytes of one "row" in the permuted dimension (a whole matrix row, or one bias element).
  const int64_t row_bytes = t.nbytes() / rows;
  const int half = head_dim / 2;
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int h = 0; h < n_heads; ++h) {
    for (int j = 0; j < 2; ++j) {
      for (int i = 0; i < half; ++i) {
        const int64_t from = static_cast<int64_t>(h) * head_dim + 2 * i + j;
        const int64_t to = static_cast<int64_t>(h) * head_dim + j * half + i;
        std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

}  // namespace icecache
