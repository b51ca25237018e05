// Subset construction, product, trimming.
#include "grammar/dfa.h"

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>

#include "core/check.h"

namespace mimo {
namespace {

// Epsilon closure of `set` (sorted, unique on return).
void Close(const Nfa& nfa, std::vector<int32_t>* set, std::vector<uint8_t>* seen) {
  std::vector<int32_t> stack(set->begin(), set->end());
  for (int32_t s : *set) (*seen)[s] = 1;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t t : nfa.state(s).eps) {
      if (!(*seen)[t]) {
        (*seen)[t] = 1;
        set->push_back(t);
        stack.push_back(t);
      }
    }
  }
  for (int32_t s : *set) (*seen)[s] = 0;
  std::sort(set->begin(), set->end());
  set->erase(std::unique(set->begin(), set->end()), set->end());
}

}  // namespace

int32_t Dfa::AddState() {
  next_.resize(next_.size() + 256, -1);
  calls_.emplace_back();
  accepting_.push_back(0);
  boundary_.push_back(0);
  pending_.push_back(0);
  return num_states() - 1;
}

bool Dfa::has_calls() const {
  for (const auto& c : calls_)
    if (!c.empty()) return true;
  return false;
}

StatusOr<Dfa> Dfa::Determinize(const Nfa& nfa, Nfa::Frag frag, int32_t max_states,
                               int64_t max_work) {
  Dfa d;
  int64_t work = 0;
  std::vector<uint8_t> seen(nfa.num_states(), 0);
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    Close(nfa, &set, &seen);
    work += static_cast<int64_t>(set.size());
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    const int32_t id = d.AddState();
    for (int32_t s : set) {
      const Nfa::State& st = nfa.state(s);
      if (s == frag.end) d.accepting_[id] = 1;
      if (st.boundary) d.boundary_[id] = 1;
      d.pending_[id] = std::max(d.pending_[id], st.pending);
    }
    ids.emplace(set, id);
    sets.push_back(std::move(set));
    return id;
  };
  intern({frag.start});
  std::vector<std::vector<int32_t>> by_byte(256);
  for (int32_t cur = 0; cur < static_cast<int32_t>(sets.size()); ++cur) {
    if (static_cast<int32_t>(sets.size()) > max_states)
      return ResourceExhausted("automaton has more than %d states", max_states);
    if (work > max_work)
      return ResourceExhausted("automaton construction visits more than %lld states",
                               static_cast<long long>(max_work));
    for (auto& v : by_byte) v.clear();
    std::map<int32_t, std::vector<int32_t>> by_rule;
    for (int32_t s : sets[cur]) {
      for (const Nfa::Range& r : nfa.state(s).ranges) {
        for (int b = r.lo; b <= r.hi; ++b) by_byte[b].push_back(r.to);
      }
      for (const Nfa::Call& c : nfa.state(s).calls) by_rule[c.rule].push_back(c.to);
    }
    for (int b = 0; b < 256; ++b) {
      if (by_byte[b].empty()) continue;
      // Bytes with the same target set share one closure computation.
      int32_t t = -1;
      if (b > 0 && by_byte[b] == by_byte[b - 1]) {
        t = d.next_[static_cast<size_t>(cur) * 256 + b - 1];
      } else {
        t = intern(by_byte[b]);
      }
      d.next_[static_cast<size_t>(cur) * 256 + b] = t;
    }
    for (auto& [rule, targets] : by_rule) {
      const int32_t t = intern(targets);
      d.calls_[cur].push_back({rule, t});
    }
  }
  return d;
}

StatusOr<Dfa> Dfa::Intersect(const Dfa& a, const Dfa& b, int32_t max_states) {
  MIMO_CHECK(!a.has_calls() && !b.has_calls(), "Intersect of automata with calls");
  Dfa d;
  std::map<std::pair<int32_t, int32_t>, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  auto intern = [&](int32_t x, int32_t y) {
    auto it = ids.find({x, y});
    if (it != ids.end()) return it->second;
    const int32_t id = d.AddState();
    d.accepting_[id] = a.accepting_[x] && b.accepting_[y];
    d.boundary_[id] = a.boundary_[x] || b.boundary_[y];
    d.pending_[id] = std::max(a.pending_[x], b.pending_[y]);
    ids.emplace(std::make_pair(x, y), id);
    pairs.emplace_back(x, y);
    return id;
  };
  intern(0, 0);
  for (int32_t cur = 0; cur < static_cast<int32_t>(pairs.size()); ++cur) {
    if (static_cast<int32_t>(pairs.size()) > max_states)
      return ResourceExhausted("automaton has more than %d states", max_states);
    const auto [x, y] = pairs[cur];
    for (int c = 0; c < 256; ++c) {
      const int32_t tx = a.Next(x, c), ty = b.Next(y, c);
      if (tx < 0 || ty < 0) continue;
      const int32_t t = intern(tx, ty);
      d.next_[static_cast<size_t>(cur) * 256 + c] = t;
    }
  }
  return d.Trimmed();
}

Dfa Dfa::Complement() const {
  MIMO_CHECK(!has_calls(), "Complement of an automaton with calls");
  Dfa d = *this;
  const int32_t sink = d.AddState();
  for (int32_t s = 0; s < d.num_states(); ++s) {
    d.accepting_[s] = !d.accepting_[s];
    for (int c = 0; c < 256; ++c) {
      int32_t& t = d.next_[static_cast<size_t>(s) * 256 + c];
      if (t < 0) t = sink;
    }
  }
  return d;
}

Dfa Dfa::NotContaining(std::string_view needle) {
  // Knuth-Morris-Pratt automaton: state j = length of the longest suffix that is a prefix of the
  // needle; reaching the full length is death.
  const int32_t n = static_cast<int32_t>(needle.size());
  std::vector<int32_t> fail(n + 1, 0);
  for (int32_t i = 1, k = 0; i < n; ++i) {
    while (k > 0 && needle[i] != needle[k]) k = fail[k];
    if (needle[i] == needle[k]) ++k;
    fail[i + 1] = k;
  }
  Dfa d;
  for (int32_t j = 0; j < n; ++j) d.AddState();
  for (int32_t j = 0; j < n; ++j) {
    d.accepting_[j] = 1;
    for (int c = 0; c < 256; ++c) {
      int32_t k = j;
      while (k > 0 && needle[k] != static_cast<char>(c)) k = fail[k];
      if (needle[k] == static_cast<char>(c)) ++k;
      if (k < n) d.next_[static_cast<size_t>(j) * 256 + c] = k;
    }
  }
  return d;
}

Dfa Dfa::Trimmed() const {
  const int32_t n = num_states();
  // Co-reachability: reverse edges from accepting states.
  std::vector<std::vector<int32_t>> rev(n);
  for (int32_t s = 0; s < n; ++s) {
    for (int c = 0; c < 256; ++c) {
      const int32_t t = Next(s, c);
      if (t >= 0 && (c == 0 || Next(s, c - 1) != t)) rev[t].push_back(s);
    }
    for (const Nfa::Call& call : calls_[s]) rev[call.to].push_back(s);
  }
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> stack;
  for (int32_t s = 0; s < n; ++s) {
    if (accepting_[s]) {
      live[s] = 1;
      stack.push_back(s);
    }
  }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : rev[s]) {
      if (!live[p]) {
        live[p] = 1;
        stack.push_back(p);
      }
    }
  }
  Dfa d;
  d.AddState();
  if (n == 0 || !live[0]) return d;
  std::vector<int32_t> map(n, -1);
  std::vector<int32_t> order = {0};
  map[0] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t s = order[i];
    auto visit = [&](int32_t t) {
      if (t >= 0 && live[t] && map[t] < 0) {
        map[t] = d.AddState();
        order.push_back(t);
      }
    };
    for (int c = 0; c < 256; ++c) visit(Next(s, c));
    for (const Nfa::Call& call : calls_[s]) visit(call.to);
  }
  for (int32_t s : order) {
    const int32_t m = map[s];
    d.accepting_[m] = accepting_[s];
    d.boundary_[m] = boundary_[s];
    d.pending_[m] = pending_[s];
    for (int c = 0; c < 256; ++c) {
      const int32_t t = Next(s, c);
      if (t >= 0 && live[t]) d.next_[static_cast<size_t>(m) * 256 + c] = map[t];
    }
    for (const Nfa::Call& call : calls_[s]) {
      if (live[call.to]) d.calls_[m].push_back({call.rule, map[call.to]});
    }
  }
  return d;
}

Dfa Dfa::Minimized() const {
  MIMO_CHECK(!has_calls(), "Minimized of an automaton with calls");
  const int32_t n = num_states();
  std::vector<int32_t> cls(n);
  {
    std::map<std::tuple<uint8_t, uint8_t, int16_t>, int32_t> ids;
    for (int32_t s = 0; s < n; ++s) {
      auto key = std::make_tuple(accepting_[s], boundary_[s], pending_[s]);
      cls[s] = ids.emplace(key, static_cast<int32_t>(ids.size())).first->second;
    }
  }
  int32_t count = 0;
  for (int32_t c : cls) count = std::max(count, c + 1);
  while (true) {
    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<int32_t> next_cls(n);
    std::vector<int32_t> sig(257);
    for (int32_t s = 0; s < n; ++s) {
      sig[0] = cls[s];
      for (int c = 0; c < 256; ++c) {
        const int32_t t = Next(s, c);
        sig[c + 1] = t < 0 ? -1 : cls[t];
      }
      next_cls[s] = ids.emplace(sig, static_cast<int32_t>(ids.size())).first->second;
    }
    const int32_t next_count = static_cast<int32_t>(ids.size());
    cls.swap(next_cls);
    if (next_count == count) break;
    count = next_count;
  }
  // Renumber with the start's class first, in breadth-first order.
  Dfa d;
  std::vector<int32_t> map(count, -1);
  std::vector<int32_t> rep(count, -1);
  for (int32_t s = 0; s < n; ++s)
    if (rep[cls[s]] < 0) rep[cls[s]] = s;
  std::vector<int32_t> order = {cls[0]};
  map[cls[0]] = d.AddState();
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t s = rep[order[i]];
    for (int c = 0; c < 256; ++c) {
      const int32_t t = Next(s, c);
      if (t >= 0 && map[cls[t]] < 0) {
        map[cls[t]] = d.AddState();
        order.push_back(cls[t]);
      }
    }
  }
  for (int32_t k : order) {
    const int32_t s = rep[k], m = map[k];
    d.accepting_[m] = accepting_[s];
    d.boundary_[m] = boundary_[s];
    d.pending_[m] = pending_[s];
    for (int c = 0; c < 256; ++c) {
      const int32_t t = Next(s, c);
      if (t >= 0) d.next_[static_cast<size_t>(m) * 256 + c] = map[cls[t]];
    }
  }
  return d;
}

bool Dfa::IsEmptyLanguage() const {
  Dfa t = Trimmed();
  for (int32_t s = 0; s < t.num_states(); ++s)
    if (t.accepting_[s]) return false;
  return true;
}

bool Dfa::HasCycle() const {
  const int32_t n = num_states();
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on stack, 2 done
  std::vector<std::pair<int32_t, int>> stack;
  for (int32_t root = 0; root < n; ++root) {
    if (color[root]) continue;
    stack.push_back({root, 0});
    color[root] = 1;
    while (!stack.empty()) {
      auto& [s, c] = stack.back();
      if (c >= 256) {
        color[s] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t t = Next(s, c++);
      if (t < 0) continue;
      if (color[t] == 1) return true;
      if (color[t] == 0) {
        color[t] = 1;
        stack.push_back({t, 0});
      }
    }
  }
  return false;
}

Nfa::Frag Dfa::EmbedInto(Nfa* nfa) const {
  const int32_t base = nfa->num_states();
  for (int32_t s = 0; s < num_states(); ++s) {
    const int32_t id = nfa->AddState();
    nfa->state(id).boundary = boundary_[s];
    nfa->state(id).pending = pending_[s];
  }
  const int32_t end = nfa->AddState();
  for (int32_t s = 0; s < num_states(); ++s) {
    int c = 0;
    while (c < 256) {
      const int32_t t = Next(s, c);
      int e = c;
      while (e + 1 < 256 && Next(s, e + 1) == t) ++e;
      if (t >= 0) nfa->AddRange(base + s, static_cast<uint8_t>(c), static_cast<uint8_t>(e), base + t);
      c = e + 1;
    }
    for (const Nfa::Call& call : calls_[s]) nfa->AddCall(base + s, call.rule, base + call.to);
    if (accepting_[s]) nfa->AddEpsilon(base + s, end);
  }
  return {base, end};
}

}  // namespace mimo
