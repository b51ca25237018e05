// Nfa fragment constructions, including code point ranges as UTF-8 byte sequences.
#include "grammar/nfa.h"

#include <algorithm>

#include "core/check.h"

namespace mimo {
namespace {

// Largest code point encoded with n UTF-8 bytes.
constexpr uint32_t kMaxWithBytes[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

int Utf8Length(uint32_t cp) { return cp <= 0x7F ? 1 : cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4; }

void EncodeUtf8(uint32_t cp, uint8_t* out) {
  const int n = Utf8Length(cp);
  if (n == 1) {
    out[0] = static_cast<uint8_t>(cp);
    return;
  }
  static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; --i) {
    out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  out[0] = static_cast<uint8_t>(kLead[n] | cp);
}

}  // namespace

int32_t Nfa::AddState() {
  if (max_states_ >= 0 && static_cast<int64_t>(states_.size()) >= max_states_) {
    full_ = true;
    wanted_ = std::max<int64_t>(wanted_, static_cast<int64_t>(states_.size()) + 1);
  }
  states_.emplace_back();
  return static_cast<int32_t>(states_.size() - 1);
}

void Nfa::AddRange(int32_t from, uint8_t lo, uint8_t hi, int32_t to) {
  MIMO_CHECK(lo <= hi, "empty byte range");
  states_[from].ranges.push_back({lo, hi, to});
}

Nfa::Frag Nfa::Empty() {
  const int32_t s = AddState();
  return {s, s};
}

Nfa::Frag Nfa::Bytes(uint8_t lo, uint8_t hi) {
  const int32_t s = AddState(), e = AddState();
  AddRange(s, lo, hi, e);
  return {s, e};
}

Nfa::Frag Nfa::Literal(std::string_view bytes) {
  const int32_t s = AddState();
  int32_t cur = s;
  for (char c : bytes) {
    if (full()) break;  // the compile fails on full(); stop growing
    const int32_t n = AddState();
    AddRange(cur, static_cast<uint8_t>(c), static_cast<uint8_t>(c), n);
    cur = n;
  }
  return {s, cur};
}

Nfa::Frag Nfa::CallRule(int32_t rule) {
  const int32_t s = AddState(), e = AddState();
  AddCall(s, rule, e);
  return {s, e};
}

// Splits [lo, hi] until each piece is a product of byte ranges: same length, and equal in all
// but trailing bytes that span full continuation ranges.
void Nfa::AddUtf8Range(int32_t from, int32_t to, uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  // Same encoded length.
  for (int n = 1; n < 4; ++n) {
    if (lo <= kMaxWithBytes[n] && hi > kMaxWithBytes[n]) {
      AddUtf8Range(from, to, lo, kMaxWithBytes[n]);
      AddUtf8Range(from, to, kMaxWithBytes[n] + 1, hi);
      return;
    }
  }
  const int n = Utf8Length(lo);
  if (n == 1) {
    AddRange(from, static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), to);
    return;
  }
  // Split where a prefix of bytes changes while the suffix does not span its full range.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the low 6*i bits: i trailing bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        AddUtf8Range(from, to, lo, lo | m);
        AddUtf8Range(from, to, (lo | m) + 1, hi);
        return;
      }
      if ((hi & m) != m) {
        AddUtf8Range(from, to, lo, (hi & ~m) - 1);
        AddUtf8Range(from, to, hi & ~m, hi);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  EncodeUtf8(lo, a);
  EncodeUtf8(hi, b);
  int32_t cur = from;
  for (int i = 0; i < n; ++i) {
    const int32_t next = i + 1 == n ? to : AddState();
    AddRange(cur, a[i], b[i], next);
    cur = next;
  }
}

Nfa::Frag Nfa::Codepoints(uint32_t lo, uint32_t hi) {
  const int32_t s = AddState(), e = AddState();
  hi = std::min<uint32_t>(hi, 0x10FFFF);
  if (lo <= 0xD7FF) AddUtf8Range(s, e, lo, std::min<uint32_t>(hi, 0xD7FF));
  if (hi >= 0xE000) AddUtf8Range(s, e, std::max<uint32_t>(lo, 0xE000), hi);
  return {s, e};
}

Nfa::Frag Nfa::CodepointSet(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  const int32_t s = AddState(), e = AddState();
  for (auto [lo, hi] : ranges) {
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo <= 0xD7FF) AddUtf8Range(s, e, lo, std::min<uint32_t>(hi, 0xD7FF));
    if (hi >= 0xE000) AddUtf8Range(s, e, std::max<uint32_t>(lo, 0xE000), hi);
  }
  return {s, e};
}

Nfa::Frag Nfa::Seq(Frag a, Frag b) {
  AddEpsilon(a.end, b.start);
  return {a.start, b.end};
}

Nfa::Frag Nfa::Seq(const std::vector<Frag>& parts) {
  if (parts.empty()) return Empty();
  Frag f = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) f = Seq(f, parts[i]);
  return f;
}

Nfa::Frag Nfa::Alt(const std::vector<Frag>& alts) {
  const int32_t s = AddState(), e = AddState();
  for (const Frag& f : alts) {
    AddEpsilon(s, f.start);
    AddEpsilon(f.end, e);
  }
  return {s, e};
}

Nfa::Frag Nfa::Star(Frag f) {
  const int32_t s = AddState(), e = AddState();
  AddEpsilon(s, f.start);
  AddEpsilon(s, e);
  AddEpsilon(f.end, f.start);
  AddEpsilon(f.end, e);
  return {s, e};
}

Nfa::Frag Nfa::Plus(Frag f) {
  const int32_t e = AddState();
  AddEpsilon(f.end, f.start);
  AddEpsilon(f.end, e);
  return {f.start, e};
}

Nfa::Frag Nfa::Opt(Frag f) {
  const int32_t s = AddState(), e = AddState();
  AddEpsilon(s, f.start);
  AddEpsilon(s, e);
  AddEpsilon(f.end, e);
  return {s, e};
}

Nfa::Frag Nfa::Repeat(const std::function<Frag()>& make, int min, int max) {
  Frag out = Empty();
  const int64_t copies = max < 0 ? int64_t{min} + 1 : std::max(min, max);
  if (copies == 0) return out;
  // Every copy costs what the first did (a nested repetition multiplies): checked against the
  // limit before the others are built.
  const int64_t before = num_states();
  const Frag first = make();
  const int64_t need = before + (num_states() - before) * copies;
  if (max_states_ >= 0 && need > max_states_) {
    full_ = true;
    wanted_ = std::max(wanted_, need);
    return out;
  }
  bool first_unused = true;
  auto copy = [&] {
    if (!first_unused) return make();
    first_unused = false;
    return first;
  };
  for (int i = 0; i < min; ++i) out = Seq(out, copy());
  if (max < 0) return Seq(out, Star(copy()));
  // Optional tail (x (x (x)?)?)? built inside out.
  if (max > min) {
    Frag tail = Opt(copy());
    for (int i = min + 1; i < max; ++i) tail = Opt(Seq(copy(), tail));
    out = Seq(out, tail);
  }
  return out;
}

}  // namespace mimo
