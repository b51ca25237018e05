// Nfa: a Thompson-style automaton over bytes with epsilon moves and rule calls, the building block
// of every grammar rule and of the string languages (patterns, enums, JSON escapes). Fragments
// (start, end) compose by sequence, alternation and repetition; Dfa::Determinize makes it
// deterministic.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace mimo {

// Mutable while a grammar is built; not thread-safe.
class Nfa {
 public:
  // A sub-automaton entered at `start` and left at `end` (no edge leaves `end` inside it).
  struct Frag {
    int32_t start = -1;
    int32_t end = -1;
  };
  struct Range {
    uint8_t lo, hi;
    int32_t to;
  };
  struct Call {
    int32_t rule;  // the called rule; on its return the automaton is at `to`
    int32_t to;
  };
  // Tags carried to the DFA (text languages only): `boundary` marks a state between characters of
  // a string value; `pending` counts characters already counted that a terminator will discount.
  struct State {
    std::vector<Range> ranges;
    std::vector<Call> calls;
    std::vector<int32_t> eps;
    bool boundary = false;
    int16_t pending = 0;
  };

  int32_t AddState();
  void AddRange(int32_t from, uint8_t lo, uint8_t hi, int32_t to);
  void AddEpsilon(int32_t from, int32_t to) { states_[from].eps.push_back(to); }
  void AddCall(int32_t from, int32_t rule, int32_t to) { states_[from].calls.push_back({rule, to}); }
  State& state(int32_t s) { return states_[s]; }
  const State& state(int32_t s) const { return states_[s]; }
  int32_t num_states() const { return static_cast<int32_t>(states_.size()); }
  // A bound on the states (-1: none). Past it the automaton is `full()`: Repeat builds no more
  // copies (it checks copies x the first copy's size first, so nested repetitions are caught
  // as a product before they are built), Literal stops, and the owner refuses the result.
  void set_max_states(int64_t n) { max_states_ = n; }
  bool full() const { return full_; }
  int64_t wanted() const { return wanted_; }  // states the refused construction needed

  Frag Empty();
  Frag Bytes(uint8_t lo, uint8_t hi);
  Frag Literal(std::string_view bytes);
  Frag CallRule(int32_t rule);
  // The UTF-8 encodings of the code points [lo, hi] (surrogates D800-DFFF excluded).
  Frag Codepoints(uint32_t lo, uint32_t hi);
  // Alternatives of a code point set given as sorted, disjoint ranges.
  Frag CodepointSet(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);
  Frag Seq(Frag a, Frag b);
  Frag Seq(const std::vector<Frag>& parts);
  Frag Alt(const std::vector<Frag>& alts);  // no alternatives: a fragment that matches nothing
  Frag Star(Frag f);
  Frag Plus(Frag f);
  Frag Opt(Frag f);
  // `make` builds a fresh copy of the repeated fragment; max < 0 is unbounded.
  Frag Repeat(const std::function<Frag()>& make, int min, int max);

 private:
  void AddUtf8Range(int32_t from, int32_t to, uint32_t lo, uint32_t hi);

  std::vector<State> states_;
  int64_t max_states_ = -1;
  bool full_ = false;
  int64_t wanted_ = 0;
};

}  // namespace mimo
