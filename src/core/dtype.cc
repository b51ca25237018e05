// fp32 -> float8_e4m3fn conversion (the slow direction; decoding is inline in dtype.h).
#include "core/dtype.h"

#include <cmath>

namespace mimo {

uint8_t F32ToF8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  // Exhaustive nearest search over the 127 non-negative finite codes: simple and exact.
  uint8_t best = 0;
  float best_err = a;
  for (uint8_t c = 1; c <= 0x7e; ++c) {
    float v = F8E4M3ToF32(c);
    float err = std::fabs(v - a);
    if (err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_err = err;
    }
  }
  return sign | best;
}

}  // namespace mimo
