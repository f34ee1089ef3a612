// ICECACHE_CHECK: aborts with file:line for broken internal invariants only. Anything a user or
// a request can cause must return a Status instead (see include/icecache/status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

#define ICECACHE_CHECK(cond)                                                                 \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: internal check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

#define ICECACHE_CHECK_MSG(cond, msg)                                                            \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      std::fprintf(stderr, "%s:%d: internal check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   msg);                                                                         \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)
