// Progress of an eval matrix on stderr: runs done of runs to do, elapsed time and an ETA from
// the work done so far (weighted by tokens, since a 8K sample costs more than a 2K one).
#pragma once

#include <cstdint>
#include <string>

namespace icecache::eval {

class ProgressMeter {
 public:
  enum class Mode { kAuto, kAlways, kNever };  // kAuto: only when stderr is a terminal

  ProgressMeter(int64_t total_runs, double total_work, Mode mode);
  ~ProgressMeter();

  // One run finished; `work` is its share of total_work; `label` names the next thing done.
  void Advance(double work, const std::string& label);
  // Work done that is not a run of its own (a prefill shared by several runs).
  void AddWork(double work, const std::string& label);
  void Finish();

  // "1h02m", "3m05s", "42s".
  static std::string FormatDuration(double seconds);

 private:
  void Draw(const std::string& label, bool force);

  int64_t total_runs_;
  int64_t runs_ = 0;
  double total_work_;
  double work_ = 0;
  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  double start_;
  double last_draw_ = -1e9;
};

}  // namespace icecache::eval
