// oracle: exact q.k over every key, the upper bound for any selector. Per page: a page scores
// the best q.k of its tokens (over the query heads of the GQA group) and the best pages fill
// the budget. Per token: the best tokens themselves (sink and window tokens always included), by
// max q.k or (--kv-oracle-score mass) by the attention mass they carry for the group's query heads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "index/key_reader.h"
#include "index/policies.h"
#include "index/regions.h"

namespace icecache {

namespace {

class OracleIndex : public SequenceIndex {
 public:
  explicit OracleIndex(const IndexContext& c)
      : c_(c),
        per_token_(c.config.oracle_unit == "token"),
        mass_(per_token_ && c.config.oracle_score == "mass") {}

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
      logits_.clear();
      candidate_.clear();
      for (const PageRef& page : seq.pages(layer, h)) {
        const float* k = keys.Keys(page.id, page.len);
        const int32_t* pos = keys.Positions(page.id);
        for (int t = 0; t < page.len; ++t) {
          const int32_t slot = page.id * p + t;
          // --kv-oracle-score mass: every key's logits count toward the normalizers.
          if (mass_) AppendLogits(q, h, k, t);
          if (pos[t] < c_.limits.sink || pos[t] >= window_start) {
            slots[h].push_back(slot);  // always attended
          } else {
            if (mass_) candidate_.push_back(static_cast<int64_t>(logits_.size()) - Group());
            cand_.emplace_back(mass_ ? 0.0f : Score(q, h, k, t), slot);  // mass: MassScores
            stats->keys_scored += Group();
          }
        }
      }
      if (mass_) MassScores();
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

  // The scaled logits s q_g.k (s = 1 / sqrt(dim)) of key t for the group's query heads of KV
  // head h, appended to logits_ ([key][group]).
  void AppendLogits(const float* q, int h, const float* k, int t) {
    const int d = c_.layout.head_dim;
    const float s = 1.0f / std::sqrt(static_cast<float>(d));
    for (int g = 0; g < Group(); ++g) {
      logits_.push_back(s * Dot(q + static_cast<int64_t>(h * Group() + g) * d,
                                k + static_cast<int64_t>(t) * d, d));
    }
  }

  // --kv-oracle-score mass: scores each candidate by its attention mass summed over the group's
  // query heads, sum_g exp(s q_g.k - lse_g), lse_g the exact log-sum-exp of head g's logits over
  // every key of the list (logits_; candidate_ holds each candidate's offset in it). The sink and
  // window are attended whatever they score, so the best candidates by this score are the
  // selection of greatest attention mass summed over the group: the best any selector of the
  // budget can do on attention-mass recall.
  void MassScores() {
    const int group = Group();
    lse_.assign(group, 0.0);
    const int64_t n = static_cast<int64_t>(logits_.size()) / group;
    for (int g = 0; g < group; ++g) {
      double top = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t i = 0; i < n; ++i) top = std::max<double>(top, logits_[i * group + g]);
      for (int64_t i = 0; i < n; ++i) sum += std::exp(logits_[i * group + g] - top);
      lse_[g] = top + std::log(sum);
    }
    ICECACHE_CHECK(candidate_.size() == cand_.size());
    for (size_t c = 0; c < cand_.size(); ++c) {
      double mass = 0;
      for (int g = 0; g < group; ++g) mass += std::exp(logits_[candidate_[c] + g] - lse_[g]);
      cand_[c].first = static_cast<float>(mass);
    }
  }

  IndexContext c_;
  bool per_token_;
  bool mass_;
  std::vector<float> logits_;
  std::vector<int64_t> candidate_;
  std::vector<double> lse_;
  std::vector<float> scores_;
  std::vector<int32_t> order_;
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace

Result<std::unique_ptr<SequenceIndex>> MakeOracleIndex(const IndexContext& context) {
  return std::unique_ptr<SequenceIndex>(new OracleIndex(context));
}

}  // namespace icecache
