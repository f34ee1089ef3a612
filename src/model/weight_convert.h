// Weight transformations the loaders apply while building ModelWeights.
#pragma once

#include "core/tensor.h"
#include "icecache/status.h"

namespace icecache {

// An owned f32 copy of `t` (any dtype) with the same shape; `t` itself if already f32.
Result<Tensor> ToF32(const Tensor& t);

// Undoes the per-head row interleave that GGUF converters apply to Llama Q/K projections (and
// their biases): for each head of `head_dim` rows, file row 2*i + j holds original row
// j * head_dim/2 + i. Returns an owned copy; works for any dtype (rows move whole).
Result<Tensor> UnpermuteQkRows(const Tensor& t, int n_heads, int head_dim);

}  // namespace icecache
