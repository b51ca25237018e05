// RegexParser: a JSON Schema "pattern" (ECMA-262 syntax) as the language of the strings it
// matches, built into an Nfa over UTF-8 bytes. JSON Schema patterns are unanchored (a match
// anywhere in the string), so an end without ^ or $ is padded with "any string".
//
// Supported: literals, `.`, classes `[a-z]` / `[^...]`, \d \w \s (and \D \W \S), escapes
// (\t \n \r \f \v \0 \xHH \uHHHH and escaped punctuation), groups `(...)`, `(?:...)`,
// `(?<name>...)`, alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms too: same language),
// `^` at the start and `$` at the end of a top-level alternative. Rejected (Unimplemented):
// backreferences, lookaround, word boundaries, \p{...}, anchors elsewhere.
//
// Where ECMA-262 and Python's `re` disagree (Python is the validator our tests use), the language
// is the part both accept: \d \w \s are their ASCII sets, \D \W \S (and negated classes holding a
// shorthand) their ASCII complements, and `.` excludes \n \r U+2028 U+2029.
#pragma once

#include <string_view>

#include "core/status.h"
#include "grammar/nfa.h"

namespace mimo {

class RegexParser {
 public:
  // Repetition bounds above this are rejected (each repetition copies its operand).
  static constexpr int kMaxRepeat = 1000;

  // Length bounds of the matched strings, in characters (max -1: none).
  struct LengthBounds {
    int32_t min = 0;
    int32_t max = -1;
  };
  // The fragment accepts exactly the UTF-8 strings in which the pattern finds a match.
  // With `relaxed` non-null, a pattern anchored at both ends whose parts all have a fixed length
  // except one bounded repetition of a single character (^[A-Z][a-z]{2,20}$) is compiled with
  // that repetition unbounded and the bounds returned as total string lengths instead: the
  // language is the same once the caller applies them, and the automaton is ~20 states smaller
  // (its states then share their token sets; the length is counted on the stack).
  static StatusOr<Nfa::Frag> Compile(std::string_view pattern, Nfa* nfa,
                                     LengthBounds* relaxed = nullptr);
};

}  // namespace mimo
