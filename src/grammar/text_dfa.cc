// TextDfa construction: value languages are wrapped in their JSON or raw-tool spelling through an
// Nfa whose states are tagged (boundary, pending), then determinized.
#include "grammar/text_dfa.h"

#include <cstdio>
#include <algorithm>
#include <deque>

#include "core/check.h"

namespace mimo {
namespace {

constexpr int32_t kMaxTextStates = 20000;

// Remaining continuation bytes of the current UTF-8 character in each state of a value Dfa (0 at
// a character boundary). The language is valid UTF-8, so the count depends only on the state.
std::vector<int8_t> Utf8Remaining(const Dfa& v) {
  std::vector<int8_t> rem(v.num_states(), -1);
  std::deque<int32_t> queue = {0};
  rem[0] = 0;
  while (!queue.empty()) {
    const int32_t s = queue.front();
    queue.pop_front();
    for (int b = 0; b < 256; ++b) {
      const int32_t t = v.Next(s, b);
      if (t < 0) continue;
      int8_t r;
      if (rem[s] > 0) {
        r = static_cast<int8_t>(rem[s] - 1);
      } else {
        r = b < 0x80 ? 0 : b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
      }
      if (rem[t] < 0) {
        rem[t] = r;
        queue.push_back(t);
      } else {
        MIMO_CHECK(rem[t] == r, "value language is not valid UTF-8 by state");
      }
    }
  }
  return rem;
}

// The canonical JSON spelling of an ASCII byte inside a string, or "" when it is written as is.
std::string EscapeFor(uint8_t b, bool tool_safe) {
  switch (b) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (b < 0x20 || (tool_safe && (b == '&' || b == '<'))) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\u%04x", b);
    return buf;
  }
  return "";
}

// A chain of literal bytes from `from` to `to` through fresh non-boundary states.
void AddChain(Nfa* nfa, int32_t from, std::string_view bytes, int32_t to) {
  int32_t cur = from;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int32_t next = i + 1 == bytes.size() ? to : nfa->AddState();
    const uint8_t c = static_cast<uint8_t>(bytes[i]);
    nfa->AddRange(cur, c, c, next);
    cur = next;
  }
}

void AddHex(Nfa* nfa, int32_t from, int32_t to) {
  nfa->AddRange(from, '0', '9', to);
  nfa->AddRange(from, 'a', 'f', to);
  nfa->AddRange(from, 'A', 'F', to);
}

}  // namespace

Dfa TextDfa::AnyUtf8() {
  Nfa nfa;
  Nfa::Frag f = nfa.Star(nfa.Codepoints(0, 0x10FFFF));
  auto d = Dfa::Determinize(nfa, f, kMaxTextStates);
  MIMO_CHECK(d.ok(), "AnyUtf8");
  return std::move(d).value();
}

StatusOr<std::shared_ptr<const TextDfa>> TextDfa::FromDfa(const Dfa& d) {
  auto t = std::make_shared<TextDfa>();
  const int32_t n = d.num_states();
  t->next_.assign(static_cast<size_t>(n) * 256, -1);
  t->starts_.assign(static_cast<size_t>(n) * 256, 0);
  t->pending_.resize(n);
  for (int32_t q = 0; q < n; ++q) {
    t->pending_[q] = d.pending(q);
    t->max_pending_ = std::max(t->max_pending_, d.pending(q));
    if (d.accepting(q)) {
      if (t->end_ >= 0) return Internal("text language with two accepting states");
      t->end_ = q;
    }
  }
  if (t->end_ < 0) return InvalidArgument("JSON schema: a string constraint that no string meets");
  for (int32_t q = 0; q < n; ++q) {
    for (int b = 0; b < 256; ++b) {
      const int32_t r = d.Next(q, b);
      if (r < 0) continue;
      if (q == t->end_) return Internal("text language continues after its terminator");
      t->next_[static_cast<size_t>(q) * 256 + b] = r;
      t->starts_[static_cast<size_t>(q) * 256 + b] =
          d.boundary(q) && !(b >= 0x80 && b <= 0xBF) && r != t->end_;
    }
  }
  // Fewest bytes to the end: breadth-first search on reversed edges.
  std::vector<std::vector<int32_t>> rev(n);
  for (int32_t q = 0; q < n; ++q) {
    for (int b = 0; b < 256; ++b) {
      const int32_t r = t->Next(q, b);
      if (r >= 0 && (b == 0 || t->Next(q, b - 1) != r)) rev[r].push_back(q);
    }
  }
  t->bytes_to_end_.assign(n, -1);
  t->bytes_to_end_[t->end_] = 0;
  std::deque<int32_t> queue = {t->end_};
  while (!queue.empty()) {
    const int32_t r = queue.front();
    queue.pop_front();
    for (int32_t q : rev[r]) {
      if (t->bytes_to_end_[q] < 0) {
        t->bytes_to_end_[q] = t->bytes_to_end_[r] + 1;
        queue.push_back(q);
      }
    }
  }
  return std::shared_ptr<const TextDfa>(std::move(t));
}

StatusOr<std::shared_ptr<const TextDfa>> TextDfa::JsonString(const Dfa& value, bool tool_safe) {
  const std::vector<int8_t> rem = Utf8Remaining(value);
  Nfa nfa;
  const int32_t open = nfa.AddState();
  const int32_t base = nfa.num_states();
  for (int32_t s = 0; s < value.num_states(); ++s) nfa.state(nfa.AddState()).boundary = rem[s] == 0;
  const int32_t end = nfa.AddState();
  nfa.AddRange(open, '"', '"', base);
  for (int32_t s = 0; s < value.num_states(); ++s) {
    if (value.accepting(s)) nfa.AddRange(base + s, '"', '"', end);
    for (int b = 0; b < 256; ++b) {
      const int32_t t = value.Next(s, b);
      if (t < 0) continue;
      const std::string esc = b < 0x80 ? EscapeFor(static_cast<uint8_t>(b), tool_safe) : "";
      if (esc.empty()) {
        nfa.AddRange(base + s, static_cast<uint8_t>(b), static_cast<uint8_t>(b), base + t);
      } else {
        AddChain(&nfa, base + s, esc, base + t);
      }
    }
  }
  auto d = Dfa::Determinize(nfa, {open, end}, kMaxTextStates);
  if (!d.ok()) return Unimplemented("JSON schema: a string pattern is too complex (%s)",
                                    d.status().message().c_str());
  return FromDfa(d->Trimmed().Minimized());
}

std::shared_ptr<const TextDfa> TextDfa::AnyJsonString(bool tool_safe) {
  Nfa nfa;
  const int32_t open = nfa.AddState(), body = nfa.AddState(), esc = nfa.AddState();
  const int32_t end = nfa.AddState();
  nfa.state(body).boundary = true;
  nfa.AddRange(open, '"', '"', body);
  nfa.AddRange(body, '"', '"', end);
  for (int b = 0x20; b < 0x80; ++b) {
    if (b == '"' || b == '\\' || (tool_safe && (b == '&' || b == '<'))) continue;
    nfa.AddRange(body, static_cast<uint8_t>(b), static_cast<uint8_t>(b), body);
  }
  Nfa::Frag multi = nfa.Codepoints(0x80, 0x10FFFF);
  nfa.AddEpsilon(body, multi.start);
  nfa.AddEpsilon(multi.end, body);
  nfa.AddRange(body, '\\', '\\', esc);
  for (char c : std::string_view("\"\\/bfnrt")) nfa.AddRange(esc, c, c, body);
  // \uXXXX outside the surrogates D800-DFFF.
  const int32_t u1 = nfa.AddState(), u2 = nfa.AddState(), u3 = nfa.AddState();
  const int32_t ud = nfa.AddState(), u4 = nfa.AddState();
  nfa.AddRange(esc, 'u', 'u', u1);
  nfa.AddRange(u1, '0', '9', u2);
  nfa.AddRange(u1, 'a', 'c', u2);
  nfa.AddRange(u1, 'A', 'C', u2);
  nfa.AddRange(u1, 'e', 'f', u2);
  nfa.AddRange(u1, 'E', 'F', u2);
  nfa.AddRange(u1, 'd', 'd', ud);
  nfa.AddRange(u1, 'D', 'D', ud);
  nfa.AddRange(ud, '0', '7', u3);
  AddHex(&nfa, u2, u3);
  AddHex(&nfa, u3, u4);
  AddHex(&nfa, u4, body);
  auto d = Dfa::Determinize(nfa, {open, end}, kMaxTextStates);
  MIMO_CHECK(d.ok(), "AnyJsonString");
  auto t = FromDfa(d->Trimmed().Minimized());
  MIMO_CHECK(t.ok(), "AnyJsonString: %s", t.status().message().c_str());
  auto any = std::const_pointer_cast<TextDfa>(std::move(t).value());
  any->counts_freely_ = true;
  return any;
}

std::string TextDfa::Fingerprint() const {
  std::string f;
  auto put = [&f](const void* p, size_t n) { f.append(static_cast<const char*>(p), n); };
  put(&end_, sizeof(end_));
  put(next_.data(), next_.size() * sizeof(int32_t));
  put(starts_.data(), starts_.size());
  put(pending_.data(), pending_.size() * sizeof(int16_t));
  return f;
}

std::vector<uint8_t> TextDfa::AliveTable(int32_t min_chars, int32_t max_chars,
                                         int32_t* cap) const {
  const int32_t n = num_states();
  const int32_t k_max = (max_chars >= 0 ? max_chars : min_chars) + max_pending_;
  *cap = k_max;
  const size_t stride = static_cast<size_t>(k_max) + 1;
  // Distinct (target, starts) moves of each state.
  std::vector<std::vector<std::pair<int32_t, uint8_t>>> moves(n);
  for (int32_t q = 0; q < n; ++q) {
    for (int b = 0; b < 256; ++b) {
      const int32_t r = Next(q, b);
      if (r < 0) continue;
      std::pair<int32_t, uint8_t> m = {r, Starts(q, b)};
      if (std::find(moves[q].begin(), moves[q].end(), m) == moves[q].end()) moves[q].push_back(m);
    }
  }
  std::vector<uint8_t> alive(static_cast<size_t>(n) * stride, 0);
  auto at = [&](int32_t q, int32_t k) -> uint8_t& { return alive[q * stride + k]; };
  for (int32_t k = k_max; k >= 0; --k) {
    const int32_t length = k - pending_[end_];
    at(end_, k) = length >= min_chars && (max_chars < 0 || length <= max_chars);
    // Moves that start no character stay in this layer: iterate to a fixed point.
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t q = 0; q < n; ++q) {
        if (at(q, k) || q == end_) continue;
        for (auto [r, starts] : moves[q]) {
          int32_t k2 = k + starts;
          if (max_chars >= 0) {
            if (k2 - pending_[r] > max_chars) continue;
          } else {
            k2 = std::min(k2, k_max);
          }
          if (at(r, k2)) {
            at(q, k) = 1;
            changed = true;
            break;
          }
        }
      }
    }
  }
  return alive;
}

StatusOr<std::shared_ptr<const TextDfa>> TextDfa::RawValue(const Dfa& value,
                                                           std::string_view terminator) {
  MIMO_CHECK(terminator.size() >= 2, "terminator too short");
  auto clean = Dfa::Intersect(value, Dfa::NotContaining(terminator), kMaxTextStates);
  if (!clean.ok()) return Unimplemented("JSON schema: a string pattern is too complex");
  const Dfa& v = *clean;
  const std::vector<int8_t> rem = Utf8Remaining(v);
  Nfa nfa;
  const int32_t base = nfa.num_states();
  for (int32_t s = 0; s < v.num_states(); ++s) nfa.state(nfa.AddState()).boundary = rem[s] == 0;
  const int32_t end = nfa.AddState();
  nfa.state(end).pending = static_cast<int16_t>(terminator.size() - 1);
  // The terminator: its characters are counted as they come (they may turn out to be value) and
  // discounted by `pending` while they match.
  std::vector<int32_t> chain(terminator.size());
  chain[0] = -1;
  for (size_t i = 1; i < terminator.size(); ++i) {
    chain[i] = nfa.AddState();
    nfa.state(chain[i]).boundary = true;
    nfa.state(chain[i]).pending = static_cast<int16_t>(i);
  }
  for (size_t i = 1; i + 1 < terminator.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(terminator[i]);
    nfa.AddRange(chain[i], c, c, chain[i + 1]);
  }
  const uint8_t last = static_cast<uint8_t>(terminator.back());
  nfa.AddRange(chain[terminator.size() - 1], last, last, end);
  const uint8_t first = static_cast<uint8_t>(terminator[0]);
  for (int32_t s = 0; s < v.num_states(); ++s) {
    if (v.accepting(s)) nfa.AddRange(base + s, first, first, chain[1]);
    for (int b = 0; b < 256; ++b) {
      const int32_t t = v.Next(s, b);
      if (t >= 0) nfa.AddRange(base + s, static_cast<uint8_t>(b), static_cast<uint8_t>(b), base + t);
    }
  }
  auto d = Dfa::Determinize(nfa, {base, end}, kMaxTextStates);
  if (!d.ok()) return Unimplemented("JSON schema: a string pattern is too complex");
  return FromDfa(d->Trimmed().Minimized());
}

std::shared_ptr<const TextDfa> TextDfa::AnyRawValue(std::string_view terminator) {
  auto t = RawValue(AnyUtf8(), terminator);
  MIMO_CHECK(t.ok(), "AnyRawValue: %s", t.status().message().c_str());
  auto any = std::const_pointer_cast<TextDfa>(std::move(t).value());
  any->counts_freely_ = true;
  return any;
}

}  // namespace mimo
