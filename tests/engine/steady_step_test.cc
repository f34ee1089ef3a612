// The steady-state decode step that `icecache bench` reports next to the mean
// (GenerateStats::decode_step_ms_steady).
#include <gtest/gtest.h>

#include "engine/engine_impl.h"

namespace icecache {
namespace {

TEST(SteadyStep, IsTheMedianOfTheSecondHalf) {
  EXPECT_EQ(SteadyStepSeconds({}), 0.0);
  EXPECT_EQ(SteadyStepSeconds({7.0}), 7.0);
  // Warm-up steps first (a graph capture, a page-table build): left out with the first half.
  EXPECT_EQ(SteadyStepSeconds({90.0, 40.0, 5.0, 6.0, 4.0}), 5.0);
  EXPECT_EQ(SteadyStepSeconds({90.0, 40.0, 5.0, 9.0}), 9.0);  // upper median of {5, 9}
}

TEST(SteadyStep, GenerateReportsIt) {
  EngineOptions o;
  o.synthetic = "tiny";
  o.context_size = 512;
  auto engine = Engine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  GenerateRequest req;
  for (int i = 0; i < 40; ++i) req.prompt_tokens.push_back((i * 7) % 100);
  req.max_tokens = 9;
  req.ignore_eos = true;
  auto out = (*engine)->Generate(req);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_GT(out->stats.decode_step_ms_steady, 0.0);
  // 8 decode steps: the steady step is one of the last four, so no more than their total.
  EXPECT_LE(out->stats.decode_step_ms_steady, 1e3 * out->stats.decode_seconds);
}

}  // namespace
}  // namespace icecache
