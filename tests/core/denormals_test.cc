// Every ThreadPool worker and the caller inside a region compute with FTZ/DAZ; outside a region
// the caller's MXCSR is restored.
#include "core/denormals.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cfloat>
#include <cstring>

#include "core/thread_pool.h"

namespace mimo {
namespace {

// A denormal input to a multiply: 0 under DAZ, denormal otherwise (volatile: no constant folding).
float MulDenormal() {
  volatile float d = FLT_MIN / 4, one = 1.0f;
  return d * one;
}

TEST(Denormals, ScopedGuardSetsAndRestores) {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  const bool before = FlushDenormalsEnabled();
  {
    ScopedFlushDenormals g;
    EXPECT_TRUE(FlushDenormalsEnabled());
    EXPECT_EQ(MulDenormal(), 0.0f);
  }
  EXPECT_EQ(FlushDenormalsEnabled(), before);
  if (!before) {
    EXPECT_EQ(MulDenormal(), FLT_MIN / 4);
  }
#endif
}

TEST(Denormals, EveryThreadOfARegionFlushes) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    std::atomic<int> flushing{0}, zero{0};
    pool.ParallelFor(threads, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        flushing += FlushDenormalsEnabled() ? 1 : 0;
        zero += MulDenormal() == 0.0f ? 1 : 0;
      }
    });
    EXPECT_EQ(flushing.load(), threads);
    EXPECT_EQ(zero.load(), threads);
  }
}

}  // namespace
}  // namespace mimo
