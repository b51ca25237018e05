// StructuredOutput -> TokenConstraint (see structured_output.h).
#include "server/structured_output.h"

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
    // Close to max_tokens: walk a shortest completion (one byte per token, then eos), so the
    // output still ends by itself, valid, within the budget.
    if (remaining_tokens <= matcher_.MinBytesToEnd() + kSteerMargin) {
      matcher_.FillCompletionMask(bitmask, eos_ids);
      for (int32_t w = 0; w < words; ++w)
        if (bitmask[w]) return;
    }
    matcher_.FillNextTokenMask(bitmask, eos_ids);
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
