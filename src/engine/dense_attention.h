// Dense attention: every page of every sequence, causal by position. Prepare builds the page
// tables of all layers into fixed per-layer regions of one staging buffer and uploads them in
// three strided copies, so the device pointers of every layer stay the same from step to step
// (what a captured CUDA graph needs). On the CPU the host tables are used in place.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "engine/layer_attention.h"
#include "model/model_config.h"

namespace icecache {

class DenseAttention : public LayerAttention {
 public:
  // `max_rows`: page-table rows per layer (sequences x KV heads); `max_entries`: pages listed
  // per layer at most.
  static Result<std::unique_ptr<DenseAttention>> Create(Backend* backend, const ModelConfig& config,
                                                        int64_t max_rows, int64_t max_entries);

  Status Prepare(const StepContext& step) override;
  Status Attend(int layer, const Tensor& q, const Tensor& out) override;

 private:
  DenseAttention() = default;
  // Offsets (in i32) of a layer's region and its parts.
  int64_t Region(int layer) const { return static_cast<int64_t>(layer) * region_; }
  int64_t IndicesAt() const { return max_rows_ + 1; }
  int64_t LensAt() const { return max_rows_ + 1 + max_entries_; }

  Backend* backend_ = nullptr;
  ModelConfig config_;
  int64_t max_rows_ = 0;
  int64_t max_entries_ = 0;
  int64_t region_ = 0;  // i32 per layer: indptr (max_rows + 1), indices, lens
  Tensor host_;         // staging, [n_layers * region_]
  Tensor device_;       // the same layout in backend memory (== host_ on the CPU)
  int32_t rows_ = 0;    // rows of the current step
  Tensor positions_, row_base_;
  KvPoolView pool_view_;
};

}  // namespace icecache
