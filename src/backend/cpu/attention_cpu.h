// Internals shared by the two CPU attention paths (attention_cpu.cc: decode-like queries, one at
// a time; attention_prefill_cpu.cc: many queries of one page-table row, blocked sgemm).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"

namespace icecache::cpu {

// Sizes of one Attention call. Head vectors are handled padded to dp = head_dim rounded up to
// a multiple of 8 (zeros in the padding), so every kernel works on whole AVX2 vectors.
struct AttnDims {
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t group = 0;  // query heads per KV head
  int64_t d = 0;
  int64_t dp = 0;
  int64_t page_size = 0;
  float scale = 1.0f;
  bool causal = true;
};

AttnDims MakeAttnDims(const AttentionArgs& args);

// Hands out pieces of one float buffer, each 64-byte aligned.
class Carver {
 public:
  // With a null base, Take returns null and only used() is meaningful (sizing pass).
  explicit Carver(float* base) : base_(base) {}
  float* Take(int64_t floats) {
    float* p = base_ != nullptr ? base_ + used_ : nullptr;
    used_ += (floats + 15) / 16 * 16;
    return p;
  }
  int32_t* TakeInts(int64_t n) { return reinterpret_cast<int32_t*>(Take(n)); }
  int64_t used() const { return used_; }

 private:
  float* base_;
  int64_t used_ = 0;
};

// Copies key or value row `slot` of the pool into dst[0, dp) as f32, zero padded.
void LoadPoolRow(const KvPoolView& pool, const void* base, int64_t slot, float* dst, int64_t dp);

// Page-table row `row` checked against the table; returns its entry range.
void RowRange(const PageTableView& table, int64_t row, int64_t* begin, int64_t* end);
// Checks one page-table entry against the pool.
void CheckEntry(const KvPoolView& pool, int32_t page, int32_t len);

// The prefill path: attends the queries of tokens [first, first + count), which all share
// row_base, over their rows with blocked sgemm. Fills the matching rows of args.out.
struct PrefillSegment {
  int64_t first;
  int64_t count;
};
// Floats of per-thread scratch the prefill path needs.
int64_t PrefillScratchFloats(const AttnDims& dims);
// Work units of one segment (one per KV head and query block).
int64_t PrefillUnits(const AttnDims& dims, const PrefillSegment& seg);
void PrefillUnit(const AttentionArgs& args, const AttnDims& dims, const PrefillSegment& seg,
                 int64_t unit, float* scratch);

}  // namespace icecache::cpu
