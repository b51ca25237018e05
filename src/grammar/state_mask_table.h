// StateMaskTable: for every general state s that consumes bytes, the tokens a stack whose top is s
// accepts whatever lies below (context-independent: the token is consumed before s's frame
// returns), and the tokens that need the stack below to decide (context-dependent: s's frame
// returns after at least one byte and the rest of the token goes to the caller). Tokens that die
// inside the frame are in neither set. A mask is then a bitset copy per stack top plus a check of
// the context-dependent tokens only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/compile_budget.h"
#include "grammar/pushdown_automaton.h"
#include "grammar/token_vocabulary.h"

namespace mimo {

// Immutable after Build; shared by all matchers of a grammar.
class StateMaskTable {
 public:
  // Null when the budget ran out part-way (its status says why).
  static std::unique_ptr<StateMaskTable> Build(const PushdownAutomaton& pda,
                                               const TokenVocabulary& vocab,
                                               CompileBudget* budget = nullptr);

  struct Entry {
    std::vector<uint32_t> accept_bits;  // [mask words] when the set is large, else empty
    std::vector<int32_t> accept_ids;    // when the set is small
    std::vector<int32_t> uncertain;     // ids in trie order (shared prefixes are adjacent)
  };
  // Entry of a general consuming state (empty entry otherwise).
  const Entry& entry(int32_t state) const { return entries_[index_[state]]; }
  size_t num_entries() const { return entries_.size(); }
  // Context-dependent tokens: summed over states, and the most in one state.
  int64_t total_uncertain() const;
  int64_t max_uncertain() const;
  size_t bytes() const;

 private:
  std::vector<int32_t> index_;  // [num_states] -> entries_
  std::vector<Entry> entries_;  // entries_[0] is the empty entry
};

}  // namespace mimo
