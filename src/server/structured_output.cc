// StructuredOutput -> TokenConstraint (see structured_output.h).
#include "server/structured_output.h"

#include <algorithm>
#include <cstring>

#include "grammar/grammar_matcher.h"

namespace mimo {
namespace {

class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(const StructuredOutput& so) : so_(so), matcher_(so.grammar) {}

  void FillMask(uint32_t* bitmask, std::span<const int32_t> eos_ids,
                int remaining_tokens) override {
    const int32_t words = so_.grammar->vocab().mask_words();
    if (!active()) {  // unconstrained until the triggers
      std::memset(bitmask, 0xff, words * sizeof(uint32_t));
      return;
    }
    const int64_t to_end = matcher_.MinBytesToEnd();
    // Close to max_tokens: walk a shortest completion (one byte per token, then eos), so the
    // output still ends by itself, valid, within the budget.
    if (remaining_tokens <= to_end + kSteerMargin) {
      matcher_.FillCompletionMask(bitmask, eos_ids);
      for (int32_t w = 0; w < words; ++w)
        if (bitmask[w]) return;
    }
    matcher_.FillNextTokenMask(bitmask, eos_ids);
    // Nearing it: a token may commit to more than it writes (a member, an item, a minLength),
    // so only tokens after which a shortest completion still fits stay allowed.
    if (remaining_tokens <= to_end + kLookahead) KeepFeasible(bitmask, eos_ids, remaining_tokens);
  }

  bool Accept(int32_t id) override {
    if (active()) return matcher_.AcceptToken(id);
    if (id == so_.triggers[seen_]) {
      ++seen_;
      if (active() && !so_.feed_text.empty()) matcher_.AcceptString(so_.feed_text);
    }
    return true;
  }

  bool IsTerminated() const override { return active() && matcher_.IsTerminated(); }

 private:
  // Tokens beyond the shortest completion (one byte each) and its eos at which steering starts.
  static constexpr int64_t kSteerMargin = 2;
  // ... and at which each allowed token is tried for what it commits to (a vocabulary's worth
  // of trial steps per token in this window, so only near the budget's end).
  static constexpr int64_t kLookahead = 48;

  void KeepFeasible(uint32_t* bitmask, std::span<const int32_t> eos_ids, int remaining_tokens) {
    const int32_t vocab = so_.grammar->vocab().size();
    for (int32_t id = 0; id < vocab; ++id) {
      if (!((bitmask[id >> 5] >> (id & 31)) & 1u)) continue;
      if (std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end()) continue;
      if (!matcher_.AcceptToken(id)) continue;
      // After it: remaining - 1 tokens for the rest (one byte each) and the eos.
      const bool fits = matcher_.IsTerminated() || matcher_.MinBytesToEnd() + 1 <= remaining_tokens - 1;
      matcher_.Rollback(1);
      if (!fits) bitmask[id >> 5] &= ~(1u << (id & 31));
    }
  }

  bool active() const { return seen_ == so_.triggers.size(); }

  StructuredOutput so_;
  GrammarMatcher matcher_;
  size_t seen_ = 0;  // triggers generated so far
};

}  // namespace

ConstraintFactory MakeConstraintFactory(StructuredOutput so) {
  return [so] { return std::unique_ptr<TokenConstraint>(new GrammarConstraint(so)); };
}

}  // namespace mimo
