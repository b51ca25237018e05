// Structured outputs for the engine: a GrammarMatcher (src/grammar) behind the engine's
// TokenConstraint seam, active from the first token or only after trigger tokens: `</think>`
// when the request reasons (the constraint applies to the answer, not the reasoning), and
// `<tool_call>` under tool_choice "auto" (the model may answer in text; once it opens a call,
// the call's arguments are constrained: the opening tag is fed to the grammar, which then
// continues the call).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "grammar/grammar.h"

namespace mimo {

struct StructuredOutput {
  std::shared_ptr<const Grammar> grammar;
  // Token ids that must be generated, in order, before the grammar applies (empty: at once).
  std::vector<int32_t> triggers;
  // The last trigger's text, fed to the grammar as its first bytes (e.g. "<tool_call>"); empty:
  // the grammar starts after it.
  std::string feed_text;
};

// One constraint per sample.
ConstraintFactory MakeConstraintFactory(StructuredOutput so);

}  // namespace mimo
