// Dfa: the deterministic form of an Nfa fragment (subset construction): at most one target per
// byte and per called rule. Grammar rules are Dfas with calls; string languages are call-free
// Dfas, on which intersection and "does not contain" are defined.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "grammar/nfa.h"

namespace mimo {

// Immutable once built (value type).
class Dfa {
 public:
  // State 0 is the start. Fails with ResourceExhausted when more than max_states are needed.
  // ResourceExhausted past max_states, or past max_work automaton states visited in all (the sum
  // of the subsets' sizes: what the construction costs in time and memory).
  static StatusOr<Dfa> Determinize(const Nfa& nfa, Nfa::Frag frag, int32_t max_states,
                                   int64_t max_work = int64_t{1} << 26);
  // Byte strings accepted by both (call-free Dfas only).
  static StatusOr<Dfa> Intersect(const Dfa& a, const Dfa& b, int32_t max_states);
  // Every byte string not accepted (call-free Dfas only).
  Dfa Complement() const;
  // Every byte string that does not contain `needle`.
  static Dfa NotContaining(std::string_view needle);

  int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }
  int32_t Next(int32_t s, uint8_t b) const { return next_[static_cast<size_t>(s) * 256 + b]; }
  bool accepting(int32_t s) const { return accepting_[s]; }
  const std::vector<Nfa::Call>& calls(int32_t s) const { return calls_[s]; }
  bool boundary(int32_t s) const { return boundary_[s]; }
  int16_t pending(int32_t s) const { return pending_[s]; }
  bool has_calls() const;

  // Removes states that cannot reach an accepting state (and those unreachable), renumbering in
  // breadth-first order from the start. An empty language leaves one non-accepting state.
  Dfa Trimmed() const;
  // The minimal equivalent automaton (Moore's partition refinement; call-free Dfas only), keeping
  // states with different tags apart.
  Dfa Minimized() const;
  bool IsEmptyLanguage() const;
  bool HasCycle() const;  // an infinite language, once trimmed
  // Copies this (call-free or not) automaton into `nfa`; accepting states lead to the end.
  Nfa::Frag EmbedInto(Nfa* nfa) const;

 private:
  int32_t AddState();

  std::vector<int32_t> next_;                  // [num_states * 256], -1 = dead
  std::vector<std::vector<Nfa::Call>> calls_;  // [num_states] sorted by rule
  std::vector<uint8_t> accepting_;             // [num_states]
  std::vector<uint8_t> boundary_;              // [num_states]
  std::vector<int16_t> pending_;               // [num_states]
};

}  // namespace mimo
