// Base64 against RFC 4648's test vectors (section 10), round trips and malformed input.
#include "core/base64.h"

#include <gtest/gtest.h>

namespace mimo {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const char* pairs[][2] = {{"", ""},
                            {"f", "Zg=="},
                            {"fo", "Zm8="},
                            {"foo", "Zm9v"},
                            {"foob", "Zm9vYg=="},
                            {"fooba", "Zm9vYmE="},
                            {"foobar", "Zm9vYmFy"}};
  for (auto& p : pairs) {
    EXPECT_EQ(Base64Encode(p[0]), p[1]);
    ASSERT_TRUE(Base64Decode(p[1]).has_value()) << p[1];
    EXPECT_EQ(*Base64Decode(p[1]), p[0]);
  }
}

TEST(Base64, RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 37) {
    const std::string s = all.substr(0, n);
    EXPECT_EQ(Base64Decode(Base64Encode(s)).value_or("?"), s);
  }
}

TEST(Base64, RejectsMalformedText) {
  for (const char* bad : {"Zg", "Zg=", "Z===", "Zm9v!A==", "Zh==", "Zm9=", "=Zm9", "Zg==Zg=="}) {
    EXPECT_FALSE(Base64Decode(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace mimo
