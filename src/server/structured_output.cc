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
    matcher_.FillMaskWithin(bitmask, eos_ids, remaining_tokens);
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
