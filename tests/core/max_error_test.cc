// MaxError: the maximum the numerical tests bound. A NaN or infinite element must make it fail any
// bound, which the std::max / std::fmax accumulators it replaced did not.
#include "core/max_error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

namespace mimo::test {
namespace {

TEST(MaxError, TracksLargestFiniteDifference) {
  MaxError e;
  const std::vector<double> want = {1.0, 2.0, 3.0}, got = {1.5, 1.0, 3.25};
  for (size_t i = 0; i < want.size(); ++i) e.Add(want[i], got[i], i);
  EXPECT_EQ(e.max, 1.0);
  EXPECT_EQ(e.worst, 1);
  EXPECT_EQ(e.non_finite, 0);
}

TEST(MaxError, NanAnywhereFailsTheBound) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int at : {0, 3, 6}) {
    std::vector<double> got(7, 1.0);
    got[at] = nan;
    MaxError e;
    double blind = 0;  // what the old tests computed
    for (int i = 0; i < 7; ++i) {
      e.Add(1.0, got[i], i);
      blind = std::max(blind, std::abs(1.0 - got[i]));
    }
    EXPECT_FALSE(e.max < 1e-5) << "NaN at " << at;
    EXPECT_EQ(e.non_finite, 1);
    EXPECT_EQ(e.first_bad, at);
    // std::max(acc, NaN) is acc (acc < NaN is false): the old accumulator never saw it.
    EXPECT_LT(blind, 1e-5);
    EXPECT_EQ(std::fmax(0.0, nan), 0.0);  // fmax is NaN-blind too
  }
  MaxError inf;
  inf.Add(1.0, std::numeric_limits<double>::infinity(), 0);
  inf.Add(1.0, 1.0, 1);
  EXPECT_TRUE(std::isinf(inf.max));
  std::ostringstream os;
  os << inf;
  EXPECT_NE(os.str().find("1 non-finite, first at 0"), std::string::npos) << os.str();
}

}  // namespace
}  // namespace mimo::test
