// GrammarOptions: choices that shape a compiled grammar beyond the schema itself.
#pragma once

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
};

}  // namespace mimo
