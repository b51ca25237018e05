// Fork-join thread pool used by the kernels: spin briefly, then block.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/denormals.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MIMO_CPU_RELAX() _mm_pause()
#else
#define MIMO_CPU_RELAX() ((void)0)
#endif

namespace mimo {
namespace {

// Spins until done() or about kSpinMicros have passed; true if done() became true.
template <typename Pred>
bool SpinUntil(Pred done) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      MIMO_CPU_RELAX();
    }
    if (Clock::now() >= deadline) return done();
  }
}

void ChunkOf(int64_t n, int parts, int i, int64_t* b, int64_t* e) {
  int64_t base = n / parts, rem = n % parts;
  *b = i * base + std::min<int64_t>(i, rem);
  *e = *b + base + (i < rem ? 1 : 0);
}

}  // namespace

int ThreadPool::MaxThreads() {
  return std::max(kMaxThreads, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  MIMO_CHECK(num_threads <= MaxThreads(), "a pool of %d threads: at most %d", num_threads,
             MaxThreads());
  done_ = std::make_unique<DoneSlot[]>(static_cast<size_t>(num_threads));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  ++regions_;
  ScopedFlushDenormals ftz_daz;  // the caller computes its chunk like a worker (denormals.h)
  const int parts = num_threads();
  if (parts == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  uint64_t gen;
  {
    // Under the mutex so that a worker between its predicate check and its wait cannot miss it.
    std::lock_guard<std::mutex> lock(mu_);
    gen = generation_.fetch_add(1, std::memory_order_release) + 1;
  }
  cv_start_.notify_all();
  int64_t b, e;
  ChunkOf(n, parts, 0, &b, &e);
  if (b < e) fn(b, e, 0);
  // Workers finish in roughly their order; resume the scan at the first one not yet seen done.
  int next = 0;
  auto done = [&] {
    while (next < parts - 1 && done_[next].gen.load(std::memory_order_acquire) == gen) ++next;
    return next == parts - 1;
  };
  if (!SpinUntil(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_waiting_.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the Dekker fence (thread_pool.h)
    cv_done_.wait(lock, done);
    caller_waiting_.store(false, std::memory_order_relaxed);
  }
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  EnableFlushDenormals();  // compute threads flush denormals (core/denormals.h)
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!SpinUntil(ready)) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_start_.wait(lock, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    const auto* fn = fn_;
    const int64_t n = n_;
    int64_t b, e;
    ChunkOf(n, num_threads(), index, &b, &e);
    if (b < e) (*fn)(b, e, index);
    // Store, fence, load, against the caller's store of caller_waiting_, fence, load of done_:
    // either it sees this slot or this worker sees it waiting and wakes it (thread_pool.h).
    done_[index - 1].gen.store(seen, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (caller_waiting_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller may be between its check and its wait
      cv_done_.notify_one();
    }
  }
}

}  // namespace mimo
