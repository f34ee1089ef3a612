// GemmRunner: cuBLASLt bf16 GEMMs (f32 compute) in row-major terms. Row-major y[n, m] =
// x[n, k] w[m, k]^T is, in cuBLAS's column-major view, Y'[m, n] = W'^T X' with W' = w as a
// k x m matrix (ld k) and X' = x as k x n (ld k): op(A) = T on W', op(B) = N on X'.
#include <cublasLt.h>

#include <map>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_matmul.h"

namespace icecache::cuda {

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

struct GemmRunner::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, std::unique_ptr<Plan>> plans;
  ~Impl() {
    plans.clear();
    if (handle != nullptr) cublasLtDestroy(handle);
  }
  // The plan of a shape, made on first use (host-side work only, so it may run during graph
  // capture).
  Plan* Get(int64_t n, int64_t m, int64_t k, bool y_f32, cublasStatus_t* st) {
    const auto key = std::make_tuple(n, m, k, y_f32);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second.get();
    auto p = std::make_unique<Plan>();
    *st = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (*st != CUBLAS_STATUS_SUCCESS) return nullptr;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    const cudaDataType_t yt = y_f32 ? CUDA_R_32F : CUDA_R_16BF;
    *st = cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, k, m, k);
    if (*st == CUBLAS_STATUS_SUCCESS) *st = cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, k, n, k);
    if (*st == CUBLAS_STATUS_SUCCESS) *st = cublasLtMatrixLayoutCreate(&p->c, yt, m, n, m);
    if (*st != CUBLAS_STATUS_SUCCESS) return nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    *st = cublasLtMatmulPreferenceCreate(&pref);
    if (*st != CUBLAS_STATUS_SUCCESS) return nullptr;
    const uint64_t ws = static_cast<uint64_t>(workspace_bytes);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    *st = cublasLtMatmulAlgoGetHeuristic(handle, p->op, p->a, p->b, p->c, p->c, pref, 1, &result,
                                         &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (*st != CUBLAS_STATUS_SUCCESS) return nullptr;
    if (found == 0) {
      *st = CUBLAS_STATUS_NOT_SUPPORTED;
      return nullptr;
    }
    p->algo = result.algo;
    Plan* raw = p.get();
    plans.emplace(key, std::move(p));
    return raw;
  }
};

GemmRunner::GemmRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemmRunner::~GemmRunner() = default;

Result<std::unique_ptr<GemmRunner>> GemmRunner::Create(void* workspace, int64_t workspace_bytes) {
  auto impl = std::make_unique<Impl>();
  const cublasStatus_t st = cublasLtCreate(&impl->handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return Internal("cuBLASLt: cannot create a handle (status " +
                    std::to_string(static_cast<int>(st)) + ")");
  }
  impl->workspace = workspace;
  impl->workspace_bytes = workspace_bytes;
  return std::unique_ptr<GemmRunner>(new GemmRunner(std::move(impl)));
}

int GemmRunner::Run(kernels::Stream s, const void* x, const void* w, void* y, bool y_f32, int64_t n,
                    int64_t m, int64_t k) {
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  Plan* p = impl_->Get(n, m, k, y_f32, &st);
  if (p == nullptr) return static_cast<int>(st);
  const float alpha = 1.0f, beta = 0.0f;
  st = cublasLtMatmul(impl_->handle, p->op, &alpha, w, p->a, x, p->b, &beta, y, p->c, y, p->c,
                      &p->algo, impl_->workspace, static_cast<size_t>(impl_->workspace_bytes), s);
  return static_cast<int>(st);
}

}  // namespace icecache::cuda
