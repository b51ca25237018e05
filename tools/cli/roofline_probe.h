// The machine's limits as `mimo bench` measures them, in the same run as the code it judges:
// streaming read bandwidth (all threads, widest loads, independent accumulators, a buffer far
// larger than the last-level cache) and the fp32 FMA peak of the instructions the Linear T > 1
// tiles issue. Both run the given kernel table's probes (kernels/cpu/roofline_probe_*.cc).
#pragma once

#include <cstddef>
#include <string>

#include "core/thread_pool.h"
#include "kernels/dispatch.h"

namespace mimo::cli {

// The benchmark clock, in seconds. Wall time by default; with --clock cpu, process CPU time
// divided by the thread count, which approximates the wall time of an unshared machine when
// other processes time-slice ours (the development VMs run several agents on 2 cores).
double BenchNow();
// "wall" | "cpu" (threads: the divisor of the cpu clock); false on anything else.
bool SetBenchClock(const std::string& clock, int threads);
bool BenchClockIsCpu();

// Best of `reps` full reads of a `bytes` buffer (first touched in parallel), in GB/s (1e9 B/s).
// now(): the benchmark's clock in seconds.
double MeasureReadBandwidth(ThreadPool& pool, const KernelTable& k, size_t bytes, int reps,
                            double (*now)());

// Best of `reps` rounds of ~`seconds` of independent FMAs on every thread, in GFLOP/s.
// probe: KernelTable::fma_probe, or bf16_dot_probe for the bf16 prompt kernels.
using PeakProbe = double (*)(int64_t iters, float* sink);
double MeasurePeakGflops(ThreadPool& pool, PeakProbe probe, double seconds, int reps,
                         double (*now)());

// The cost of one empty fork-join region on `pool` (workers awake, regions back to back, as in
// decode): the best of `reps` runs of `regions` regions, in seconds per region. Every region a
// decode step runs pays at least this in synchronisation.
double MeasureRegionSeconds(ThreadPool& pool, int regions, int reps, double (*now)());

}  // namespace mimo::cli
