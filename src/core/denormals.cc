// MXCSR FTZ (bit 15) and DAZ (bit 6): see denormals.h.
#include "core/denormals.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MIMO_HAVE_MXCSR 1
#endif

namespace mimo {
namespace {
constexpr uint32_t kFtz = 1u << 15, kDaz = 1u << 6;
}  // namespace

#ifdef MIMO_HAVE_MXCSR
void EnableFlushDenormals() { _mm_setcsr(_mm_getcsr() | kFtz | kDaz); }
bool FlushDenormalsEnabled() { return (_mm_getcsr() & (kFtz | kDaz)) == (kFtz | kDaz); }
ScopedFlushDenormals::ScopedFlushDenormals() : saved_(_mm_getcsr()) {
  if ((saved_ & (kFtz | kDaz)) != (kFtz | kDaz)) _mm_setcsr(saved_ | kFtz | kDaz);
}
ScopedFlushDenormals::~ScopedFlushDenormals() {
  if (_mm_getcsr() != saved_) _mm_setcsr(saved_);
}
#else
void EnableFlushDenormals() {}
bool FlushDenormalsEnabled() { return true; }
ScopedFlushDenormals::ScopedFlushDenormals() {}
ScopedFlushDenormals::~ScopedFlushDenormals() {}
#endif

}  // namespace mimo
