// GPT-2's byte <-> unicode alphabet used by byte-level BPE: printable Latin-1 bytes ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves, the other 68 bytes map to U+0100.. in byte order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mimo {

// Code point that stands for byte b.
char32_t ByteLevelCodePoint(uint8_t b);
// UTF-8 of ByteLevelCodePoint(b).
std::string ByteLevelChar(uint8_t b);
// bytes -> the byte-level spelling used in vocab/merges.
std::string ByteLevelEncode(std::string_view bytes);
// Byte-level spelling -> bytes. A character outside the alphabet is kept as its own UTF-8.
std::string ByteLevelDecode(std::string_view token);

}  // namespace mimo
