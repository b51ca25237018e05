// NumberRange against brute force: every integer spelling in a window is accepted exactly when
// the bounds allow it; number spellings are accepted only when their value is within bounds, and
// every canonical decimal within integer-valued bounds is accepted.
#include "grammar/number_range.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "grammar/dfa.h"

namespace mimo {
namespace {

struct Lang {
  Dfa dfa;
  bool Accepts(const std::string& s) const {
    int32_t q = 0;
    for (char c : s) {
      q = dfa.Next(q, static_cast<uint8_t>(c));
      if (q < 0) return false;
    }
    return dfa.accepting(q);
  }
};

Lang Compile(const NumericBounds& b, bool integer) {
  Nfa n;
  auto f = integer ? NumberRange::Integer(b, &n) : NumberRange::Number(b, &n);
  EXPECT_TRUE(f.ok()) << f.status().message();
  auto d = Dfa::Determinize(n, *f, 100000);
  EXPECT_TRUE(d.ok());
  return {d->Trimmed()};
}

bool InBounds(double x, const NumericBounds& b) {
  if (b.minimum && (b.exclusive_minimum ? x <= *b.minimum : x < *b.minimum)) return false;
  if (b.maximum && (b.exclusive_maximum ? x >= *b.maximum : x > *b.maximum)) return false;
  return true;
}

std::vector<NumericBounds> SomeBounds() {
  std::vector<NumericBounds> out;
  const std::vector<std::optional<double>> values = {std::nullopt, -1000, -17, -1, 0, 1, 9, 10,
                                                      99, 100, 123, 2.5, -2.5, 0.5, 0.05, -0.375,
                                                      17.125};
  for (auto lo : values) {
    for (auto hi : values) {
      if (lo && hi && *lo > *hi) continue;
      for (int ex = 0; ex < 4; ++ex) {
        NumericBounds b;
        b.minimum = lo;
        b.maximum = hi;
        b.exclusive_minimum = lo && (ex & 1);
        b.exclusive_maximum = hi && (ex & 2);
        if (lo && hi && *lo == *hi && ex) continue;
        out.push_back(b);
      }
    }
  }
  return out;
}

TEST(NumberRange, DigitsMatchBruteForce) {
  for (auto [lo, hi] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 0}, {0, 9}, {1, 9}, {5, 123}, {10, 99}, {7, 1000}, {99, 101}, {0, 2047}, {350, 351}}) {
    Nfa n;
    auto d = Dfa::Determinize(n, NumberRange::Digits(lo, hi, &n), 100000);
    ASSERT_TRUE(d.ok());
    Lang l{*d};
    for (int64_t v = 0; v <= 3000; ++v) {
      EXPECT_EQ(l.Accepts(std::to_string(v)), v >= lo && v <= hi) << v << " in [" << lo << "," << hi << "]";
    }
    EXPECT_FALSE(l.Accepts("0" + std::to_string(lo)));  // no leading zeros
    EXPECT_FALSE(l.Accepts(""));
  }
}

TEST(NumberRange, IntegersMatchBruteForce) {
  for (const NumericBounds& b : SomeBounds()) {
    bool any_valid = false;
    for (int v = -1200; v <= 1200; ++v) any_valid = any_valid || InBounds(v, b);
    if (!any_valid) {  // e.g. [2.5, 2.5]: refused, not an empty grammar
      Nfa n;
      auto f = NumberRange::Integer(b, &n);
      EXPECT_FALSE(f.ok());
      EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
      continue;
    }
    Lang l = Compile(b, /*integer=*/true);
    for (int v = -1200; v <= 1200; ++v) {
      ASSERT_EQ(l.Accepts(std::to_string(v)), InBounds(v, b))
          << v << " min " << b.minimum.value_or(NAN) << (b.exclusive_minimum ? " excl" : "")
          << " max " << b.maximum.value_or(NAN) << (b.exclusive_maximum ? " excl" : "");
    }
    EXPECT_FALSE(l.Accepts("-0"));
    EXPECT_FALSE(l.Accepts("1.0"));
  }
  Lang any = Compile({}, true);
  EXPECT_TRUE(any.Accepts("9007199254740991"));    // 2^53 - 1: the largest a double holds exactly
  EXPECT_TRUE(any.Accepts("-9007199254740991"));
  EXPECT_FALSE(any.Accepts("9007199254740992"));   // beyond I-JSON's range (RFC 7493)
  EXPECT_FALSE(any.Accepts("-9007199254740992"));
  EXPECT_FALSE(any.Accepts("10000000000000000"));  // 17 digits
}

// Bounds with fractions are exact too: the spelling is compared digit by digit.
TEST(NumberRange, NumbersAreWithinBoundsAndCoverCanonicalDecimals) {
  std::mt19937 rng(5);
  for (const NumericBounds& b : SomeBounds()) {
    Lang l = Compile(b, /*integer=*/false);
    for (int i = 0; i < 3000; ++i) {
      // Random canonical decimals: sign, integer part, optional fraction.
      const int ip = std::uniform_int_distribution<int>(0, 1200)(rng);
      std::string s = std::to_string(ip);
      if (rng() % 2) {
        s += ".";
        const int digits = 1 + rng() % 3;
        for (int d = 0; d < digits; ++d) s += static_cast<char>('0' + rng() % 10);
      }
      if (rng() % 2 && s != "0") s = "-" + s;
      const double x = std::stod(s);
      const bool in = InBounds(x, b);
      if (l.Accepts(s)) {
        ASSERT_TRUE(in) << s << " accepted outside the bounds";
      } else if (in && !(x == 0 && s[0] == '-')) {
        ASSERT_FALSE(in) << s << " refused inside the bounds";
      }
    }
  }
  Lang any = Compile({}, false);
  for (const char* ok : {"0", "-0.5", "12.25", "3e5", "1.5E-7", "-2e+10"}) EXPECT_TRUE(any.Accepts(ok)) << ok;
  for (const char* bad : {"01", ".5", "1.", "+1", "1e", "1e123", "NaN"}) EXPECT_FALSE(any.Accepts(bad)) << bad;
}

}  // namespace
}  // namespace mimo
