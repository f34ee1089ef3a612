// Dense attention over an offloaded host tier (a GPU engine with --kv-offload): for each layer,
// the pages of every sequence of the step are gathered from pinned host memory into a device
// staging pool (one batched copy), and the paged attention kernels run there. Prefill chunks
// read each layer's KV over the host link once per chunk instead of once per query tile, and the
// device holds one layer's KV of the step's sequences at a time, not the whole context.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "engine/layer_attention.h"
#include "kv/page_pool.h"
#include "model/model_config.h"

namespace icecache {

class StagedAttention : public LayerAttention {
 public:
  // `pages` staging pages to start with (grown when a layer of a step needs more).
  StagedAttention(Backend* backend, const ModelConfig& config, const KvLayout& layout,
                  int64_t pages);

  Status Prepare(const StepContext& step) override;
  Status Attend(int layer, const Tensor& q, const Tensor& out) override;

  // Device bytes of the staging pool (0 before the first step).
  int64_t bytes() const { return stage_ ? stage_->bytes() : 0; }

 private:
  Status Reserve(int64_t pages);

  Backend* backend_;
  ModelConfig config_;
  KvLayout layout_;
  int64_t initial_pages_;
  StepContext step_;
  std::unique_ptr<PagePool> stage_;
  std::vector<int32_t> ids_;    // host staging: the listed (source) page ids
  std::vector<int32_t> table_;  // host staging: indptr | indices | lens
  Tensor ids_dev_, table_dev_;
};

}  // namespace icecache
