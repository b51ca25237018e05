// A persistent fork-join pool. ParallelFor splits [0, n) into contiguous chunks, one per worker;
// the calling thread takes part. Not re-entrant: a task must not call ParallelFor on the same pool.
// Thread-safety: one caller at a time (the engine thread).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mimo {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // total threads including the caller; <= 0 -> hardware
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end, thread_index) over disjoint ranges covering [0, n).
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

// Everything compute needs, passed by reference (never a global).
struct ExecContext {
  ThreadPool* pool = nullptr;
};

}  // namespace mimo
