// Read-bandwidth and FMA-peak probes for `mimo bench` (see roofline_probe.h).
#include "cli/roofline_probe.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace mimo::cli {
namespace {
bool g_cpu_clock = false;
int g_clock_threads = 1;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
}  // namespace

double BenchNow() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec + 1e-9 * ts.tv_nsec) / g_clock_threads;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool SetBenchClock(const std::string& clock, int threads) {
  if (clock != "wall" && clock != "cpu") return false;
  g_cpu_clock = clock == "cpu";
  g_clock_threads = std::max(1, threads);
  return true;
}

bool BenchClockIsCpu() { return g_cpu_clock; }

double MeasureReadBandwidth(ThreadPool& pool, const KernelTable& k, size_t bytes, int reps,
                            double (*now)()) {
  // Whole 4 KiB pages per thread, every thread's range a multiple of the probe's 512-byte step.
  const int parts = pool.num_threads();
  const size_t pages = std::max<size_t>(parts, bytes / 4096);
  std::unique_ptr<uint8_t, FreeDeleter> buf(
      static_cast<uint8_t*>(std::aligned_alloc(4096, pages * 4096)));
  uint8_t* p = buf.get();
  pool.ParallelFor(static_cast<int64_t>(pages), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) std::memset(p + i * 4096, static_cast<int>(i & 0x7f), 4096);
  });
  std::vector<uint64_t> sums(parts);
  double best = 0;
  uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    pool.ParallelFor(static_cast<int64_t>(pages), [&](int64_t b, int64_t e, int tid) {
      sums[tid] = k.read_probe(p + b * 4096, static_cast<size_t>(e - b) * 4096);
    });
    const double dt = now() - t0;
    for (uint64_t s : sums) sink += s;
    if (dt > 0) best = std::max(best, pages * 4096.0 / dt / 1e9);
  }
  if (sink == 42) best += 1e-12;  // keeps the sums observable
  return best;
}

double MeasurePeakGflops(ThreadPool& pool, PeakProbe probe, double seconds, int reps,
                         double (*now)()) {
  const int parts = pool.num_threads();
  std::vector<float> sink(parts * 16, 0.0f);  // one cache line per thread
  // Calibrate on one thread: iterations for ~seconds.
  int64_t iters = 1 << 16;
  for (;;) {
    const double t0 = now();
    probe(iters, &sink[0]);
    const double dt = now() - t0;
    if (dt > seconds / 8 || iters > (int64_t{1} << 34)) {
      iters = static_cast<int64_t>(iters * seconds / std::max(dt, 1e-9));
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> flops(parts, 0.0);
    const double t0 = now();
    pool.ParallelFor(parts, [&](int64_t b, int64_t e, int tid) {
      for (int64_t i = b; i < e; ++i) flops[tid] += probe(iters, &sink[tid * 16]);
    });
    const double dt = now() - t0;
    double total = 0;
    for (double f : flops) total += f;
    if (dt > 0) best = std::max(best, total / dt / 1e9);
  }
  float s = 0;
  for (float f : sink) s += f;
  if (s == 42.0f) best += 1e-12;
  return best;
}

double MeasureRegionSeconds(ThreadPool& pool, int regions, int reps, double (*now)()) {
  const int parts = pool.num_threads();
  std::vector<int64_t> touched(static_cast<size_t>(parts) * 8, 0);  // a cache line per thread
  auto empty = [&](int64_t b, int64_t e, int tid) { touched[tid * 8] += e - b; };
  for (int i = 0; i < 1000; ++i) pool.ParallelFor(parts, empty);  // wake the workers
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    for (int i = 0; i < regions; ++i) pool.ParallelFor(parts, empty);
    best = std::min(best, (now() - t0) / regions);
  }
  return best;
}

}  // namespace mimo::cli
