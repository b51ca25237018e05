// PushdownAutomaton: a compiled grammar as rules that call each other. A general rule is a Dfa
// whose edges consume a byte or call a rule; a text rule is a TextDfa (with an optional
// character-count bound) whose token sets are precomputed per vocabulary. States of all rules
// share one numbering. A stack node is (state, count, parent); see StackArena.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "grammar/text_dfa.h"
#include "grammar/text_profile.h"

namespace mimo {

struct PdaRange {
  uint8_t lo, hi;
  int32_t to;
};

struct PdaCall {
  int32_t rule;
  int32_t ret;  // the caller's state after the callee returns
  bool tail;    // ret is final with no way on: the callee returns straight to the caller's parent
};

struct PdaState {
  int32_t rule = -1;
  int32_t text = -1;       // text rule of this state, -1 for a general state
  int32_t local = 0;       // text: the TextDfa state
  bool final = false;      // general: the rule may end here (text: local == end, see IsFinal)
  bool consumes = false;   // has byte edges
  bool tail = false;       // final with no byte edges and no calls
  int32_t range_begin = 0, range_end = 0;
  int32_t call_begin = 0, call_end = 0;
  int32_t dist = 0;        // fewest bytes to the end of the rule (text: without length bounds)
};

// A set of bytes.
struct ByteSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  bool AddAll(const ByteSet& o) {  // true if anything was new
    bool grew = false;
    for (int i = 0; i < 4; ++i) {
      grew = grew || (o.bits[i] & ~bits[i]) != 0;
      bits[i] |= o.bits[i];
    }
    return grew;
  }
};

struct PdaRule {
  std::string name;
  int32_t start = -1;
  int32_t text = -1;      // the text rule, or -1
  int32_t min_bytes = 0;  // fewest bytes of a complete match
  ByteSet follow;         // bytes that can come right after the rule returns
};

struct PdaTextRule {
  std::shared_ptr<const TextDfa> dfa;
  std::shared_ptr<const TextProfile> profile;
  int32_t first_state = 0;  // automaton id of TextDfa state 0
  int32_t min_chars = 0;
  int32_t max_chars = -1;   // -1: unbounded
  // Counts above this are equivalent (they only matter up to min_chars + pending); nodes keep
  // count = min(count, cap) when unbounded so that equal stacks compare equal.
  int32_t count_cap = 0;
  // TextDfa::AliveTable for these bounds when the language does not count freely, else empty.
  std::vector<uint8_t> alive;

  TextProfile::Bounds bounds() const {
    return {min_chars, max_chars, alive.empty() ? nullptr : alive.data(), count_cap};
  }
  // Whether a node (state `local`, count k) can still complete within the bounds.
  bool Alive(int32_t local, int32_t k) const {
    if (!alive.empty()) return k <= count_cap && alive[local * (count_cap + 1) + k];
    return max_chars < 0 || k - dfa->pending(local) <= max_chars;
  }
};

// Immutable after GrammarBuilder::Build; shared by all matchers of a grammar.
class PushdownAutomaton {
 public:
  int32_t num_states() const { return static_cast<int32_t>(states_.size()); }
  const PdaState& state(int32_t s) const { return states_[s]; }
  const PdaRule& rule(int32_t r) const { return rules_[r]; }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  const PdaTextRule& text_rule(int32_t t) const { return text_rules_[t]; }
  int32_t num_text_rules() const { return static_cast<int32_t>(text_rules_.size()); }
  int32_t root_rule() const { return root_; }
  std::span<const PdaCall> calls(const PdaState& st) const {
    return {calls_.data() + st.call_begin, calls_.data() + st.call_end};
  }
  std::span<const PdaRange> ranges(const PdaState& st) const {
    return {ranges_.data() + st.range_begin, ranges_.data() + st.range_end};
  }
  // Target of a general state on byte b, or -1.
  int32_t NextGeneral(const PdaState& st, uint8_t b) const {
    for (int32_t i = st.range_begin; i < st.range_end; ++i) {
      const PdaRange& r = ranges_[i];
      if (b < r.lo) return -1;
      if (b <= r.hi) return r.to;
    }
    return -1;
  }
  // Memory held: states, rules, edges, and the text rules' alive tables and automata.
  size_t bytes() const {
    size_t b = states_.size() * sizeof(PdaState) + rules_.size() * sizeof(PdaRule) +
               ranges_.size() * sizeof(PdaRange) + calls_.size() * sizeof(PdaCall);
    for (const PdaRule& r : rules_) b += r.name.size();
    for (const PdaTextRule& t : text_rules_) b += sizeof(PdaTextRule) + t.alive.size() + t.dfa->bytes();
    return b;
  }

 private:
  friend class GrammarBuilder;
  std::vector<PdaState> states_;
  std::vector<PdaRule> rules_;
  std::vector<PdaTextRule> text_rules_;
  std::vector<PdaRange> ranges_;  // per state, sorted by lo, disjoint
  std::vector<PdaCall> calls_;
  int32_t root_ = -1;
};

}  // namespace mimo
