// --kv-prefetch auto for decode steps of one device-selecting sequence: prefetch or not, chosen by
// timing the steps both ways.
//
// Whether the prefetch pays depends on how well the early query estimate predicts a layer's
// pages (on SmolLM2's real text about two thirds of the pages it brings are then selected; on
// random weights far fewer, and at 128K on an H100 the step was 20% slower with it), on the host
// link and on the model's own work: things measured, not known in advance. So the tuner runs a
// probe: `probe_steps` steps with the prefetch, then as many without, compares the median step
// times of each side (the first step after a switch left out: it still fetches what the other
// side's steps left resident), keeps the faster for `hold_steps` steps and probes again. The
// prefetch wins only when it is faster by more than `margin`: it also moves pages that are not
// selected, so a tie goes to the side that crosses the host link less. What a step attends is
// the same either way (the prefetch only moves pages earlier), so the choice changes speed only.
#pragma once

#include <cstdint>
#include <vector>

namespace icecache {

class PrefetchTuner {
 public:
  struct Params {
    int probe_steps = 6;  // steps per side of a probe (at least 2)
    int hold_steps = 250;
    double margin = 0.02;
  };
  PrefetchTuner();
  explicit PrefetchTuner(Params params);

  // Whether the next step prefetches.
  bool wanted() const;
  // The time of the step that just ran with wanted() as it was before this call.
  void Observe(double step_seconds);
  // A new decode loop (request) starts: a probe under way starts over, since its steps so far ran
  // at another context length (a bench's short warm-up, another request); a choice is kept.
  void NewRun();

  // The last finished probe: median step seconds with and without the prefetch (0: none yet).
  double probe_on_seconds() const { return on_s_; }
  double probe_off_seconds() const { return off_s_; }
  int64_t probes() const { return probes_; }

 private:
  enum class Phase { kProbeOn, kProbeOff, kHold };
  Params p_;
  Phase phase_ = Phase::kProbeOn;
  int steps_ = 0;  // steps in the current phase
  bool hold_on_ = false;
  std::vector<double> on_, off_;  // the current probe's timed steps
  double on_s_ = 0, off_s_ = 0;
  int64_t probes_ = 0;
};

}  // namespace icecache
