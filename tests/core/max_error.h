// The largest elementwise error of a result, in a form a NaN cannot hide from.
//
// `std::max(acc, d)` returns `acc` when `d` is NaN (the comparison `acc < NaN` is false), and
// `std::fmax` ignores a NaN argument by definition, so a maximum accumulated with either never
// sees a NaN output: a bound on it passes however many outputs are NaN. MaxError looks at each
// element: a difference that is not finite makes the maximum +inf (so any `EXPECT_LT(max, tol)`
// fails) and is counted, with the first index, for the failure message.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>

namespace mimo::test {

struct MaxError {
  double max = 0;          // largest |difference|; +inf once any difference is not finite
  double max_finite = 0;   // largest finite |difference|
  int64_t worst = -1;      // index of max_finite
  int64_t non_finite = 0;  // how many differences were NaN or infinite
  int64_t first_bad = -1;  // index of the first of them

  // Records an error measure (>= 0, or not finite) for element `index`.
  void Add(double err, int64_t index) {
    if (!std::isfinite(err)) {
      if (non_finite++ == 0) first_bad = index;
      max = std::numeric_limits<double>::infinity();
      return;
    }
    if (worst < 0 || err > max_finite) {
      max_finite = err;
      worst = index;
    }
    if (non_finite == 0) max = max_finite;
  }
  void Add(double want, double got, int64_t index) { Add(std::abs(want - got), index); }
};

inline std::ostream& operator<<(std::ostream& os, const MaxError& e) {
  os << "max error " << e.max << " (largest finite " << e.max_finite << " at " << e.worst << ")";
  if (e.non_finite) os << ", " << e.non_finite << " non-finite, first at " << e.first_bad;
  return os;
}

}  // namespace mimo::test
