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

uint8_t EncodeF8E4M3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f) {  // below the smallest normal 2^-6: subnormal steps of 2^-9
    // nearbyint rounds half to even in the default mode; 8 steps carry into exponent 1.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  const uint32_t u = F32ToBits(a);
  const int exp = static_cast<int>(u >> 23) - 127 + 7;  // 1..8 here
  const uint32_t man = u & 0x7fffffu;
  uint32_t code = (static_cast<uint32_t>(exp) << 3) | (man >> 20);
  const uint32_t rest = man & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ++code;  // carry may bump exp
  if (code > 0x7eu) code = 0x7e;
  return sign | static_cast<uint8_t>(code);
}

}  // namespace mimo
