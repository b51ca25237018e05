// Flush-to-zero / denormals-are-zero (x86 MXCSR FTZ + DAZ, AArch64 FPCR.FZ) for compute threads.
//
// Intel cores take a microcode assist (~100+ cycles) on every SSE/AVX operation whose input or
// result is an fp32 denormal; a GEMV over denormal-laden data ran 5x slower on the Xeon hosts
// (docs/PERFORMANCE.md). Model math never needs values below 2^-126: with DAZ such an input reads
// as (signed) zero, with FTZ such a result is written as zero. Every ThreadPool worker sets both
// for its lifetime; the calling thread holds a ScopedFlushDenormals while it computes (each
// ParallelFor region, each model Forward), so code outside compute keeps the IEEE default.
// Thread-safety: MXCSR and FPCR are per thread; these touch only the calling thread's.
#pragma once

#include <cstdint>

namespace mimo {

// Sets FTZ|DAZ in the calling thread until the end of the program (thread pool workers).
void EnableFlushDenormals();
// True if both FTZ and DAZ (AArch64: FZ) are set in the calling thread (tests). Always true on
// other targets, which have no control here.
bool FlushDenormalsEnabled();

// Sets FTZ|DAZ in the calling thread for its lifetime and restores the previous MXCSR (FPCR).
class ScopedFlushDenormals {
 public:
  ScopedFlushDenormals();
  ~ScopedFlushDenormals();
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
  uint32_t saved_ = 0;
};

}  // namespace mimo
