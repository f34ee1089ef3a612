// A progress bar on stderr for long work (prefill): silent for the first second, then redrawn
// in place with a rate and ETA. Shown only when stderr is a terminal unless forced.
#pragma once

#include <cstdint>
#include <string>

namespace icecache::cli {

enum class ProgressMode { kAuto, kAlways, kNever };
bool ParseProgressMode(const std::string& s, ProgressMode* out);

class ProgressBar {
 public:
  ProgressBar(std::string label, ProgressMode mode);
  ~ProgressBar();
  void Update(int64_t done, int64_t total);
  // Clears the bar line (if drawn).
  void Finish();

 private:
  std::string label_;
  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  double start_;
  double last_draw_ = 0;
};

}  // namespace icecache::cli
