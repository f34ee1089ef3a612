#include "index/centroid_rank.h"

#include <algorithm>
#include <limits>

#include "backend/backend.h"
#include "kv/key_mean.h"

namespace icecache {

const CentroidRanker::CachedMean& CentroidRanker::MeanKey(const KvSequence& seq, KeyReader& reader,
                                                          const PageRef& page) {
  CachedMean& m = means_[page.id];
  const uint32_t version = seq.pool().version(page.id);
  if (m.mean.empty() || m.version != version) {
    const int d = seq.layout().head_dim;
    m.version = version;
    m.mean.resize(d);
    const float* keys = reader.Keys(page.id, page.len);
    if (MeanKeyFits(d)) {
      q8_.resize(static_cast<size_t>(RowBytes(kMeanKeyDType, d)));
      m.spread = StoredKeyMean(keys, page.len, d, seq.layout().dtype, q8_.data(), m.mean.data());
    } else {  // head dims device memory cannot store (no device selection): the exact mean
      KeyMean(keys, page.len, d, seq.layout().dtype, m.mean.data());
      m.spread = KeySpread(keys, page.len, d, m.mean.data());
    }
  }
  return m;
}

void CentroidRanker::Select(const KvSequence& seq, int layer, int head, const ListRegions& r,
                            const SelectionLimits& limits, const float* q, int group,
                            KeyReader& reader, std::vector<PageRef>* out, SelectionStats* stats) {
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  const int d = seq.layout().head_dim;
  scores_.resize(pages.size());
  order_.clear();
  qq_.resize(group);
  QuerySquares(q, group, d, qq_.data());
  // Pages are scored kCentroidLanes at a time (CentroidScores: CentroidScore's bits). The cached
  // means stay put while the batch fills (the map's nodes do not move).
  CentroidBatch batch(q, qq_.data(), group, d, scores_.data());
  for (int32_t i = r.sink_end; i < r.window_begin; ++i) {
    const PageRef& page = pages[i];
    if (page.len > 0) {
      const CachedMean& m = MeanKey(seq, reader, page);
      batch.Add(m.mean.data(), m.spread, i);
    } else {
      scores_[i] = -std::numeric_limits<float>::infinity();
    }
    order_.push_back(i);
  }
  batch.Flush();
  stats->nodes_visited += static_cast<int64_t>(order_.size());
  int64_t tokens = static_cast<int64_t>(limits.budget) - r.sink_tokens - r.window_tokens;
  const int64_t pages_left =
      static_cast<int64_t>(limits.max_pages) - r.sink_end - (r.end - r.window_begin);
  const size_t want = static_cast<size_t>(std::clamp<int64_t>(
      std::min<int64_t>(pages_left, kMaxSelectPicks), 0, static_cast<int64_t>(order_.size())));
  std::partial_sort(order_.begin(), order_.begin() + want, order_.end(), [&](int32_t a, int32_t b) {
    return scores_[a] > scores_[b] || (scores_[a] == scores_[b] && a < b);
  });
  out->clear();
  for (int32_t i = 0; i < r.sink_end; ++i) out->push_back(pages[i]);
  for (size_t k = 0; k < want && tokens > 0; ++k) {
    const PageRef& page = pages[order_[k]];
    if (page.len > tokens) continue;
    out->push_back(page);
    tokens -= page.len;
  }
  for (int32_t i = r.window_begin; i < r.end; ++i) out->push_back(pages[i]);
}

int64_t CentroidRanker::MemoryBytes() const {
  int64_t b = static_cast<int64_t>(scores_.capacity()) * 4 +
              static_cast<int64_t>(order_.capacity()) * 4 + static_cast<int64_t>(q8_.capacity());
  for (const auto& [id, m] : means_) b += static_cast<int64_t>(m.mean.capacity()) * 4 + 20;
  return b;
}

}  // namespace icecache
