// TokenDistance: how many tokens of the vocabulary a grammar's output still needs, precomputed per
// automaton state, so that at run time the fewest tokens to the end of a stack (and so which
// tokens still let the output end within max_tokens) are a few small table lookups per stack
// frame (GrammarMatcher::TokensToEnd, FillMaskWithin).
//
// What is computed. A token may end inside a frame or carry on past its end into the frames below
// (`"},` closes a string and an object and writes the comma of the array below), so the cost of a
// stack is not a sum of per-frame costs. It is one once the bytes a token carries out of a frame
// are part of the state: for a frame at state s, Exit(s) maps each *carry* y (the rest of a token
// after the frame returned; y = "" when the frame returned exactly at a token's end) to the fewest
// tokens, at least one, that start in the frame (its callees included) and leave it with y.
// After(r, y) is the same for a caller's frame at return state r that first receives the carry
// y. The fewest tokens to the end of a stack n (parent p, grandparent ...) are then
//   g(n) = min_y Exit(n)[y] + G(p, y),  G(p, y) = min_y2 After(p, y)[y2] + G(parent(p), y2),
//   G(bottom, "") = 1 (the end: the eos token, or the slot the engine needs after an output
//   that ends by itself, see below), G(bottom, y != "") = no end,
// and the fewest for a position (a set of stacks) is the least g over its nodes that consume a
// byte, or 1 when it may end now. This is exact: every token is counted in the frame where it
// starts, a frame is left at exactly one place with exactly one carry, and the Exit/After tables
// are least fixed points of their defining equations over the tokens that the token trie walks
// (general states: grouped by outcome, as StateMaskTable walks them) and that the TextProfile
// groups (text states: tokens inside the string by end state and characters, tokens leaving it by
// suffix). Carries are suffixes of tokens whose first byte may follow the rule (FOLLOW); text
// frames keep their character count k, so their exits are tabled per (state, k).
//
// The end counts as one token even for an output that ends by itself (a JSON object after its
// `}`): the engine checks max_tokens before the grammar, so an output whose last token is the
// max_tokens-th finishes "length" even when it is complete. Counting the slot keeps "fits" and
// "finishes stop" the same thing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compile_budget.h"
#include "grammar/pushdown_automaton.h"
#include "grammar/token_vocabulary.h"

namespace mimo {

// Tokens: "the output cannot end from here".
inline constexpr int32_t kNoEnd = 1 << 29;

struct CarryCost {
  int32_t carry;   // carry id; 0 = the frame returned exactly at a token's end
  int32_t tokens;  // fewest tokens
};
using CostMap = std::vector<CarryCost>;  // sorted by carry, one entry per carry

// Immutable after Build; shared by all matchers of a grammar.
class TokenDistance {
 public:
  // Text tables of strings with at least this many counts (0..cap) are banded (TextTable) when
  // their language allows it; smaller ones are searched node by node.
  static constexpr int32_t kBandFromCounts = 4096;

  // Null when the budget ran out part-way (its status says why). band_from_counts: tests compare
  // banded tables (0: band whatever allows it) with whole ones (INT32_MAX: never band).
  static std::unique_ptr<TokenDistance> Build(const PushdownAutomaton& pda,
                                              const TokenVocabulary& vocab,
                                              CompileBudget* budget = nullptr,
                                              int32_t band_from_counts = kBandFromCounts);

  // General state: the frame's exits after at least one token.
  const CostMap& Exit(int32_t state) const { return exit_[state]; }
  // General state: the frame may return before any token (its closure is complete).
  bool ExitsNow(int32_t state) const { return exits_now_[state] != 0; }
  // General (return) state receiving a non-empty carry: the frame's exits, or null when the state
  // cannot take the carry.
  const CostMap* After(int32_t state, int32_t carry) const;

  // A text rule's exits: from node (local state, character count) the fewest tokens that leave
  // the string with carry carries[i] are 1 + dist[sig_of[i]][node] (kNoEnd: never). Carries
  // with the same set of nodes that can take them share a signature, so a stack evaluates the
  // few signatures rather than every carry.
  //
  // A bounded string's counts run to its maxLength: Claude Code's tools have one of 524,288, 10.5M
  // nodes that took 3.8 s to search one by one. From min_chars up to where a token can still
  // feel the bound, which tokens exit and which nodes are alive do not depend on the count, so
  // neither does a node's distance (the count only grows along a path, by at most the most
  // characters of a token per step, so a shortest path from there never reaches the bound's
  // region). Such a band of counts is held in one column; the counts below and above it are
  // computed count by count, top down (BuildTextBanded).
  struct TextTable {
    int32_t cap = 0;               // counts 0..cap
    std::vector<int32_t> carries;  // carry ids this string may leave with
    std::vector<int32_t> sig_of;   // [carries] signature
    int32_t num_sigs = 0;
    std::vector<int32_t> dist;          // [num_sigs * nodes] inside tokens to a node of the sig
    std::vector<int32_t> suffix_carry;  // [profile suffixes] carry id, -1 when none may follow
    int32_t nodes = 0;                  // local states * width
    int32_t width = 0;                  // columns per local state: cap + 1 when not banded
    // Counts [band_lo, band_lo + band_len) share column band_lo; the counts above it sit
    // band_len - 1 columns lower. Unbanded: band_lo is past every count.
    int32_t band_lo = INT32_MAX, band_len = 0;
    int32_t column(int32_t count) const {
      if (count < band_lo) return count;
      return count < band_lo + band_len ? band_lo : count - band_len + 1;
    }
    int32_t node(int32_t local, int32_t count) const { return local * width + column(count); }
    int32_t at(int32_t sig, int32_t node) const {
      return dist[static_cast<size_t>(sig) * nodes + node];
    }
  };
  const TextTable& text(int32_t text_rule) const { return texts_[text_rule]; }

  // The tokens of a consuming general state, grouped by what they do: `out` = the fewest tokens
  // after one of them, by carry out of the frame (the token itself not counted).
  struct Group {
    std::vector<int32_t> tokens;  // sorted ids
    CostMap out;
  };
  std::span<const Group> groups(int32_t state) const {
    const auto [b, e] = group_range_[state];
    return {groups_.data() + b, groups_.data() + e};
  }

  std::string_view carry(int32_t id) const { return carries_[id]; }
  int32_t num_carries() const { return static_cast<int32_t>(carries_.size()); }
  size_t bytes() const;
  int32_t sweeps() const { return sweeps_; }  // fixed-point sweeps the build took

 private:
  friend class TokenDistanceBuilder;
  std::vector<std::string> carries_;
  std::vector<CostMap> exit_;         // [num_states]
  std::vector<uint8_t> exits_now_;    // [num_states]
  std::vector<uint64_t> after_keys_;  // sorted (state << 32 | carry)
  std::vector<CostMap> after_;        // [after_keys]
  std::vector<TextTable> texts_;      // [num_text_rules]
  std::vector<Group> groups_;
  std::vector<std::pair<int32_t, int32_t>> group_range_;  // [num_states]
  int32_t sweeps_ = 0;
};

}  // namespace mimo
