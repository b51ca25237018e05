// GrammarOptions: choices that shape a compiled grammar beyond the schema itself.
#pragma once

#include <cstdint>

#include "grammar/compile_budget.h"

namespace mimo {

struct GrammarOptions {
  // Whitespace allowed between JSON tokens (never inside numbers or literals, never around the
  // top-level value). kOptionalSpace allows "" or " " at each place, which covers compact JSON
  // and Python's json.dumps style ({"a": 1, "b": [1, 2]}) without letting a model loop on
  // whitespace; kAny allows any run of [ \t\n\r] (pretty-printed JSON; a weak model may emit
  // whitespace forever); kNone allows none.
  enum class Whitespace { kNone, kOptionalSpace, kAny };
  Whitespace whitespace = Whitespace::kOptionalSpace;
  // A bound on the characters of every string the schema leaves unbounded (no maxLength; for a
  // pattern or format only where some string within the bound matches it): a guard for weak or
  // random-weight models, which may otherwise never close a string. -1: none.
  int32_t max_string_length = -1;
  // The most characters a string can have in any output (the context's tokens x the longest
  // token's characters; -1: unknown). A minLength above it can never be met (refused as
  // unsatisfiable); a maxLength above it can never bind (dropped), so neither sizes a table.
  int64_t max_text_chars = -1;
  // What one compile may spend (compile_budget.h); not part of the grammar's identity.
  GrammarLimits limits{};
};

}  // namespace mimo
