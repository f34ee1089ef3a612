#include "engine/stop_matcher.h"

#include <algorithm>

namespace icecache {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  held_.append(text);
  // Earliest full match of any stop string.
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace icecache
