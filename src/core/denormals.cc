// x86 MXCSR FTZ (bit 15) and DAZ (bit 6); AArch64 FPCR.FZ (bit 24), which flushes denormal inputs
// and results of single- and double-precision arithmetic alike: see denormals.h.
#include "core/denormals.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MIMO_HAVE_MXCSR 1
#endif

namespace mimo {
namespace {
#ifdef MIMO_HAVE_MXCSR
constexpr uint32_t kFlush = (1u << 15) | (1u << 6);  // FTZ | DAZ
uint32_t ReadControl() { return _mm_getcsr(); }
void WriteControl(uint32_t v) { _mm_setcsr(v); }
#elif defined(__aarch64__)
#define MIMO_HAVE_FLUSH_CONTROL 1
constexpr uint32_t kFlush = 1u << 24;  // FPCR.FZ; FPCR's bits above 31 are reserved (zero)
uint32_t ReadControl() {
  uint64_t v;
  __asm__ volatile("mrs %0, fpcr" : "=r"(v));
  return static_cast<uint32_t>(v);
}
void WriteControl(uint32_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(uint64_t{v})); }
#endif
}  // namespace

#if defined(MIMO_HAVE_MXCSR) || defined(MIMO_HAVE_FLUSH_CONTROL)
void EnableFlushDenormals() { WriteControl(ReadControl() | kFlush); }
bool FlushDenormalsEnabled() { return (ReadControl() & kFlush) == kFlush; }
ScopedFlushDenormals::ScopedFlushDenormals() : saved_(ReadControl()) {
  if ((saved_ & kFlush) != kFlush) WriteControl(saved_ | kFlush);
}
ScopedFlushDenormals::~ScopedFlushDenormals() {
  if (ReadControl() != saved_) WriteControl(saved_);
}
#else
void EnableFlushDenormals() {}
bool FlushDenormalsEnabled() { return true; }
ScopedFlushDenormals::ScopedFlushDenormals() {}
ScopedFlushDenormals::~ScopedFlushDenormals() {}
#endif

}  // namespace mimo
