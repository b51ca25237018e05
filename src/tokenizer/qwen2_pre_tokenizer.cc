// The Qwen2 pre-tokenizer regex as a direct scanner. Each alternative of the pattern is tried in
// order at `pos`, with the outcome of PCRE2's greedy backtracking written out per alternative.
#include "tokenizer/qwen2_pre_tokenizer.h"

#include "core/utf8.h"
#include "tokenizer/unicode_category_tables.h"

namespace mimo {

const char* const kQwen2PreTokenizerPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

enum Cls : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3, kEnd = 4 };

// Class 0..3 of the character at i (kEnd past the end); *len = its byte length.
inline Cls ClassAt(std::string_view s, size_t i, char32_t* cp, size_t* len) {
  if (i >= s.size()) {
    *len = 0;
    *cp = 0;
    return kEnd;
  }
  const unsigned char b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    *cp = b;
    *len = 1;
  } else {
    *len = utf8::DecodeOne(s, i, cp);
    if (*len == 0) {  // cannot happen on valid UTF-8; treat the byte as "other"
      *cp = b;
      *len = 1;
      return kOther;
    }
  }
  return static_cast<Cls>(category_tables::Category(*cp));
}

// End of the run of characters of class `c` starting at i.
inline size_t RunEnd(std::string_view s, size_t i, Cls c) {
  char32_t cp = 0;
  size_t len = 0;
  while (ClassAt(s, i, &cp, &len) == c) i += len;
  return i;
}

inline bool IsCrLf(char32_t cp) { return cp == '\r' || cp == '\n'; }

// Case-insensitive ASCII letter test as PCRE2 caseless UTF matching sees it ('s' also matches
// U+017F LATIN SMALL LETTER LONG S; no other listed letter has a non-ASCII case variant).
inline bool LetterIs(char32_t cp, char lower) {
  if (cp == static_cast<char32_t>(lower) || cp == static_cast<char32_t>(lower - 'a' + 'A'))
    return true;
  return lower == 's' && cp == 0x17F;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at pos (text[pos] == '\''); returns the end or 0.
size_t Contraction(std::string_view s, size_t pos) {
  char32_t c1 = 0, c2 = 0;
  size_t l1 = 0, l2 = 0;
  ClassAt(s, pos + 1, &c1, &l1);
  if (l1 == 0) return 0;
  if (LetterIs(c1, 's') || LetterIs(c1, 't') || LetterIs(c1, 'm') || LetterIs(c1, 'd')) {
    return pos + 1 + l1;
  }
  ClassAt(s, pos + 1 + l1, &c2, &l2);
  if (l2 == 0) return 0;
  if ((LetterIs(c1, 'r') && LetterIs(c2, 'e')) || (LetterIs(c1, 'v') && LetterIs(c2, 'e')) ||
      (LetterIs(c1, 'l') && LetterIs(c2, 'l'))) {
    return pos + 1 + l1 + l2;
  }
  return 0;
}

}  // namespace

size_t Qwen2MatchEnd(std::string_view s, size_t pos) {
  char32_t cp0 = 0, cp1 = 0;
  size_t len0 = 0, len1 = 0;
  const Cls c0 = ClassAt(s, pos, &cp0, &len0);
  // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (cp0 == '\'') {
    if (size_t e = Contraction(s, pos)) return e;
  }
  // 2. [^\r\n\p{L}\p{N}]?\p{L}+
  if (c0 == kLetter) return RunEnd(s, pos + len0, kLetter);
  const Cls c1 = ClassAt(s, pos + len0, &cp1, &len1);
  if (c0 != kNumber && !IsCrLf(cp0) && c1 == kLetter) return RunEnd(s, pos + len0, kLetter);
  // 3. \p{N}
  if (c0 == kNumber) return pos + len0;
  // 4. " ?[^\s\p{L}\p{N}]+[\r\n]*"
  if (c0 == kOther || (cp0 == ' ' && c1 == kOther)) {
    size_t e = RunEnd(s, c0 == kOther ? pos : pos + len0, kOther);
    while (e < s.size() && (s[e] == '\r' || s[e] == '\n')) ++e;
    return e;
  }
  // c0 is white space. Scan its maximal run, noting the end of the last CR/LF in it and the
  // start of its last character.
  size_t i = pos, last_crlf_end = 0, last_start = pos;
  int count = 0;
  char32_t cp = 0;
  size_t len = 0;
  while (ClassAt(s, i, &cp, &len) == kSpace) {
    last_start = i;
    i += len;
    ++count;
    if (IsCrLf(cp)) last_crlf_end = i;
  }
  // 5. \s*[\r\n]+ : backtracking ends the match right after the run's last CR/LF.
  if (last_crlf_end != 0) return last_crlf_end;
  // 6. \s+(?!\S) : the whole run at the end of text, else all but its last character.
  if (i >= s.size()) return i;
  if (count >= 2) return last_start;
  // 7. \s+
  return i;
}

}  // namespace mimo
