// Small string helpers shared by the streaming chat-output parsers: what part of a buffer can be
// released now, and what must be held because it may be the start of a tag.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string_view>

namespace mimo {

// Length of the longest suffix of `text` that is a proper prefix of one of `tags` (so it may
// become that tag once more text arrives). 0 when no suffix can grow into a tag.
inline size_t PartialTagSuffix(std::string_view text, std::initializer_list<std::string_view> tags) {
  size_t best = 0;
  for (std::string_view tag : tags) {
    size_t max_len = std::min(text.size(), tag.size() - 1);
    for (size_t len = max_len; len > best; --len) {
      if (text.substr(text.size() - len) == tag.substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

// True when `text` is a (possibly empty) proper prefix of `tag`.
inline bool IsProperPrefixOf(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

inline bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Index of the first non-whitespace character of `text` (text.size() when all whitespace).
inline size_t SkipSpaces(std::string_view text, size_t pos = 0) {
  while (pos < text.size() && IsAsciiSpace(text[pos])) ++pos;
  return pos;
}

}  // namespace mimo
