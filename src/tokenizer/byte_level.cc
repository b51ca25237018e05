// GPT-2 byte-level alphabet tables.
#include "tokenizer/byte_level.h"

#include <array>

#include "core/utf8.h"

namespace mimo {
namespace {

struct Tables {
  std::array<char32_t, 256> to_cp;
  std::array<int16_t, 324> from_cp;  // code point (< 324) -> byte, -1 if none
  Tables() {
    from_cp.fill(-1);
    char32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<char32_t>(b) : extra++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& T() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t ByteLevelCodePoint(uint8_t b) { return T().to_cp[b]; }

std::string ByteLevelChar(uint8_t b) {
  std::string s;
  utf8::Append(T().to_cp[b], &s);
  return s;
}

std::string ByteLevelEncode(std::string_view bytes) {
  std::string s;
  s.reserve(bytes.size() * 2);
  for (char c : bytes) utf8::Append(T().to_cp[static_cast<uint8_t>(c)], &s);
  return s;
}

std::string ByteLevelDecode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  char32_t cp;
  size_t bad = 1;
  for (size_t i = 0; i < token.size();) {
    const size_t len = utf8::DecodeOne(token, i, &cp, &bad);
    if (len == 0) {  // not UTF-8: keep the raw bytes
      out.append(token.substr(i, bad));
      i += bad;
      continue;
    }
    if (cp < T().from_cp.size() && T().from_cp[cp] >= 0) {
      out.push_back(static_cast<char>(T().from_cp[cp]));
    } else {
      out.append(token.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace mimo
