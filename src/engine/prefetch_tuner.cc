#include "engine/prefetch_tuner.h"

#include <algorithm>

namespace icecache {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

PrefetchTuner::PrefetchTuner() : PrefetchTuner(Params()) {}

PrefetchTuner::PrefetchTuner(Params params) : p_(params) {
  p_.probe_steps = std::max(2, p_.probe_steps);
  p_.hold_steps = std::max(1, p_.hold_steps);
}

bool PrefetchTuner::wanted() const {
  switch (phase_) {
    case Phase::kProbeOn:
      return true;
    case Phase::kProbeOff:
      return false;
    case Phase::kHold:
      return hold_on_;
  }
  return false;
}

void PrefetchTuner::Observe(double step_seconds) {
  ++steps_;
  switch (phase_) {
    case Phase::kProbeOn:
      if (steps_ > 1) on_.push_back(step_seconds);
      if (steps_ == p_.probe_steps) {
        phase_ = Phase::kProbeOff;
        steps_ = 0;
      }
      return;
    case Phase::kProbeOff:
      if (steps_ > 1) off_.push_back(step_seconds);
      if (steps_ == p_.probe_steps) {
        on_s_ = Median(on_);
        off_s_ = Median(off_);
        hold_on_ = on_s_ < off_s_ * (1.0 - p_.margin);
        on_.clear();
        off_.clear();
        ++probes_;
        phase_ = Phase::kHold;
        steps_ = 0;
      }
      return;
    case Phase::kHold:
      if (steps_ == p_.hold_steps) {
        phase_ = Phase::kProbeOn;
        steps_ = 0;
      }
      return;
  }
}

void PrefetchTuner::NewRun() {
  if (phase_ == Phase::kHold) return;
  phase_ = Phase::kProbeOn;
  steps_ = 0;
  on_.clear();
  off_.clear();
}

}  // namespace icecache
