// NFC against hand-derived expectations from the Unicode standard (UAX #15 examples and the
// Hangul composition algorithm of §3.12). The corpus test cross-checks NFC against ICU too.
#include "tokenizer/unicode_nfc.h"

#include <gtest/gtest.h>

namespace mimo {
namespace {

TEST(UnicodeNfcTest, ComposesDecomposesAndReorders) {
  EXPECT_EQ(NfcNormalize("e\u0301"), "\u00e9");
  EXPECT_EQ(NfcNormalize("A\u030a"), "\u00c5");
  EXPECT_EQ(NfcNormalize("\u212b"), "\u00c5");         // ANGSTROM SIGN: singleton decomposition
  EXPECT_EQ(NfcNormalize("\u2126"), "\u03a9");         // OHM SIGN -> GREEK CAPITAL OMEGA
  EXPECT_EQ(NfcNormalize("a\u0323\u0302"), "\u1ead");  // dot below (220) then circumflex (230)
  EXPECT_EQ(NfcNormalize("a\u0302\u0323"), "\u1ead");  // reordered first, then composed
  EXPECT_EQ(NfcNormalize("q\u0307\u0323"), "q\u0323\u0307");  // reorder, nothing composes
  EXPECT_EQ(NfcNormalize("\u0958"), "\u0915\u093c");  // composition exclusion stays decomposed
  EXPECT_EQ(NfcNormalize("\u0344"), "\u0308\u0301");  // non-starter decomposition
  EXPECT_EQ(NfcNormalize("\u1e0b\u0323"), "\u1e0d\u0307");  // UAX #15 example: ḋ + dot below
  EXPECT_EQ(NfcNormalize("\u1100\u1161\u11a8"), "\uac01");  // Hangul L V T -> 각
  EXPECT_EQ(NfcNormalize("\uac00\u11a8"), "\uac01");        // LV + T
  EXPECT_EQ(NfcNormalize("\u00c5\u0301"), "\u01fa");        // Å + acute -> Ǻ
  EXPECT_EQ(NfcNormalize("\ufb01"), "\ufb01");  // compatibility ligature: unchanged under NFC
}

TEST(UnicodeNfcTest, QuickCheckPassesPlainText) {
  EXPECT_TRUE(IsNfcQuick("plain ASCII text 123"));
  EXPECT_TRUE(IsNfcQuick("caf\u00e9 \u4e2d\u6587 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsNfcQuick("cafe\u0301"));
  EXPECT_EQ(NfcNormalize("caf\u00e9 \u4e2d"), "caf\u00e9 \u4e2d");
}

}  // namespace
}  // namespace mimo
