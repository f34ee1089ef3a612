// The device sampler: greedy equals the CPU argmax (ties to the lowest id); with temperature,
// top-k, top-p and min-p it draws only from the set the CPU sampler keeps, with that set's
// probabilities (checked by frequency over many rows with different draw counters).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "cuda_test_util.h"
#include "engine/sampler.h"

namespace icecache {
namespace {

using testing::ToDevice;

// The CPU sampler's kept set and probabilities for one row (by running its math directly).
std::map<int32_t, double> CpuDistribution(const std::vector<float>& logits, float temp, int top_k,
                                          float top_p, float min_p) {
  std::vector<std::pair<float, int32_t>> cand;
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
    cand.emplace_back(logits[i] / temp, i);
  }
  std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (top_k > 0 && static_cast<size_t>(top_k) < cand.size()) cand.resize(top_k);
  std::vector<double> p;
  double sum = 0;
  for (const auto& c : cand) sum += std::exp(static_cast<double>(c.first - cand[0].first));
  for (const auto& c : cand)
    p.push_back(std::exp(static_cast<double>(c.first - cand[0].first)) / sum);
  size_t cut = p.size();
  if (top_p < 1.0f) {
    double acc = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      acc += p[i];
      if (acc >= top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  if (min_p > 0.0f) {
    size_t c2 = 1;
    while (c2 < cut && p[c2] >= min_p * p[0]) ++c2;
    cut = std::min(cut, c2);
  }
  double total = 0;
  for (size_t i = 0; i < cut; ++i) total += p[i];
  std::map<int32_t, double> out;
  for (size_t i = 0; i < cut; ++i) out[cand[i].second] = p[i] / total;
  return out;
}

TEST(CudaSampling, GreedyIsArgmaxWithLowestIdOnTies) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  const int64_t rows = 5, vocab = 128256;
  std::vector<float> logits = testing::RandomVector(rng, rows * vocab, -20.0f, 20.0f);
  logits[2 * vocab + 77] = 50.0f;  // tie in row 2: ids 77 and 90000
  logits[2 * vocab + 90000] = 50.0f;
  logits[4 * vocab + vocab - 1] = 60.0f;  // the last id wins row 4
  Tensor lg = ToDevice(*gpu, logits, DType::kF32, {rows, vocab});
  std::vector<SampleRowParams> params(rows);
  std::vector<int32_t> out(rows, -1);
  ASSERT_TRUE(gpu->SampleTokens(lg, params, out).ok());
  for (int64_t r = 0; r < rows; ++r) {
    const auto begin = logits.begin() + r * vocab;
    const int32_t want = static_cast<int32_t>(std::max_element(begin, begin + vocab) - begin);
    EXPECT_EQ(out[r], want) << "row " << r;
  }
  EXPECT_EQ(out[2], 77);
}

TEST(CudaSampling, DrawsFollowTheCpuKeptSetAndProbabilities) {
  ICECACHE_CUDA_OR_SKIP(gpu);
  ICECACHE_TEST_RNG(rng);
  struct Setting {
    float temp;
    int top_k;
    float top_p, min_p;
  };
  const int64_t vocab = 3000, rows = 4000;
  std::vector<float> row = testing::RandomVector(rng, vocab, -2.0f, 2.0f);
  for (int i = 0; i < 12; ++i) row[rng() % vocab] = 4.0f + 0.1f * static_cast<float>(i);
  std::vector<float> logits;
  for (int64_t r = 0; r < rows; ++r) logits.insert(logits.end(), row.begin(), row.end());
  Tensor lg = ToDevice(*gpu, logits, DType::kF32, {rows, vocab});
  for (Setting s :
       {Setting{1.0f, 5, 1.0f, 0.0f}, Setting{0.7f, 0, 0.8f, 0.0f}, Setting{1.3f, 20, 0.9f, 0.0f},
        Setting{1.0f, 0, 1.0f, 0.3f}, Setting{2.0f, 1, 1.0f, 0.0f}}) {
    SCOPED_TRACE("temp " + std::to_string(s.temp) + " top_k " + std::to_string(s.top_k) +
                 " top_p " + std::to_string(s.top_p) + " min_p " + std::to_string(s.min_p));
    const std::map<int32_t, double> want = CpuDistribution(row, s.temp, s.top_k, s.top_p, s.min_p);
    std::vector<SampleRowParams> params(rows);
    for (int64_t r = 0; r < rows; ++r) {
      params[r] = {s.temp, s.top_k, s.top_p, s.min_p, 99, static_cast<uint64_t>(r)};
    }
    std::vector<int32_t> out(rows, -1);
    ASSERT_TRUE(gpu->SampleTokens(lg, params, out).ok());
    std::map<int32_t, int> count;
    for (int32_t t : out) ++count[t];
    for (const auto& [id, n] : count) {
      ASSERT_TRUE(want.count(id)) << "token " << id << " is outside the CPU sampler's kept set";
    }
    for (const auto& [id, p] : want) {
      const double freq = static_cast<double>(count[id]) / rows;
      // Binomial standard error at 4000 draws is at most 0.008; allow 5 of them.
      EXPECT_NEAR(freq, p, 0.04) << "token " << id;
    }
  }
}

}  // namespace
}  // namespace icecache
