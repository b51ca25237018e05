// Integer ranges as digit automata: split by length, then the classic prefix/middle/suffix split
// of a fixed-length range.
#include "grammar/number_range.h"

#include <cmath>
#include <string>
#include <vector>

namespace mimo {
namespace {

// Same-length digit strings lo <= s <= hi.
Nfa::Frag FixedLength(const std::string& lo, const std::string& hi, Nfa* nfa) {
  if (lo.empty()) return nfa->Empty();
  const bool lo_rest_min = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_rest_max = hi.find_first_not_of('9', 1) == std::string::npos;
  const size_t rest = lo.size() - 1;
  auto any_digits = [&](size_t n) {
    std::vector<Nfa::Frag> parts;
    for (size_t i = 0; i < n; ++i) parts.push_back(nfa->Bytes('0', '9'));
    return nfa->Seq(parts);
  };
  if (lo[0] == hi[0]) {
    return nfa->Seq(nfa->Bytes(lo[0], lo[0]), FixedLength(lo.substr(1), hi.substr(1), nfa));
  }
  if (lo_rest_min && hi_rest_max) return nfa->Seq(nfa->Bytes(lo[0], hi[0]), any_digits(rest));
  std::vector<Nfa::Frag> alts;
  char mid_lo = lo[0], mid_hi = hi[0];
  if (!lo_rest_min) {
    alts.push_back(nfa->Seq(nfa->Bytes(lo[0], lo[0]),
                            FixedLength(lo.substr(1), std::string(rest, '9'), nfa)));
    ++mid_lo;
  }
  if (!hi_rest_max) {
    alts.push_back(nfa->Seq(nfa->Bytes(hi[0], hi[0]),
                            FixedLength(std::string(rest, '0'), hi.substr(1), nfa)));
    --mid_hi;
  }
  if (mid_lo <= mid_hi) alts.push_back(nfa->Seq(nfa->Bytes(mid_lo, mid_hi), any_digits(rest)));
  return nfa->Alt(alts);
}

int64_t Pow10(int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

// Inward-rounded integer bounds [lo, hi] of the integers satisfying b (clamped to +-kLimit).
bool IntegerBounds(const NumericBounds& b, int64_t* lo, int64_t* hi) {
  const double kL = static_cast<double>(NumberRange::kLimit);
  double l = -kL, h = kL;
  if (b.minimum) {
    double m = *b.minimum;
    double c = std::ceil(m);
    if (b.exclusive_minimum && c == m) c += 1;
    l = std::max(l, c);
  }
  if (b.maximum) {
    double m = *b.maximum;
    double f = std::floor(m);
    if (b.exclusive_maximum && f == m) f -= 1;
    h = std::min(h, f);
  }
  if (l > h) return false;
  *lo = static_cast<int64_t>(l);
  *hi = static_cast<int64_t>(h);
  return true;
}

Nfa::Frag SignedRange(int64_t lo, int64_t hi, Nfa* nfa) {
  std::vector<Nfa::Frag> alts;
  if (hi >= 0) alts.push_back(NumberRange::Digits(std::max<int64_t>(lo, 0), hi, nfa));
  if (lo < 0) {
    alts.push_back(nfa->Seq(nfa->Literal("-"),
                            NumberRange::Digits(std::max<int64_t>(-hi, 1), -lo, nfa)));
  }
  return nfa->Alt(alts);
}

// A magnitude bound: the value, whether it is excluded, or none (infinite).
struct Bound {
  bool finite = false;
  int64_t v = 0;
  bool exclusive = false;
};

// "I" or "I.F" spellings of magnitudes m = I + 0.F in [a, b] (a finite, >= 0).
void MagnitudePieces(Bound a, Bound b, Nfa* nfa, std::vector<Nfa::Frag>* out) {
  auto any_fraction = [&] {
    return nfa->Opt(nfa->Seq(nfa->Literal("."), nfa->Plus(nfa->Bytes('0', '9'))));
  };
  auto nonzero_fraction = [&] {
    return nfa->Seq({nfa->Literal("."), nfa->Star(nfa->Bytes('0', '9')), nfa->Bytes('1', '9'),
                     nfa->Star(nfa->Bytes('0', '9'))});
  };
  auto zero_fraction = [&] { return nfa->Opt(nfa->Seq(nfa->Literal("."), nfa->Plus(nfa->Literal("0")))); };
  const int64_t core_lo = a.exclusive ? a.v + 1 : a.v;
  const int64_t core_hi = b.finite ? b.v - 1 : NumberRange::kLimit;
  if (core_lo <= core_hi) {
    out->push_back(nfa->Seq(NumberRange::Digits(core_lo, core_hi, nfa), any_fraction()));
  }
  // Just above an excluded lower bound: a.v + a nonzero fraction (below b, which is > a.v).
  if (a.exclusive && (!b.finite || b.v > a.v) && a.v <= NumberRange::kLimit) {
    out->push_back(nfa->Seq(NumberRange::Digits(a.v, a.v, nfa), nonzero_fraction()));
  }
  // An included upper bound itself.
  if (b.finite && !b.exclusive && (a.exclusive ? b.v > a.v : b.v >= a.v)) {
    out->push_back(nfa->Seq(NumberRange::Digits(b.v, b.v, nfa), zero_fraction()));
  }
}

}  // namespace

Nfa::Frag NumberRange::Digits(int64_t lo, int64_t hi, Nfa* nfa) {
  std::vector<Nfa::Frag> alts;
  for (int len = 1; len <= 18; ++len) {
    const int64_t first = len == 1 ? 0 : Pow10(len - 1);
    const int64_t last = Pow10(len) - 1;
    const int64_t l = std::max(lo, first), h = std::min(hi, last);
    if (l > h) continue;
    alts.push_back(FixedLength(std::to_string(l), std::to_string(h), nfa));
  }
  return nfa->Alt(alts);
}

StatusOr<Nfa::Frag> NumberRange::Integer(const NumericBounds& b, Nfa* nfa) {
  int64_t lo, hi;
  if (!IntegerBounds(b, &lo, &hi))
    return InvalidArgument("JSON schema: no integer satisfies the minimum/maximum bounds");
  return SignedRange(lo, hi, nfa);
}

StatusOr<Nfa::Frag> NumberRange::Number(const NumericBounds& b, Nfa* nfa) {
  if (!b.minimum && !b.maximum) {
    Nfa::Frag mant = nfa->Seq(SignedRange(-kLimit, kLimit, nfa),
                              nfa->Opt(nfa->Seq(nfa->Literal("."), nfa->Plus(nfa->Bytes('0', '9')))));
    Nfa::Frag exp = nfa->Seq({nfa->Alt({nfa->Literal("e"), nfa->Literal("E")}),
                              nfa->Opt(nfa->Alt({nfa->Literal("+"), nfa->Literal("-")})),
                              nfa->Bytes('0', '9'), nfa->Opt(nfa->Bytes('0', '9'))});
    return nfa->Seq(mant, nfa->Opt(exp));
  }
  // Integer-valued bounds (non-integer ones rounded inward to the integer that keeps validity).
  const double kL = static_cast<double>(kLimit);
  Bound lo, hi;  // on the value
  if (b.minimum && *b.minimum > -kL) {
    const double m = *b.minimum, c = std::ceil(m);
    lo = {true, static_cast<int64_t>(std::min(c, kL)), b.exclusive_minimum && c == m};
  }
  if (b.maximum && *b.maximum < kL) {
    const double m = *b.maximum, f = std::floor(m);
    hi = {true, static_cast<int64_t>(std::max(f, -kL)), b.exclusive_maximum && f == m};
  }
  if (lo.finite && hi.finite &&
      (lo.v > hi.v || (lo.v == hi.v && (lo.exclusive || hi.exclusive))))
    return InvalidArgument("JSON schema: no number satisfies the minimum/maximum bounds");
  std::vector<Nfa::Frag> alts;
  // x >= 0: magnitude in [max(lo, 0), hi].
  if (!hi.finite || hi.v > 0 || (hi.v == 0 && !hi.exclusive)) {
    Bound a = {true, 0, false};
    if (lo.finite && lo.v >= 0) a = lo;
    MagnitudePieces(a, hi, nfa, &alts);
  }
  // x < 0: magnitude M = -x in (max(-hi, 0), -lo].
  if (!lo.finite || lo.v < 0) {
    Bound a = {true, 0, true};
    if (hi.finite && hi.v < 0) a = {true, -hi.v, hi.exclusive};
    Bound m = lo.finite ? Bound{true, -lo.v, lo.exclusive} : Bound{};
    std::vector<Nfa::Frag> neg;
    MagnitudePieces(a, m, nfa, &neg);
    if (!neg.empty()) alts.push_back(nfa->Seq(nfa->Literal("-"), nfa->Alt(neg)));
  }
  return nfa->Alt(alts);
}

}  // namespace mimo
