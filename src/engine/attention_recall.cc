#include "engine/attention_recall.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "index/key_reader.h"

namespace icecache {

namespace {

// q.k with eight partial sums (vectorizes; the order is fixed, so results are deterministic).
float DotWide(const float* a, const float* b, int n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  }
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

}  // namespace

void RecallTally::Add(double recall) {
  if (hist_.empty()) hist_.assign(kBins + 1, 0);
  recall = std::clamp(recall, 0.0, 1.0);
  ++samples_;
  sum_ += recall;
  min_ = std::min(min_, recall);
  ++hist_[static_cast<size_t>(std::floor(recall * kBins))];
}

double RecallTally::Percentile(double p) const {
  if (samples_ == 0) return 0.0;
  const double want = p * static_cast<double>(samples_);
  int64_t below = 0;
  for (int b = 0; b <= kBins; ++b) {
    if (static_cast<double>(below + hist_[b]) > want) return static_cast<double>(b) / kBins;
    below += hist_[b];
  }
  return 1.0;
}

void AttentionRecall::Mark(const KvSequence& seq, int64_t slot) {
  if (marks_.empty()) {
    marks_.assign(static_cast<size_t>(seq.pool().capacity() * seq.layout().page_size), 0);
  }
  if (marks_[slot] == 0) {
    marks_[slot] = 1;
    marked_.push_back(slot);
  }
}

void AttentionRecall::AddPages(const KvSequence& seq, int layer, int head, const float* q,
                               int group, float scale, std::span<const PageRef> pages,
                               RecallTally* tally) {
  const int64_t p = seq.layout().page_size;
  for (const PageRef& page : pages) {
    for (int t = 0; t < page.len; ++t) Mark(seq, page.id * p + t);
  }
  Measure(seq, layer, head, q, group, scale, tally);
}

void AttentionRecall::AddSlots(const KvSequence& seq, int layer, int head, const float* q,
                               int group, float scale, std::span<const int32_t> slots,
                               RecallTally* tally) {
  for (int32_t s : slots) Mark(seq, s);
  Measure(seq, layer, head, q, group, scale, tally);
}

void AttentionRecall::Measure(const KvSequence& seq, int layer, int head, const float* q, int group,
                              float scale, RecallTally* tally) {
  const int d = seq.layout().head_dim;
  const int64_t p = seq.layout().page_size;
  const std::vector<PageRef>& pages = seq.pages(layer, head);
  int64_t n = 0;
  for (const PageRef& page : pages) n += page.len;
  scores_.resize(static_cast<size_t>(n * group));
  chosen_.resize(static_cast<size_t>(n));
  if (marks_.empty()) marks_.assign(static_cast<size_t>(seq.pool().capacity() * p), 0);
  KeyReader keys(seq.pool().view());
  int64_t i = 0;
  for (const PageRef& page : pages) {
    const float* k = keys.Keys(page.id, page.len);
    for (int t = 0; t < page.len; ++t, ++i) {
      chosen_[i] = marks_[page.id * p + t];
      for (int g = 0; g < group; ++g) {
        const float* qg = q + static_cast<int64_t>(head * group + g) * d;
        scores_[g * n + i] = scale * DotWide(qg, k + static_cast<int64_t>(t) * d, d);
      }
    }
  }
  for (int64_t s : marked_) marks_[s] = 0;
  marked_.clear();
  for (int g = 0; g < group; ++g) {
    const float* s = scores_.data() + g * n;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
    // Both sums in one pass and one order: when every token is attended they are identical.
    double total = 0, attended = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double e = std::exp(static_cast<double>(s[j] - m));
      total += e;
      if (chosen_[j]) attended += e;
    }
    tally->Add(total > 0 ? attended / total : 0.0);
  }
}

}  // namespace icecache
