// NFC normalisation: a quick check that skips almost all text, then the full UAX #15 algorithm
// (decompose, reorder by combining class, compose) over the whole string when it is needed.
#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <vector>

#include "core/utf8.h"
#include "tokenizer/unicode_nfc_tables.h"

namespace mimo {
namespace {

using namespace nfc_tables;  // NOLINT: table names are only used here

// Hangul syllable algorithm constants (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

bool InSlowPath(char32_t cp) {
  if (cp < kNfcSlowPath[0].lo) return false;
  const RangeEntry* end = kNfcSlowPath + kNfcSlowPathSize;
  const RangeEntry* it = std::upper_bound(kNfcSlowPath, end, cp,
                                          [](char32_t c, const RangeEntry& r) { return c < r.lo; });
  return it != kNfcSlowPath && cp <= (it - 1)->hi;
}

int CombiningClass(char32_t cp) {
  if (cp < kCombiningClass[0].cp) return 0;
  const CccEntry* end = kCombiningClass + kCombiningClassSize;
  const CccEntry* it = std::lower_bound(kCombiningClass, end, cp,
                                        [](const CccEntry& e, char32_t c) { return e.cp < c; });
  return (it != end && it->cp == cp) ? it->ccc : 0;
}

void Decompose(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = static_cast<int>(cp - kSBase);
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const DecompEntry* end = kDecomposition + kDecompositionSize;
  const DecompEntry* it = std::lower_bound(
      kDecomposition, end, cp, [](const DecompEntry& e, char32_t c) { return e.cp < c; });
  if (it != end && it->cp == cp) {
    out->insert(out->end(), kDecompData + it->offset, kDecompData + it->offset + it->length);
  } else {
    out->push_back(cp);
  }
}

// Primary composite of (a, b), or 0 if none.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const CompEntry* end = kComposition + kCompositionSize;
  const CompEntry* it =
      std::lower_bound(kComposition, end, std::make_pair(a, b),
                       [](const CompEntry& e, std::pair<char32_t, char32_t> k) {
                         return e.first < k.first || (e.first == k.first && e.second < k.second);
                       });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

}  // namespace

bool IsNfcQuick(std::string_view text) {
  // Everything below U+0300 is NFC-inert (no combining marks, no composable seconds).
  char32_t cp;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0xCC) {  // lead bytes < 0xCC encode < U+0300
      ++i;
      continue;
    }
    const size_t len = utf8::DecodeOne(text, i, &cp);
    if (len == 0) return false;
    if (InSlowPath(cp)) return false;
    i += len;
  }
  return true;
}

std::string NfcNormalize(std::string_view text) {
  if (IsNfcQuick(text)) return std::string(text);
  // 1. Full canonical decomposition.
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  char32_t cp;
  for (size_t i = 0; i < text.size();) {
    size_t len = utf8::DecodeOne(text, i, &cp);
    if (len == 0) cp = utf8::kReplacement, len = 1;
    Decompose(cp, &cps);
    i += len;
  }
  // 2. Canonical ordering: stable sort of each run of non-starters by combining class.
  std::vector<int> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) ccc[i] = CombiningClass(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    for (size_t a = i + 1; a < j; ++a) {  // insertion sort: runs are short, and it is stable
      for (size_t b = a; b > i && ccc[b - 1] > ccc[b]; --b) {
        std::swap(cps[b - 1], cps[b]);
        std::swap(ccc[b - 1], ccc[b]);
      }
    }
    i = j;
  }
  // 3. Canonical composition: each character composes with the last starter unless blocked
  //    (an intervening character with ccc == 0 or ccc >= its own).
  std::vector<char32_t> out;
  std::vector<int> out_ccc;
  out.reserve(cps.size());
  out_ccc.reserve(cps.size());
  long starter = -1;  // index in `out` of the last starter
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const int cc = ccc[i];
    if (starter >= 0) {
      const int last_cc = out_ccc.back();
      const bool adjacent = static_cast<size_t>(starter) + 1 == out.size();
      const bool blocked = !adjacent && (last_cc == 0 || last_cc >= cc);
      if (!blocked) {
        if (char32_t comp = Compose(out[starter], c); comp != 0) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(out.size());
    out.push_back(c);
    out_ccc.push_back(cc);
  }
  std::string result;
  result.reserve(text.size() + 8);
  for (char32_t c : out) utf8::Append(c, &result);
  return result;
}

}  // namespace mimo
