// SHA-256 against the FIPS 180-4 example vectors and HMAC-SHA256 against RFC 4231's test cases.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace mimo {
namespace {

std::string Hex(std::string_view s) { return HexDigest(Sha256::Of(s)); }

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalUpdatesEqualOneShot) {
  std::string msg;
  for (int i = 0; i < 300; ++i) msg += static_cast<char>(i * 7 + 3);
  for (size_t cut = 0; cut <= msg.size(); cut += 13) {
    Sha256 s;
    s.Update(std::string_view(msg).substr(0, cut));
    s.Update(std::string_view(msg).substr(cut));
    EXPECT_EQ(HexDigest(s.Finish()), Hex(msg)) << cut;
  }
}

TEST(HmacSha256, Rfc4231Cases) {
  // Test case 1: 20 bytes of 0x0b, "Hi There".
  EXPECT_EQ(HexDigest(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: key "Jefe".
  EXPECT_EQ(HexDigest(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a 131-byte key (longer than the block: hashed first).
  EXPECT_EQ(HexDigest(HmacSha256(std::string(131, '\xaa'),
                                 "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(ConstantTimeEquals, ComparesBytes) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace mimo
