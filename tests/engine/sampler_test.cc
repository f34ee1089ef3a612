#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace icecache {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, 2.0f, -1.0f, 3.0f, 0.5f}; }

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTie) {
  auto s = Sampler::Create({});
  ASSERT_TRUE(s.ok());
  auto l = Logits();
  EXPECT_EQ(s->Sample(l, {}), 1);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  auto s = Sampler::Create(p);
  ASSERT_TRUE(s.ok());
  auto l = Logits();
  const int32_t history[] = {1, 3};
  EXPECT_EQ(s->Sample(l, history), 4);  // token 1 penalised to 1.5, token 4 stays 3
  EXPECT_FLOAT_EQ(l[1], 1.5f);
  EXPECT_FLOAT_EQ(l[3], -2.0f);
}

TEST(SamplerTest, RepetitionWindowLimitsLookback) {
  SamplingParams p;
  p.repetition_penalty = 10.0f;
  p.repetition_window = 1;
  auto s = Sampler::Create(p);
  ASSERT_TRUE(s.ok());
  auto l = Logits();
  const int32_t history[] = {4, 0};  // token 4 is outside the 1-token window
  EXPECT_EQ(s->Sample(l, history), 1);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    auto s = Sampler::Create(p);
    ASSERT_TRUE(s.ok());
    auto l = Logits();
    EXPECT_EQ(s->Sample(l, {}), 1);
  }
}

TEST(SamplerTest, SameSeedSameDrawsDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.0f;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    auto s = Sampler::Create(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      auto l = Logits();
      out.push_back(s->Sample(l, {}));
    }
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(SamplerTest, TemperatureSamplingFollowsSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  auto s = Sampler::Create(p);
  std::vector<float> base = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto l = base;
    ones += s->Sample(l, {}) == 1;
  }
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.02);
}

TEST(SamplerTest, TopPKeepsSmallestNucleus) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  std::vector<float> base = {0.0f, std::log(3.0f), -10.0f};  // 0.25, 0.75, ~0
  for (uint64_t seed = 0; seed < 50; ++seed) {
    p.seed = seed;
    auto s = Sampler::Create(p);
    auto l = base;
    EXPECT_EQ(s->Sample(l, {}), 1);
  }
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.5f;
  std::vector<float> base = {0.0f, std::log(3.0f), std::log(2.0f)};  // 1:3:2
  std::map<int32_t, int> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    p.seed = seed;
    auto s = Sampler::Create(p);
    auto l = base;
    ++seen[s->Sample(l, {})];
  }
  EXPECT_EQ(seen.count(0), 0u);  // p(0) = 1/6 < 0.5 * 3/6
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
}

TEST(SamplerTest, RejectsBadParameters) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_FALSE(Sampler::Create(p).ok());
  p = {};
  p.top_p = 0;
  EXPECT_FALSE(Sampler::Create(p).ok());
  p = {};
  p.min_p = 2;
  EXPECT_FALSE(Sampler::Create(p).ok());
  p = {};
  p.repetition_penalty = 0;
  EXPECT_FALSE(Sampler::Create(p).ok());
  p = {};
  p.top_k = -3;
  EXPECT_FALSE(Sampler::Create(p).ok());
}

}  // namespace
}  // namespace icecache
