// GrammarBuilder: collects rules (Nfa fragments that may call rules by id, and text rules) and
// compiles them into a PushdownAutomaton: each general rule determinized, states that cannot
// complete removed, distances to completion computed, left recursion rejected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "grammar/compile_budget.h"
#include "grammar/nfa.h"
#include "grammar/pushdown_automaton.h"

namespace mimo {

// Single-use, not thread-safe.
class GrammarBuilder {
 public:
  // `budget` (may be null: unlimited) bounds the automaton and is charged by Build; it must
  // outlive the builder.
  explicit GrammarBuilder(CompileBudget* budget = nullptr);
  Nfa& nfa() { return nfa_; }
  CompileBudget* budget() const { return budget_; }
  // A rule id usable in calls before its body is known (recursion).
  int32_t DeclareRule(std::string name);
  void DefineRule(int32_t rule, Nfa::Frag body);
  bool IsDefined(int32_t rule) const { return rules_[rule].defined; }
  // A text rule whose value has [min_chars, max_chars] characters (max -1: unbounded).
  StatusOr<int32_t> AddTextRule(std::string name, std::shared_ptr<const TextDfa> dfa,
                                std::shared_ptr<const TextProfile> profile, int32_t min_chars,
                                int32_t max_chars);
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }

  StatusOr<std::shared_ptr<const PushdownAutomaton>> Build(int32_t root);

 private:
  struct RuleDef {
    std::string name;
    Nfa::Frag body;
    bool defined = false;
    int32_t text = -1;
  };
  Status CheckLeftRecursion(const PushdownAutomaton& pda) const;
  static void ComputeFollow(PushdownAutomaton* pda);

  CompileBudget* budget_;
  Nfa nfa_;
  std::vector<RuleDef> rules_;
  std::vector<PdaTextRule> texts_;
};

}  // namespace mimo
