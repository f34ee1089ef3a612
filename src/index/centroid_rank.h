// Ranking by mean key (--kv-rank centroid), the linear scan that DeviceSelection runs in device
// memory, shared by the icecache and lychee indexes on the host.
//
// Every page between the sink and the window is scored by CentroidScore over its mean key and
// spread (kv/key_mean.h: the mean rounded to the KV dtype and read back from Q8_0, as device
// memory stores it; cached per page version); empty pages score -inf. The
// best min(pages left, kMaxSelectPicks) of them, by (score descending, list index ascending), are
// walked in that order and each is taken if its tokens fit what is left of the budget. The
// selection is the sink pages, those pages in walk order, then the window pages: exactly what
// Backend::SelectPages computes (tests compare them).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "index/key_reader.h"
#include "index/policy.h"
#include "index/regions.h"

namespace icecache {

class CentroidRanker {
 public:
  // `q` holds the `group` query heads of (layer, head) ([group][head_dim]).
  void Select(const KvSequence& seq, int layer, int head, const ListRegions& r,
              const SelectionLimits& limits, const float* q, int group, KeyReader& reader,
              std::vector<PageRef>* out, SelectionStats* stats);
  // Host bytes of the cached mean keys and the scratch.
  int64_t MemoryBytes() const;

 private:
  struct CachedMean {
    uint32_t version = 0;
    std::vector<float> mean;
    float spread = 0;  // KeySpread
  };
  const CachedMean& MeanKey(const KvSequence& seq, KeyReader& reader, const PageRef& page);

  std::unordered_map<int32_t, CachedMean> means_;  // page id -> mean key
  std::vector<float> scores_;
  std::vector<int32_t> order_;
  std::vector<uint8_t> q8_;  // a mean key in Q8_0 (scratch)
  std::vector<float> qq_;    // QuerySquares of the query (scratch)
};

}  // namespace icecache
