// Small UTF-8 helpers shared by the tokenizer and the server: decode one code point, append one,
// validate and repair lossily (invalid subparts -> U+FFFD, as WHATWG TextDecoder / Rust
// from_utf8_lossy do).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mimo::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

// Decodes the sequence starting at s[i]. Returns its length (1..4) and sets *cp when it is a
// complete, valid UTF-8 sequence. Otherwise returns 0 and sets *bad to the length of the maximal
// subpart (the longest prefix of a valid sequence found there, at least 1 byte) that a lossy
// decoder replaces by one U+FFFD (Unicode §3.9 "U+FFFD substitution of maximal subparts", which
// is what WHATWG TextDecoder and Rust's from_utf8_lossy do). *truncated is set when that subpart
// runs into the end of s, i.e. more bytes could still complete it.
inline size_t DecodeOne(std::string_view s, size_t i, char32_t* cp, size_t* bad = nullptr,
                        bool* truncated = nullptr) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const unsigned char b0 = p[i];
  if (truncated) *truncated = false;
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len;
  char32_t c;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    if (bad) *bad = 1;
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= n) {
      if (bad) *bad = k;
      if (truncated) *truncated = true;
      return 0;
    }
    const unsigned char b = p[i + k];
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b & 0xC0) == 0x80;
    if (!ok) {
      if (bad) *bad = k;
      return 0;
    }
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return len;
}

inline void Append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// True if all of s is valid UTF-8.
// Characters of UTF-8 text (bytes that are not continuation bytes; invalid bytes count one each).
inline size_t CodepointCount(std::string_view s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

inline bool IsValid(std::string_view s) {
  char32_t cp;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = DecodeOne(s, i, &cp);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// Lossy copy of s: each maximal invalid subpart is replaced by one U+FFFD.
inline std::string Repair(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  char32_t cp;
  size_t bad = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t len = DecodeOne(s, i, &cp, &bad);
    if (len == 0) {
      Append(kReplacement, &out);
      i += bad;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace mimo::utf8
