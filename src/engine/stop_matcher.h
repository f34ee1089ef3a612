// Stop strings over streamed text: text is released only once it can no longer be the start of
// a stop string, and generation ends before the first full match.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace icecache {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds generated text. Returns the text that is now safe to emit. Sets stopped() when a stop
  // string completed (the stop string and anything after it are never emitted).
  std::string Push(std::string_view text);
  // Text still held back (call when generation ends without a stop).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace icecache
