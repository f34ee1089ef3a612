// Attention-mass recall of a KV selection: for one decode step, layer and query head, the share
// of the exact softmax mass over every key of the (layer, KV head) list that falls on the tokens
// the step attends (sink and window included). A measurement (--kv-recall), not part of the
// decode path: it scores every key on the host, a full attention pass per step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_sequence.h"

namespace icecache {

// Recall values of many (step, layer, query head) samples: count, sum, minimum and a histogram
// for percentiles.
class RecallTally {
 public:
  static constexpr int kBins = 1000;  // resolution of percentiles: 0.001

  void Add(double recall);
  int64_t samples() const { return samples_; }
  double Mean() const { return samples_ > 0 ? sum_ / static_cast<double>(samples_) : 0.0; }
  double min() const { return samples_ > 0 ? min_ : 0.0; }
  // The largest bin edge b/kBins with at most a share `p` of the samples below it (0 when
  // empty).
  double Percentile(double p) const;

 private:
  int64_t samples_ = 0;
  double sum_ = 0;
  double min_ = 1.0;
  std::vector<int64_t> hist_;  // kBins + 1 bins; the last one holds recall == 1
};

class AttentionRecall {
 public:
  // Adds one sample per query head of KV head `head`'s GQA group: `q` holds the layer's
  // n_heads query vectors (f32, host, after RoPE), `group` query heads per KV head; the
  // attended tokens are the first `len` tokens of each page in `pages` (host page ids).
  // REQUIRES: the pool is in host memory.
  void AddPages(const KvSequence& seq, int layer, int head, const float* q, int group, float scale,
                std::span<const PageRef> pages, RecallTally* tally);
  // The same with the attended tokens given as host slots (page * page_size + offset).
  void AddSlots(const KvSequence& seq, int layer, int head, const float* q, int group, float scale,
                std::span<const int32_t> slots, RecallTally* tally);

 private:
  // Scores every token of (layer, head), then adds each query head's recall to `tally`. Reads
  // and clears marks_.
  void Measure(const KvSequence& seq, int layer, int head, const float* q, int group, float scale,
               RecallTally* tally);
  void Mark(const KvSequence& seq, int64_t slot);

  std::vector<uint8_t> marks_;  // per host slot: attended in this sample
  std::vector<int64_t> marked_;
  std::vector<float> scores_;  // [group][tokens]
  std::vector<uint8_t> chosen_;
};

}  // namespace icecache
