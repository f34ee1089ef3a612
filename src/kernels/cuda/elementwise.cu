// Launchers of the element-wise and row-wise kernels (elementwise.cuh) for f32 and bf16.
#include <algorithm>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/pdl.cuh"

namespace icecache::kernels {

namespace {

using Bf16 = __nv_bfloat16;

int LastError() { return static_cast<int>(cudaGetLastError()); }

// Grid of a grid-stride loop over n elements.
unsigned StrideBlocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65536));
}

// Calls f(Tin*, Tout*) with the pointers cast to their element types.
template <typename F>
int Dispatch2(ElemType a, ElemType b, F&& f) {
  if (a == ElemType::kBF16 && b == ElemType::kBF16) return f(Bf16{}, Bf16{});
  if (a == ElemType::kBF16 && b == ElemType::kF32) return f(Bf16{}, float{});
  if (a == ElemType::kF32 && b == ElemType::kBF16) return f(float{}, Bf16{});
  return f(float{}, float{});
}
template <typename F>
int Dispatch1(ElemType a, F&& f) {
  if (a == ElemType::kBF16) return f(Bf16{});
  return f(float{});
}

}  // namespace

const char* ErrorString(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

int LaunchEmbed(Stream s, const void* table, ElemType table_type, int64_t vocab, const int32_t* ids,
                int64_t rows, int64_t cols, void* out, ElemType out_type) {
  if (rows == 0) return 0;
  return Dispatch2(table_type, out_type, [&](auto tin, auto tout) {
    using Tin = decltype(tin);
    using Tout = decltype(tout);
    EmbedKernel<Tin, Tout><<<static_cast<unsigned>(rows), 128, 0, s>>>(
        static_cast<const Tin*>(table), vocab, ids, cols, static_cast<Tout*>(out));
    return LastError();
  });
}

int LaunchRmsNorm(Stream s, const void* x, ElemType x_type, const float* w, float eps, int64_t rows,
                  int64_t cols, void* out, ElemType out_type) {
  if (rows == 0) return 0;
  return Dispatch2(x_type, out_type, [&](auto tin, auto tout) {
    using Tin = decltype(tin);
    using Tout = decltype(tout);
    RmsNormKernel<Tin, Tout><<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(
        static_cast<const Tin*>(x), w, eps, cols, static_cast<Tout*>(out));
    return LastError();
  });
}

int LaunchAddRmsNorm(Stream s, const void* a, void* inout, ElemType type, const float* w, float eps,
                     int64_t rows, int64_t cols, void* out) {
  if (rows == 0) return 0;
  return Dispatch1(type, [&](auto tt) {
    using T = decltype(tt);
    return static_cast<int>(LaunchPdl(AddRmsNormKernel<T>, dim3(static_cast<unsigned>(rows)),
                                      dim3(kRowThreads), 0, s, static_cast<const T*>(a),
                                      static_cast<T*>(inout), w, eps, cols, static_cast<T*>(out)));
  });
}

int LaunchAdd(Stream s, const void* a, void* inout, ElemType type, int64_t n) {
  if (n == 0) return 0;
  return Dispatch1(type, [&](auto tt) {
    using T = decltype(tt);
    AddKernel<T>
        <<<StrideBlocks(n, 256), 256, 0, s>>>(static_cast<const T*>(a), static_cast<T*>(inout), n);
    return LastError();
  });
}

int LaunchSwiGlu(Stream s, const void* gate, const void* up, void* out, ElemType type, int64_t n) {
  if (n == 0) return 0;
  return Dispatch1(type, [&](auto tt) {
    using T = decltype(tt);
    SwiGluKernel<T><<<StrideBlocks(n, 256), 256, 0, s>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), n);
    return LastError();
  });
}

int LaunchRope(Stream s, const int32_t* positions, const float* inv_freq, void* x, ElemType type,
               int64_t n, int64_t heads, int64_t head_dim) {
  if (n == 0) return 0;
  const size_t smem = static_cast<size_t>(head_dim) * sizeof(float);
  return Dispatch1(type, [&](auto tt) {
    using T = decltype(tt);
    RopeKernel<T><<<static_cast<unsigned>(n), 128, smem, s>>>(positions, inv_freq,
                                                              static_cast<T*>(x), heads, head_dim);
    return LastError();
  });
}

int LaunchAddBias(Stream s, void* y, ElemType type, const float* bias, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return 0;
  return Dispatch1(type, [&](auto tt) {
    using T = decltype(tt);
    AddBiasKernel<T>
        <<<StrideBlocks(rows * cols, 256), 256, 0, s>>>(static_cast<T*>(y), bias, rows, cols);
    return LastError();
  });
}

int LaunchFillRandom(Stream s, void* t, ElemType type, int64_t n, uint64_t seed, float scale,
                     float offset) {
  if (n == 0) return 0;
  return Dispatch1(type, [&](auto tt) {
    using T = decltype(tt);
    FillRandomKernel<T>
        <<<StrideBlocks(n, 256), 256, 0, s>>>(static_cast<T*>(t), n, seed, scale, offset);
    return LastError();
  });
}

int LaunchScatterI32(Stream s, const int32_t* index, const int32_t* values, int64_t n, int32_t* dst,
                     int64_t dst_n) {
  if (n == 0) return 0;
  ScatterI32Kernel<<<StrideBlocks(n, 256), 256, 0, s>>>(index, values, n, dst, dst_n);
  return LastError();
}

int LaunchRopeWriteKv(Stream s, const float* inv_freq, void* q, int64_t q_heads,
                      const KvWriteParams& p) {
  if (p.n_tokens == 0) return 0;
  const KvWriteArgsDevice a{p.k,
                            p.v,
                            p.slots,
                            p.positions,
                            p.kv_heads,
                            p.head_dim,
                            static_cast<Bf16*>(p.pool_k),
                            static_cast<Bf16*>(p.pool_v),
                            p.pool_pos,
                            p.num_slots};
  const size_t smem = inv_freq != nullptr ? static_cast<size_t>(p.head_dim) * sizeof(float) : 0;
  return Dispatch1(p.act_type, [&](auto tt) {
    using T = decltype(tt);
    // Few tokens (decode): a token's heads over several blocks; many (prefill): one each.
    const unsigned parts = p.n_tokens < 64 ? 8 : 1;
    const dim3 grid(static_cast<unsigned>(p.n_tokens), parts);
    if (inv_freq != nullptr) {
      return static_cast<int>(LaunchPdl(RopeWriteKvKernel<T, true>, grid, dim3(128), smem, s,
                                        inv_freq, static_cast<T*>(q), q_heads, a));
    }
    return static_cast<int>(LaunchPdl(RopeWriteKvKernel<T, false>, grid, dim3(128), 0, s,
                                      static_cast<const float*>(nullptr), static_cast<T*>(nullptr),
                                      int64_t{0}, a));
  });
}

int LaunchCopyPages(Stream s, const void* src_k, const void* src_v, const int32_t* src_pos,
                    int64_t src_pages, void* dst_k, void* dst_v, int32_t* dst_pos,
                    int64_t dst_pages, const int32_t* src_ids, const int32_t* dst_ids, int64_t n,
                    int64_t page_size, int64_t head_dim) {
  if (n == 0) return 0;
  CopyPagesKernel<<<static_cast<unsigned>(n), 256, 0, s>>>(
      static_cast<const Bf16*>(src_k), static_cast<const Bf16*>(src_v), src_pos, src_pages,
      static_cast<Bf16*>(dst_k), static_cast<Bf16*>(dst_v), dst_pos, dst_pages, src_ids, dst_ids,
      page_size, head_dim);
  return LastError();
}

}  // namespace icecache::kernels
