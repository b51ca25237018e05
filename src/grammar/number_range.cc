// Integer ranges as digit automata: split by length, then the classic prefix/middle/suffix split
// of a fixed-length range.
#include "grammar/number_range.h"

#include "grammar/dfa.h"

#include <charconv>
#include <cmath>
#include <optional>
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

// A bound on a magnitude: integer part, fraction digits (no trailing zeros), whether the bound
// itself is excluded; or none (infinite).
struct Bound {
  bool finite = false;
  int64_t i = 0;
  std::string f;
  bool exclusive = false;
};

// |v| as a decimal bound (fixed notation, at most 30 fraction digits, rounded toward the inside
// of the range: `up` rounds a truncated lower bound up, else a truncated upper bound down).
Bound MagnitudeBound(double v, bool exclusive, bool up) {
  char buf[400];
  auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(v), std::chars_format::fixed);
  std::string s(buf, res.ptr);
  Bound b;
  b.finite = true;
  b.exclusive = exclusive;
  const size_t dot = s.find('.');
  b.i = std::stoll(s.substr(0, dot));
  if (dot != std::string::npos) b.f = s.substr(dot + 1);
  if (b.f.size() > 30) {  // keep 30 digits; a lower bound moves up by one ulp of them
    b.f.resize(30);
    if (up) {
      int k = 29;
      while (k >= 0 && b.f[k] == '9') b.f[k--] = '0';
      if (k >= 0) {
        ++b.f[k];
      } else {
        ++b.i;
      }
    }
    b.exclusive = false;
  }
  while (!b.f.empty() && b.f.back() == '0') b.f.pop_back();
  return b;
}

Nfa::Frag AnyFraction(Nfa* n) {
  return n->Opt(n->Seq(n->Literal("."), n->Plus(n->Bytes('0', '9'))));
}

// Fractions f (the text after the integer part: "" or "." digits) with f >= F (f > F if strict).
Nfa::Frag FractionAtLeast(const std::string& F, bool strict, Nfa* n) {
  if (F.empty()) {
    if (!strict) return AnyFraction(n);
    return n->Seq({n->Literal("."), n->Star(n->Bytes('0', '9')), n->Bytes('1', '9'),
                   n->Star(n->Bytes('0', '9'))});
  }
  const int32_t end = n->AddState();
  int32_t cur = n->AddState();
  const int32_t start = cur;
  auto rest_any = [&]() {
    Nfa::Frag r = n->Star(n->Bytes('0', '9'));
    n->AddEpsilon(r.end, end);
    return r.start;
  };
  int32_t after_dot = n->AddState();
  n->AddRange(cur, '.', '.', after_dot);
  cur = after_dot;
  for (size_t i = 0; i < F.size(); ++i) {
    const char d = F[i];
    if (d < '9') n->AddRange(cur, d + 1, '9', rest_any());
    const int32_t next = n->AddState();
    n->AddRange(cur, d, d, next);
    cur = next;
  }
  // Equal so far through all of F: any rest (non-strict), or a nonzero digit to come (strict).
  Nfa::Frag tail = strict ? n->Seq({n->Star(n->Bytes('0', '9')), n->Bytes('1', '9'),
                                    n->Star(n->Bytes('0', '9'))})
                          : n->Star(n->Bytes('0', '9'));
  n->AddEpsilon(cur, tail.start);
  n->AddEpsilon(tail.end, end);
  return {start, end};
}

// Fractions f with f <= F (f < F if strict); none when strict and F is 0.
std::optional<Nfa::Frag> FractionAtMost(const std::string& F, bool strict, Nfa* n) {
  if (F.empty()) {
    if (strict) return std::nullopt;
    return n->Opt(n->Seq(n->Literal("."), n->Plus(n->Literal("0"))));
  }
  const int32_t start = n->AddState(), end = n->AddState();
  n->AddEpsilon(start, end);  // no fraction: .0 < F
  int32_t cur = n->AddState();
  n->AddRange(start, '.', '.', cur);
  for (size_t i = 0; i < F.size(); ++i) {
    const char d = F[i];
    if (d > '0') {
      Nfa::Frag r = n->Star(n->Bytes('0', '9'));
      n->AddRange(cur, '0', d - 1, r.start);
      n->AddEpsilon(r.end, end);
    }
    const int32_t next = n->AddState();
    n->AddRange(cur, d, d, next);
    if (i + 1 < F.size()) n->AddEpsilon(next, end);  // shorter: below F (F ends in nonzero)
    cur = next;
  }
  if (!strict) {
    Nfa::Frag zeros = n->Star(n->Literal("0"));
    n->AddEpsilon(cur, zeros.start);
    n->AddEpsilon(zeros.end, end);
  }
  return Nfa::Frag{start, end};
}

// "I" or "I.F" spellings of magnitudes in [a, b] (a finite).
void MagnitudePieces(const Bound& a, const Bound& b, Nfa* n, std::vector<Nfa::Frag>* out) {
  const int64_t hi_i = b.finite ? std::min(b.i, NumberRange::kLimit) : NumberRange::kLimit;
  if (a.i > hi_i) return;
  if (b.finite && a.i == b.i) {
    // Same integer part: the fraction lies between both bounds.
    auto hi = FractionAtMost(b.f, b.exclusive, n);
    if (!hi) return;
    Nfa tmp;
    Nfa::Frag lo_t = FractionAtLeast(a.f, a.exclusive, &tmp);
    auto lo_d = Dfa::Determinize(tmp, lo_t, 10000);
    Nfa tmp2;
    auto hi_t = FractionAtMost(b.f, b.exclusive, &tmp2);
    auto hi_d = Dfa::Determinize(tmp2, *hi_t, 10000);
    auto both = Dfa::Intersect(*lo_d, *hi_d, 10000);
    if (!both.ok() || both->IsEmptyLanguage()) return;
    out->push_back(n->Seq(NumberRange::Digits(a.i, a.i, n), both->EmbedInto(n)));
    return;
  }
  if (a.i + 1 <= (b.finite ? hi_i - 1 : hi_i))
    out->push_back(n->Seq(NumberRange::Digits(a.i + 1, b.finite ? hi_i - 1 : hi_i, n), AnyFraction(n)));
  out->push_back(n->Seq(NumberRange::Digits(a.i, a.i, n), FractionAtLeast(a.f, a.exclusive, n)));
  if (b.finite && b.i <= NumberRange::kLimit) {
    if (auto f = FractionAtMost(b.f, b.exclusive, n))
      out->push_back(n->Seq(NumberRange::Digits(b.i, b.i, n), *f));
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
    Nfa::Frag mant = nfa->Seq({nfa->Opt(nfa->Literal("-")), Digits(0, kLimit, nfa),
                               nfa->Opt(nfa->Seq(nfa->Literal("."), nfa->Plus(nfa->Bytes('0', '9'))))});
    Nfa::Frag exp = nfa->Seq({nfa->Alt({nfa->Literal("e"), nfa->Literal("E")}),
                              nfa->Opt(nfa->Alt({nfa->Literal("+"), nfa->Literal("-")})),
                              nfa->Bytes('0', '9'), nfa->Opt(nfa->Bytes('0', '9'))});
    return nfa->Seq(mant, nfa->Opt(exp));
  }
  // Bounds on the value; the sign splits it into magnitudes.
  const double kL = static_cast<double>(kLimit);
  const bool has_lo = b.minimum && *b.minimum > -kL;
  const bool has_hi = b.maximum && *b.maximum < kL;
  if (has_lo && has_hi &&
      (*b.minimum > *b.maximum ||
       (*b.minimum == *b.maximum && (b.exclusive_minimum || b.exclusive_maximum))))
    return InvalidArgument("JSON schema: no number satisfies the minimum/maximum bounds");
  std::vector<Nfa::Frag> alts;
  // x >= 0: magnitude in [max(lo, 0), hi].
  if (!has_hi || *b.maximum > 0 || (*b.maximum == 0 && !b.exclusive_maximum)) {
    Bound a{true, 0, "", false};
    if (has_lo && *b.minimum >= 0) a = MagnitudeBound(*b.minimum, b.exclusive_minimum, true);
    Bound m;
    if (has_hi) m = MagnitudeBound(*b.maximum, b.exclusive_maximum, false);
    MagnitudePieces(a, m, nfa, &alts);
  }
  // x < 0: magnitude M = -x in (max(-hi, 0), -lo].
  if (!has_lo || *b.minimum < 0) {
    Bound a{true, 0, "", true};
    if (has_hi && *b.maximum < 0) a = MagnitudeBound(*b.maximum, b.exclusive_maximum, true);
    Bound m;
    if (has_lo) m = MagnitudeBound(*b.minimum, b.exclusive_minimum, false);
    std::vector<Nfa::Frag> neg;
    MagnitudePieces(a, m, nfa, &neg);
    if (!neg.empty()) alts.push_back(nfa->Seq(nfa->Literal("-"), nfa->Alt(neg)));
  }
  if (alts.empty())
    return InvalidArgument("JSON schema: no number satisfies the minimum/maximum bounds");
  return nfa->Alt(alts);
}

}  // namespace mimo
