// Unicode tables for NFC normalisation (generated into unicode_nfc_tables.cc from the Unicode
// Character Database by tests/tokenizer_oracle/gen_nfc_tables.py). All arrays are sorted by code
// point (kComposition by (first, second)). Hangul syllables are algorithmic, not in the tables.
#pragma once

#include <cstdint>

namespace mimo::nfc_tables {

struct CccEntry {
  char32_t cp;
  uint8_t ccc;  // canonical combining class, != 0
};
struct DecompEntry {
  char32_t cp;
  uint16_t offset;  // into kDecompData
  uint8_t length;   // full canonical decomposition length
};
struct CompEntry {
  char32_t first, second, composite;
};
struct RangeEntry {
  char32_t lo, hi;  // inclusive
};

extern const CccEntry kCombiningClass[];
extern const int kCombiningClassSize;
extern const char32_t kDecompData[];
extern const DecompEntry kDecomposition[];
extern const int kDecompositionSize;
extern const CompEntry kComposition[];
extern const int kCompositionSize;
extern const RangeEntry kNfcSlowPath[];
extern const int kNfcSlowPathSize;

}  // namespace mimo::nfc_tables
