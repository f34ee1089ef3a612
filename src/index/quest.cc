// quest (Quest): fixed contiguous pages; each page keeps the per-dimension min and max of its
// keys, which bound q.k for every key in it: q.k <= sum_d max(q_d min_d, q_d max_d). Every
// selectable page is scored by that bound (a linear scan) and the best pages fill the budget.
// GQA: a page's score is the best bound over the query heads of its group.
#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "index/key_reader.h"
#include "index/policies.h"
#include "index/regions.h"

namespace icecache {

namespace {

class QuestIndex : public SequenceIndex {
 public:
  explicit QuestIndex(const IndexContext& c) : c_(c) {}

  Status OnAppend(KvSequence&, int64_t, std::span<const int32_t>) override {
    return Status::Ok();  // bounds are computed lazily and refreshed when a page changes
  }

  void Select(const KvSequence& seq, int layer, const float* q, std::span<std::vector<PageRef>> out,
              SelectionStats* stats) override {
    const int d = c_.layout.head_dim;
    const int group = c_.n_heads / c_.layout.n_kv_heads;
    KeyReader keys(seq.pool().view());
    for (int h = 0; h < c_.layout.n_kv_heads; ++h) {
      out[h].clear();
      if (ListTokens(seq, layer, h) <= c_.limits.budget &&
          static_cast<int>(seq.pages(layer, h).size()) <= c_.limits.max_pages) {
        SelectAll(seq, layer, h, &out[h]);
        continue;
      }
      const ListRegions r = RegionsOf(seq, layer, h, c_.limits);
      const std::vector<PageRef>& pages = seq.pages(layer, h);
      scores_.resize(pages.size());
      for (int32_t i = r.sink_end; i < r.window_begin; ++i) {
        const float* b = Bound(seq, keys, pages[i]);
        float best = -std::numeric_limits<float>::infinity();
        for (int g = 0; g < group; ++g) {
          const float* qh = q + static_cast<int64_t>(h * group + g) * d;
          float s = 0;
          for (int j = 0; j < d; ++j) s += std::max(qh[j] * b[j], qh[j] * b[d + j]);
          best = std::max(best, s);
        }
        scores_[i] = best;
      }
      stats->nodes_visited += r.window_begin - r.sink_end;
      order_.resize(r.window_begin - r.sink_end);
      std::iota(order_.begin(), order_.end(), r.sink_end);
      std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
        return scores_[a] > scores_[b] || (scores_[a] == scores_[b] && a < b);
      });
      AssembleSelection(seq, layer, h, r, c_.limits, order_, &out[h]);
    }
  }

  int64_t AppendPagesBound(const KvSequence&) override { return 0; }  // allocates none
  int64_t MemoryBytes() const override {
    return static_cast<int64_t>(bounds_.size()) *
           (static_cast<int64_t>(2 * c_.layout.head_dim) * 4 + 16);
  }

 private:
  struct PageBound {
    uint32_t version = 0;
    std::vector<float> minmax;  // [min d | max d]
  };

  // The min/max bound of a page, recomputed when the page changed.
  const float* Bound(const KvSequence& seq, KeyReader& keys, const PageRef& page) {
    const int d = c_.layout.head_dim;
    PageBound& b = bounds_[page.id];
    const uint32_t version = seq.pool().version(page.id);
    if (b.minmax.empty() || b.version != version) {
      b.version = version;
      b.minmax.assign(2 * d, 0.0f);
      const float* k = keys.Keys(page.id, page.len);
      for (int j = 0; j < d; ++j) {
        b.minmax[j] = b.minmax[d + j] = k[j];
      }
      for (int t = 1; t < page.len; ++t) {
        for (int j = 0; j < d; ++j) {
          const float v = k[static_cast<int64_t>(t) * d + j];
          b.minmax[j] = std::min(b.minmax[j], v);
          b.minmax[d + j] = std::max(b.minmax[d + j], v);
        }
      }
    }
    return b.minmax.data();
  }

  IndexContext c_;
  std::unordered_map<int32_t, PageBound> bounds_;
  std::vector<float> scores_;
  std::vector<int32_t> order_;
};

}  // namespace

Result<std::unique_ptr<SequenceIndex>> MakeQuestIndex(const IndexContext& context) {
  return std::unique_ptr<SequenceIndex>(new QuestIndex(context));
}

}  // namespace icecache
