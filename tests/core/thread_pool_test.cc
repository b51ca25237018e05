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

}  // namespace
}  // namespace mimo
