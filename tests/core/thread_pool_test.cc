// ThreadPool::ParallelFor covers every index exactly once, for many n and thread counts.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace mimo {
namespace {

TEST(ThreadPool, CoversEachIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 3; ++rep) {
        pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 3) << threads << " " << n;
    }
  }
}

// Back-to-back regions (workers still spinning) and regions after idle gaps (workers asleep on
// the condition variable) both complete with every index covered once.
TEST(ThreadPool, ShortRegionsAndIdleGaps) {
  ThreadPool pool(2);
  std::vector<int64_t> sums(2, 0);
  int64_t expect = 0;
  for (int round = 0; round < 3; ++round) {
    for (int r = 0; r < 20000; ++r) {
      const int64_t n = 2 + r % 5;
      pool.ParallelFor(n, [&](int64_t b, int64_t e, int t) {
        for (int64_t i = b; i < e; ++i) sums[t] += i + 1;
      });
      expect += n * (n + 1) / 2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * round));
  }
  EXPECT_EQ(sums[0] + sums[1], expect);
  EXPECT_GT(sums[1], 0);  // the worker took part
}

// A worker whose chunk outlasts the caller's spin (kSpinMicros) finds the caller asleep on the
// condition variable and must wake it; chunk times around the spin limit race the caller's
// decision to sleep against the worker's report (a lost wake-up hangs here).
TEST(ThreadPool, SlowWorkersWakeASleepingCaller) {
  for (int threads : {2, 4}) {
    ThreadPool pool(threads);
    int64_t total = 0;
    for (int r = 0; r < 400; ++r) {
      const auto slow = std::chrono::microseconds(ThreadPool::kSpinMicros / 2 + (r % 8) * 25);
      std::vector<int64_t> got(threads, 0);
      pool.ParallelFor(threads, [&](int64_t b, int64_t e, int t) {
        if (t == (r % (threads - 1)) + 1) std::this_thread::sleep_for(slow);
        got[t] += e - b;
      });
      for (int64_t g : got) total += g;
    }
    EXPECT_EQ(total, 400 * threads);
  }
}

// regions() counts the calls that have work, the same at every thread count (bench model's
// many-core estimate multiplies it by the cost of a region at other counts).
TEST(ThreadPool, CountsRegionsWhateverTheThreadCount) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.regions(), 0u);
    for (int64_t n : {0, 1, 2, 5, 0, 64}) pool.ParallelFor(n, [](int64_t, int64_t, int) {});
    EXPECT_EQ(pool.regions(), 4u) << threads;
  }
}

}  // namespace
}  // namespace mimo
