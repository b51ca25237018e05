// Code point classes for the Qwen2 pre-tokenizer (generated into unicode_category_tables.cc by
// tests/tokenizer_oracle/gen_category_tables.py): 0 other, 1 letter \p{L}, 2 number \p{N},
// 3 white space as PCRE2 UCP's \s.
#pragma once

#include <cstdint>

namespace mimo::category_tables {

extern const uint16_t kCategoryBlock[0x110000 >> 8];
extern const uint8_t kCategoryRows[][256];

inline uint8_t Category(char32_t cp) {
  return cp < 0x110000 ? kCategoryRows[kCategoryBlock[cp >> 8]][cp & 0xFF] : 0;
}

}  // namespace mimo::category_tables
