// Dense attention: every page of every sequence, causal by position.
//
// Prepare keeps the page tables of all layers in one staging buffer and its device copy, laid out
// so that the device pointers of every layer stay the same from step to step (what a captured
// CUDA graph needs): per layer an indptr region, and one entries area (indices and lens) shared by
// all layers, which the indptr offsets point into. On a GPU each row (sequence x KV head) gets a
// little slack after its pages (entries of length 0, which the kernels skip), so that a step that
// only appends to the lists (decode) rewrites and uploads just the last entries of each row:
// O(rows), not O(context). Anything else (a list truncated or re-arranged, a different set or
// order of sequences, a row out of slack) rebuilds the whole table. On the CPU the host tables
// are used in place and packed (no slack): steps that only fill the last pages update in place,
// a new page rebuilds. Uploads are queued copies (Backend::CopyBlocksQueued): Transformer::Forward
// calls Prepare between its wait for the last step's copies and the fence after this step's.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "engine/layer_attention.h"
#include "kv/kv_sequence.h"
#include "model/model_config.h"

namespace icecache {

class DenseAttention : public LayerAttention {
 public:
  // kAuto: kSlack on a GPU, kPacked on the CPU. kSlack on the CPU keeps a separate "device" copy
  // and uploads to it as on a GPU (for tests).
  enum class Layout { kAuto, kPacked, kSlack };
  // `max_rows`: page-table rows per layer (sequences x KV heads); `max_entries`: pages listed
  // per layer at most (the entries area holds n_layers * max_entries, plus room for each row's
  // slack in the slack layout).
  static Result<std::unique_ptr<DenseAttention>> Create(Backend* backend, const ModelConfig& config,
                                                        int64_t max_rows, int64_t max_entries,
                                                        Layout layout = Layout::kAuto);

  Status Prepare(const StepContext& step) override;
  Status Attend(int layer, const Tensor& q, const Tensor& out) override;

  // Full rebuilds of the table so far (for tests and statistics).
  int64_t rebuilds() const { return rebuilds_; }
  // The table of `layer` for the current step as the kernels see it (read back from backend
  // memory): each row's entries, slack included.
  Result<std::vector<std::vector<PageRef>>> ReadTable(int layer) const;

 private:
  // What the table holds for one (layer, row).
  struct RowState {
    uint64_t stamp = 0;  // KvSequence::stamp of the list
    int32_t begin = 0;   // first entry (offset in the entries area)
    int32_t cap = 0;     // entries reserved (pages + slack)
    int32_t count = 0;   // pages written
  };
  // An entry range [start, start + width) to upload.
  struct Range {
    int64_t start;
    int64_t width;
  };

  DenseAttention() = default;
  // Offsets (in i32) of a layer's indptr and of the shared entries area.
  int64_t Indptr(int layer) const { return static_cast<int64_t>(layer) * (max_rows_ + 1); }
  int64_t IndicesAt() const { return static_cast<int64_t>(config_.n_layers) * (max_rows_ + 1); }
  int64_t LensAt() const { return IndicesAt() + area_; }

  // Whether every row can take this step's lists by rewriting its end.
  bool CanUpdate(const StepContext& step, int64_t rows) const;
  Status Update(const StepContext& step);
  Status Rebuild(const StepContext& step, int64_t rows);
  // Uploads the entries of `ranges` (sorted, disjoint) to the device copy.
  Status Upload(const std::vector<Range>& ranges);

  Backend* backend_ = nullptr;
  ModelConfig config_;
  bool slack_ = false;  // Layout::kSlack: slack after rows, a separate device copy
  int64_t max_rows_ = 0;
  int64_t area_ = 0;             // entries of the shared area
  Tensor host_;                  // staging: indptr of every layer, indices, lens
  Tensor device_;                // the same layout in backend memory (== host_ on the CPU)
  int32_t rows_ = 0;             // rows of the current step
  int64_t layout_rows_ = -1;     // rows of the table in `state_` (-1: none yet)
  std::vector<RowState> state_;  // [layer * layout_rows_ + row]
  std::vector<Range> dirty_;     // scratch of Update
  int64_t rebuilds_ = 0;
  Tensor positions_, row_base_;
  KvPoolView pool_view_;
};

}  // namespace icecache
