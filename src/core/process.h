// Facts about the running process.
#pragma once

#include <cstdint>

namespace icecache {

// Peak resident set size of this process so far, in bytes.
int64_t PeakRssBytes();
// Monotonic wall clock in seconds.
double NowSeconds();

}  // namespace icecache
