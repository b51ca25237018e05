// NumberRange: JSON integers and numbers within bounds, as Nfa fragments over their decimal
// spelling. Integers are within +-(2^53 - 1), I-JSON's interoperable range (RFC 7493 2.2:
// JavaScript's Number.MAX_SAFE_INTEGER; clients such as the Anthropic SDK's zod parser reject
// anything beyond, and bounds they hold back from the schema cannot be seen here); numbers have
// an integer part in that range too, any fraction, and (without bounds) an exponent of at most
// two digits. Bounds are
// exact (decimal comparison of the integer part, then of the fraction digits); with bounds no
// exponent is written. A bound with more than 30 fraction digits is rounded toward the inside.
#pragma once

#include <cstdint>
#include <optional>

#include "core/status.h"
#include "grammar/nfa.h"

namespace mimo {

struct NumericBounds {
  std::optional<double> minimum, maximum;  // as given
  bool exclusive_minimum = false, exclusive_maximum = false;
};

class NumberRange {
 public:
  static constexpr int64_t kLimit = 9007199254740991;  // 2^53 - 1

  static StatusOr<Nfa::Frag> Integer(const NumericBounds& b, Nfa* nfa);
  static StatusOr<Nfa::Frag> Number(const NumericBounds& b, Nfa* nfa);
  // Decimal spellings (no sign, no leading zeros) of the integers in [lo, hi], 0 <= lo <= hi.
  static Nfa::Frag Digits(int64_t lo, int64_t hi, Nfa* nfa);
};

}  // namespace mimo
