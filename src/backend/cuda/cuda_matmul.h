// cuBLASLt GEMMs with plans cached per shape. Plain C++ header (the cuBLASLt types stay in
// cuda_matmul.cu).
#pragma once

#include <cstdint>
#include <memory>

#include "icecache/status.h"
#include "kernels/cuda/launch.h"

namespace icecache::cuda {

class GemmRunner {
 public:
  // `workspace` (device memory of `workspace_bytes`) stays owned by the caller and is reused
  // by every call, which keeps calls allocation-free and graph-capturable.
  static Result<std::unique_ptr<GemmRunner>> Create(void* workspace, int64_t workspace_bytes);
  ~GemmRunner();

  // y[n, m] = x[n, k] w[m, k]^T with bf16 x and w, f32 accumulation, y bf16 or f32. Returns a
  // cuBLAS status (0: success).
  int Run(kernels::Stream s, const void* x, const void* w, void* y, bool y_f32, int64_t n,
          int64_t m, int64_t k);

 private:
  struct Impl;
  explicit GemmRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace icecache::cuda
