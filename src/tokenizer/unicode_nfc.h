// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition; UAX #15) for the tokenizer's "NFC" normalizer.
#pragma once

#include <string>
#include <string_view>

namespace mimo {

// True when `text` (valid UTF-8) certainly is unchanged by NFC: it contains no code point that
// has a non-zero combining class, changes under NFC on its own, or can compose with a preceding
// character. ASCII-only text is answered without table look-ups. Some NFC text answers false.
bool IsNfcQuick(std::string_view text);

// NFC of `text`, which must be valid UTF-8 (see utf8::Repair). Returns `text` unchanged (one copy)
// when IsNfcQuick(text). Data: the Unicode version of unicode_nfc_tables.cc.
std::string NfcNormalize(std::string_view text);

}  // namespace mimo
