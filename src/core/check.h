// MIMO_CHECK: always-on invariant checks that abort with file:line and a formatted message.
// MIMO_DCHECK: the same, compiled only when MIMO_DEBUG_CHECKS is defined (sanitizer presets).
#pragma once

#include <cstdio>
#include <cstdlib>

#define MIMO_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: MIMO_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, "" __VA_ARGS__);                                       \
      std::fprintf(stderr, "\n");                                                 \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

#define MIMO_ABORT(...)                                          \
  do {                                                           \
    std::fprintf(stderr, "%s:%d: fatal: ", __FILE__, __LINE__);  \
    std::fprintf(stderr, "" __VA_ARGS__);                        \
    std::fprintf(stderr, "\n");                                  \
    std::abort();                                                \
  } while (0)

#ifdef MIMO_DEBUG_CHECKS
#define MIMO_DCHECK(cond, ...) MIMO_CHECK(cond, __VA_ARGS__)
#else
#define MIMO_DCHECK(cond, ...) \
  do {                         \
  } while (0)
#endif
