// TextDfa: the byte language of one string token of the output, from its first byte to its
// terminator: a JSON string with its quotes, or a raw `mimo` tool-call parameter value with its
// closing `</parameter>`. It has no calls and exactly one accepting state, `end`, with no way out,
// so a token that reaches `end` before its last byte hands the rest (its suffix) to the enclosing
// rule. Text rules are where most of the vocabulary is allowed, so their per-state token sets are
// precomputed once per vocabulary (TextProfile) rather than per grammar.
//
// Length constraints (minLength/maxLength) are counted at run time rather than unrolled into
// states: `Starts(q, b)` says that byte b begins a new character of the value (the first byte of a
// UTF-8 sequence or of an escape), and `pending(q)` how many counted characters a terminator being
// matched will take back. A text stack node carries k = characters started so far; it is alive
// while k - pending(q) <= max, and complete at `end` when min <= k - pending(end).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "grammar/dfa.h"

namespace mimo {

// Immutable; shared between grammars.
class TextDfa {
 public:
  // JSON string `"..."` whose decoded value is in `value` (a call-free Dfa over UTF-8), written
  // with one canonical escape per character that needs one (\" \\ \b \f \n \r \t \u00XX; with
  // tool_safe also & and < as \u0026 \u003c, see JsonSchemaCompiler).
  static StatusOr<std::shared_ptr<const TextDfa>> JsonString(const Dfa& value, bool tool_safe);
  // Any JSON string, with every escape JSON allows (\/ and \uXXXX outside the surrogates too).
  static std::shared_ptr<const TextDfa> AnyJsonString(bool tool_safe);
  // A raw tool parameter value in `value`, not containing `terminator`, then the terminator.
  static StatusOr<std::shared_ptr<const TextDfa>> RawValue(const Dfa& value,
                                                           std::string_view terminator);
  // Any raw value, then the terminator.
  static std::shared_ptr<const TextDfa> AnyRawValue(std::string_view terminator);
  // Every valid UTF-8 string (the value language of an unconstrained string).
  static Dfa AnyUtf8();

  int32_t num_states() const { return static_cast<int32_t>(pending_.size()); }
  int32_t start() const { return 0; }
  int32_t end() const { return end_; }
  int32_t Next(int32_t q, uint8_t b) const { return next_[static_cast<size_t>(q) * 256 + b]; }
  bool Starts(int32_t q, uint8_t b) const { return starts_[static_cast<size_t>(q) * 256 + b]; }
  int16_t pending(int32_t q) const { return pending_[q]; }
  // Fewest bytes from q to `end` (ignoring length constraints).
  int32_t bytes_to_end(int32_t q) const { return bytes_to_end_[q]; }
  int16_t max_pending() const { return max_pending_; }
  size_t bytes() const {  // memory held
    return next_.size() * 4 + starts_.size() + pending_.size() * 2 + bytes_to_end_.size() * 4;
  }
  // Equal for equal languages built the same way (minimal, breadth-first numbered): the key
  // of cached profiles.
  std::string Fingerprint() const;

  // True for the built-in "any string" languages: a character can always be added, and ending
  // from state q never lengthens the value beyond k - pending(q), so a node (q, k) within bounds
  // [min, max] is alive exactly while k - pending(q) <= max. Other languages need AliveTable.
  bool counts_freely() const { return counts_freely_; }
  // alive[q * (cap + 1) + k] != 0: from state q with k characters started, a string with a
  // length in [min_chars, max_chars] (max -1: unbounded) can still be completed. cap is
  // max_chars + max_pending(), or min_chars + max_pending() when unbounded (larger counts behave
  // alike and are clamped to it).
  std::vector<uint8_t> AliveTable(int32_t min_chars, int32_t max_chars, int32_t* cap) const;

 private:
  static StatusOr<std::shared_ptr<const TextDfa>> FromDfa(const Dfa& d);

  std::vector<int32_t> next_;        // [num_states * 256], -1 = dead
  std::vector<uint8_t> starts_;      // [num_states * 256]
  std::vector<int16_t> pending_;     // [num_states]
  std::vector<int32_t> bytes_to_end_;  // [num_states]
  int32_t end_ = -1;
  int16_t max_pending_ = 0;
  bool counts_freely_ = false;
};

}  // namespace mimo
