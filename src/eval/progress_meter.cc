#include "eval/progress_meter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <unistd.h>

#include "core/process.h"

namespace icecache::eval {

ProgressMeter::ProgressMeter(int64_t total_runs, double total_work, Mode mode)
    : total_runs_(total_runs),
      total_work_(std::max(total_work, 1.0)),
      tty_(isatty(fileno(stderr)) != 0),
      start_(NowSeconds()) {
  enabled_ = total_runs > 0 && (mode == Mode::kAlways || (mode == Mode::kAuto && tty_));
}

ProgressMeter::~ProgressMeter() { Finish(); }

std::string ProgressMeter::FormatDuration(double seconds) {
  const int64_t s = std::llround(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

void ProgressMeter::Advance(double work, const std::string& label) {
  ++runs_;
  work_ += work;
  Draw(label, runs_ == total_runs_);
}

void ProgressMeter::AddWork(double work, const std::string& label) {
  work_ += work;
  Draw(label, false);
}

void ProgressMeter::Draw(const std::string& label, bool force) {
  if (!enabled_) return;
  const double now = NowSeconds();
  // A terminal redraws in place; a log gets a line every 10 s at most.
  if (!force && now - last_draw_ < (tty_ ? 0.2 : 10.0)) return;
  last_draw_ = now;
  const double elapsed = now - start_;
  const double frac = std::clamp(work_ / total_work_, 0.0, 1.0);
  const std::string eta =
      work_ > 0 && runs_ > 0 ? FormatDuration(elapsed * (1 - frac) / frac) : std::string("?");
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(frac * kWidth);
  const std::string line = fmt::format("eval [{}{}] {}/{} runs, {} elapsed, ETA {}  {}",
                                       std::string(filled, '#'), std::string(kWidth - filled, '.'),
                                       runs_, total_runs_, FormatDuration(elapsed), eta, label);
  std::fprintf(stderr, "%s%s%s", tty_ ? "\r" : "", line.c_str(), tty_ ? "\033[K" : "\n");
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressMeter::Finish() {
  if (drawn_ && tty_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  drawn_ = false;
}

}  // namespace icecache::eval
