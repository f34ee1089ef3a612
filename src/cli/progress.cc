#include "cli/progress.h"

#include <cstdio>

#include <unistd.h>

#include "core/process.h"

namespace icecache::cli {

bool ParseProgressMode(const std::string& s, ProgressMode* out) {
  if (s == "auto")
    *out = ProgressMode::kAuto;
  else if (s == "always")
    *out = ProgressMode::kAlways;
  else if (s == "never")
    *out = ProgressMode::kNever;
  else
    return false;
  return true;
}

ProgressBar::ProgressBar(std::string label, ProgressMode mode)
    : label_(std::move(label)), tty_(isatty(fileno(stderr)) != 0), start_(NowSeconds()) {
  enabled_ = mode == ProgressMode::kAlways || (mode == ProgressMode::kAuto && tty_);
}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(int64_t done, int64_t total) {
  if (!enabled_ || total <= 0) return;
  const double now = NowSeconds();
  const double elapsed = now - start_;
  if (elapsed < 1.0 && done < total) return;  // short work stays quiet
  if (elapsed < 1.0 && !drawn_) return;
  if (done < total && now - last_draw_ < (tty_ ? 0.1 : 1.0)) return;
  last_draw_ = now;
  const double frac = static_cast<double>(done) / static_cast<double>(total);
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  std::fprintf(stderr, "%s%s [%s] %3d%% %lld/%lld tokens, %.0f tok/s, ETA %.0fs%s",
               tty_ ? "\r" : "", label_.c_str(), bar.c_str(), static_cast<int>(frac * 100),
               static_cast<long long>(done), static_cast<long long>(total), rate, eta,
               tty_ ? "\033[K" : "\n");
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (drawn_ && tty_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
  drawn_ = false;
}

}  // namespace icecache::cli
