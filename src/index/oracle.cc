// oracle: exact q.k over every key, the upper bound for any selector. Per page: a page scores
// the best q.k of its tokens (over the query heads of the GQA group) and the best pages fill
// the budget. Per token: the best tokens themselves (sink and window tokens always included).
#include <algorithm>
#include <limits>
#include <numeric>

#include "index/key_reader.h"
#include "index/policies.h"
#include "index/regions.h"

namespace icecache {

namespace {

class OracleIndex : public SequenceIndex {
 public:
  explicit OracleIndex(const IndexContext& c)
      : c_(c), per_token_(c.config.oracle_unit == "token") {}

  Status OnAppend(KvSequence&, int64_t, std::span<const int32_t>) override { return Status::Ok(); }
  bool token_level() const override { return per_token_; }

  void Select(const KvSequence& seq, int layer, const float* q, std::span<std::vector<PageRef>> out,
              SelectionStats* stats) override {
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
      scores_.assign(pages.size(), 0.0f);
      for (int32_t i = r.sink_end; i < r.window_begin; ++i) {
        float best = -std::numeric_limits<float>::infinity();
        const float* k = keys.Keys(pages[i].id, pages[i].len);
        for (int t = 0; t < pages[i].len; ++t) best = std::max(best, Score(q, h, k, t));
        scores_[i] = best;
        stats->keys_scored += static_cast<int64_t>(pages[i].len) * Group();
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

  void SelectTokens(const KvSequence& seq, int layer, const float* q,
                    std::span<std::vector<int32_t>> slots, SelectionStats* stats) override {
    KeyReader keys(seq.pool().view());
    const int p = c_.layout.page_size;
    const int64_t window_start = std::max<int64_t>(0, seq.length() - c_.limits.window);
    for (int h = 0; h < c_.layout.n_kv_heads; ++h) {
      slots[h].clear();
      cand_.clear();
      for (const PageRef& page : seq.pages(layer, h)) {
        const float* k = keys.Keys(page.id, page.len);
        const int32_t* pos = keys.Positions(page.id);
        for (int t = 0; t < page.len; ++t) {
          const int32_t slot = page.id * p + t;
          if (pos[t] < c_.limits.sink || pos[t] >= window_start) {
            slots[h].push_back(slot);  // always attended
          } else {
            cand_.emplace_back(Score(q, h, k, t), slot);
            stats->keys_scored += Group();
          }
        }
      }
      const size_t room =
          static_cast<size_t>(std::max<int64_t>(0, c_.limits.budget - slots[h].size()));
      const size_t take = std::min(room, cand_.size());
      std::partial_sort(cand_.begin(), cand_.begin() + take, cand_.end(),
                        [](const auto& a, const auto& b) {
                          return a.first > b.first || (a.first == b.first && a.second < b.second);
                        });
      for (size_t i = 0; i < take; ++i) slots[h].push_back(cand_[i].second);
    }
  }

  int64_t MemoryBytes() const override { return 0; }
  int64_t AppendPagesBound(const KvSequence&) override { return 0; }  // allocates none

 private:
  int Group() const { return c_.n_heads / c_.layout.n_kv_heads; }
  // Best q.k of key t over the query heads of KV head h.
  float Score(const float* q, int h, const float* k, int t) const {
    const int d = c_.layout.head_dim;
    float best = -std::numeric_limits<float>::infinity();
    for (int g = 0; g < Group(); ++g) {
      best = std::max(best, Dot(q + static_cast<int64_t>(h * Group() + g) * d,
                                k + static_cast<int64_t>(t) * d, d));
    }
    return best;
  }

  IndexContext c_;
  bool per_token_;
  std::vector<float> scores_;
  std::vector<int32_t> order_;
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace

Result<std::unique_ptr<SequenceIndex>> MakeOracleIndex(const IndexContext& context) {
  return std::unique_ptr<SequenceIndex>(new OracleIndex(context));
}

}  // namespace icecache
