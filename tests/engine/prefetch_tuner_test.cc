// PrefetchTuner (--kv-prefetch auto for one device-selecting sequence): the probe's order, the
// choice by median step time with its margin, and the probes again after the hold.
#include "engine/prefetch_tuner.h"

#include <gtest/gtest.h>

#include <vector>

namespace icecache {
namespace {

// Runs `steps` steps whose time is `with` or `without` by what the tuner wanted; returns the
// choices made, in order.
std::vector<bool> RunSteps(PrefetchTuner& t, int steps, double with, double without) {
  std::vector<bool> wanted;
  for (int i = 0; i < steps; ++i) {
    wanted.push_back(t.wanted());
    t.Observe(wanted.back() ? with : without);
  }
  return wanted;
}

PrefetchTuner::Params Small() {
  PrefetchTuner::Params p;
  p.probe_steps = 3;
  p.hold_steps = 5;
  p.margin = 0.02;
  return p;
}

TEST(PrefetchTuner, ProbesBothSidesThenHoldsTheFaster) {
  PrefetchTuner slow_prefetch(Small());
  const std::vector<bool> a = RunSteps(slow_prefetch, 11, 0.0149, 0.0120);
  // 3 steps with, 3 without, then 5 held without.
  EXPECT_EQ(a, std::vector<bool>(
                   {true, true, true, false, false, false, false, false, false, false, false}));
  EXPECT_EQ(slow_prefetch.probes(), 1);
  EXPECT_DOUBLE_EQ(slow_prefetch.probe_on_seconds(), 0.0149);
  EXPECT_DOUBLE_EQ(slow_prefetch.probe_off_seconds(), 0.0120);

  PrefetchTuner fast_prefetch(Small());
  const std::vector<bool> b = RunSteps(fast_prefetch, 11, 0.0100, 0.0120);
  EXPECT_EQ(
      b, std::vector<bool>({true, true, true, false, false, false, true, true, true, true, true}));
}

TEST(PrefetchTuner, ProbesAgainAfterTheHold) {
  PrefetchTuner t(Small());
  RunSteps(t, 6 + 5, 0.0149, 0.0120);  // a probe, then the hold (without)
  EXPECT_EQ(t.probes(), 1);
  // The next probe: the prefetch has become the faster side.
  const std::vector<bool> next = RunSteps(t, 6 + 2, 0.0090, 0.0120);
  EXPECT_EQ(next, std::vector<bool>({true, true, true, false, false, false, true, true}));
  EXPECT_EQ(t.probes(), 2);
  EXPECT_DOUBLE_EQ(t.probe_on_seconds(), 0.0090);
}

TEST(PrefetchTuner, TiesAndSmallGainsGoToNoPrefetch) {
  PrefetchTuner tie(Small());
  RunSteps(tie, 6, 0.0120, 0.0120);
  EXPECT_FALSE(tie.wanted());
  PrefetchTuner within_margin(Small());
  RunSteps(within_margin, 6, 0.0119, 0.0120);  // 0.8% faster: under the 2% margin
  EXPECT_FALSE(within_margin.wanted());
  PrefetchTuner past_margin(Small());
  RunSteps(past_margin, 6, 0.0116, 0.0120);  // 3.3% faster
  EXPECT_TRUE(past_margin.wanted());
}

TEST(PrefetchTuner, LeavesOutTheFirstStepOfEachSideAndTakesMedians) {
  PrefetchTuner t(Small());
  // With: a slow first step (the other side's pages still resident), then 10 and 11 ms.
  for (double s : {0.050, 0.010, 0.011}) {
    ASSERT_TRUE(t.wanted());
    t.Observe(s);
  }
  // Without: a fast first step, then 12 and 13 ms.
  for (double s : {0.001, 0.012, 0.013}) {
    ASSERT_FALSE(t.wanted());
    t.Observe(s);
  }
  EXPECT_DOUBLE_EQ(t.probe_on_seconds(), 0.0105);
  EXPECT_DOUBLE_EQ(t.probe_off_seconds(), 0.0125);
  EXPECT_TRUE(t.wanted());
}

TEST(PrefetchTuner, ANewRunRestartsAProbeButKeepsAChoice) {
  PrefetchTuner t(Small());
  // A short first request (a warm-up at a short context): 4 steps, 7 ms either way.
  RunSteps(t, 4, 0.007, 0.007);
  t.NewRun();
  // The long request probes from the start: its steps alone decide.
  const std::vector<bool> w = RunSteps(t, 7, 0.0175, 0.0140);
  EXPECT_EQ(w, std::vector<bool>({true, true, true, false, false, false, false}));
  EXPECT_DOUBLE_EQ(t.probe_on_seconds(), 0.0175);
  EXPECT_DOUBLE_EQ(t.probe_off_seconds(), 0.0140);
  // A held choice survives the next request.
  t.NewRun();
  EXPECT_FALSE(t.wanted());
  EXPECT_EQ(t.probes(), 1);
}

TEST(PrefetchTuner, ClampsItsParameters) {
  PrefetchTuner::Params p;
  p.probe_steps = 0;  // at least 2: one left out, one timed
  p.hold_steps = 0;
  PrefetchTuner t(p);
  const std::vector<bool> w = RunSteps(t, 6, 0.0149, 0.0120);
  EXPECT_EQ(w, std::vector<bool>({true, true, false, false, false, true}));
  EXPECT_EQ(t.probes(), 1);
}

}  // namespace
}  // namespace icecache
