// TagTable: where a tag such as `</think>` or `<tool_call>` can appear in text written token by
// token. The chat output parser finds these tags in the text, whichever tokens spell them, so a
// constraint that must know where the reasoning ends or a tool call begins follows the text the
// same way: a partial match (how many bytes of the tag the text ends with) carried from token to
// token, and per partial match the few tokens that would complete the tag, precomputed once per
// vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mimo {

class TokenVocabulary;

// Immutable; shared between requests and threads (cached per vocabulary and tag).
class TagTable {
 public:
  static std::shared_ptr<const TagTable> Build(std::string_view tag, const TokenVocabulary& vocab);

  std::string_view tag() const { return tag_; }
  // Runs `bytes` from partial match `state` (bytes of the tag the text ends with, 0..size-1):
  // returns the partial match after them; *end = the offset just past the first complete tag in
  // `bytes`, or -1.
  int32_t Advance(int32_t state, std::string_view bytes, int32_t* end) const;

  struct Completion {
    int32_t id;
    int32_t end;  // bytes of the token up to the end of the tag
  };
  // The (maskable) tokens that complete the tag from partial match `state`, sorted by id.
  std::span<const Completion> completions(int32_t state) const { return completions_[state]; }
  // Tokens whose bytes, after leading whitespace, are a non-empty prefix of the tag or start with
  // it: the tokens that can begin the tag at the start of an output. Sorted.
  std::span<const int32_t> starters() const { return starters_; }

 private:
  std::string tag_;
  std::vector<int32_t> fail_;                         // [size + 1] KMP failure links
  std::vector<std::vector<Completion>> completions_;  // [size]
  std::vector<int32_t> starters_;
};

}  // namespace mimo
