// Developer switches read from the environment (ICECACHE_*, listed in the README's
// "Environment"): each turns one mechanism on or off, or fixes one tuning choice, for A/B runs
// (docs/PERF.md). Callers read a switch once: into a static, or into a member when the object
// that uses it is made.
#pragma once

#include <cstdlib>

namespace icecache {

// Unset or empty: `default_on`. Set: a switch that defaults on is off only for a value that
// starts with '0'; one that defaults off is on only for a value that starts with '1'.
inline bool EnvSwitch(const char* name, bool default_on) {
  const char* e = std::getenv(name);
  if (e == nullptr || e[0] == '\0') return default_on;
  return default_on ? e[0] != '0' : e[0] == '1';
}

// Unset or empty: `fallback`; else the value as std::atoi reads it (0 for text that is not a
// number).
inline int EnvInt(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e == nullptr || e[0] == '\0' ? fallback : std::atoi(e);
}

}  // namespace icecache
