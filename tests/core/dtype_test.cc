// Scalar dtype conversions against values from the format definitions (OCP FP8, bfloat16).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mimo {
namespace {

TEST(DType, E4M3KnownCodes) {
  EXPECT_EQ(F8E4M3ToF32(0x00), 0.0f);
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);           // max finite
  EXPECT_EQ(F8E4M3ToF32(0xfe), -448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);             // exp 7 = bias
  EXPECT_EQ(F8E4M3ToF32(0x08), std::ldexp(1.0f, -6));  // min normal
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(F8E4M3ToF32(0x3c), 1.5f);
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
}

TEST(DType, E4M3RoundTripAllCodes) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    float v = F8E4M3ToF32(static_cast<uint8_t>(c));
    uint8_t back = F32ToF8E4M3(v);
    if (v == 0.0f) {
      EXPECT_EQ(F8E4M3ToF32(back), 0.0f);
    } else {
      EXPECT_EQ(back, c) << "code " << c;
    }
  }
  EXPECT_EQ(F32ToF8E4M3(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(F32ToF8E4M3(1.0625f), 0x38);  // tie between 1.0 and 1.125 -> even mantissa
}

TEST(DType, BF16RoundNearestEven) {
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.0f)), 1.0f);
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), F32ToBF16(1.0f));  // tie -> even
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
}

TEST(DType, Names) {
  DType t;
  ASSERT_TRUE(ParseDType("F8_E4M3", &t));
  EXPECT_EQ(t, DType::kF8E4M3);
  EXPECT_FALSE(ParseDType("F8_E5M2", &t));
  // MXFP4 is a weight format stored as U8 bytes, never a safetensors dtype.
  EXPECT_EQ(DTypeName(DType::kMxfp4), "MXFP4");
  EXPECT_FALSE(ParseDType("MXFP4", &t));
  ASSERT_TRUE(ParseDType("U8", &t));
  EXPECT_EQ(t, DType::kU8);
}

// OCP MX: E2M1 is 1 sign, 2 exponent (bias 1), 1 mantissa bit; E8M0 is 2^(e - 127), 255 = NaN.
TEST(DType, Mxfp4KnownCodes) {
  const float kPositive[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(E2M1ToF32(static_cast<uint8_t>(c)), kPositive[c]) << c;
    EXPECT_EQ(E2M1ToF32(static_cast<uint8_t>(c | 8)), -kPositive[c]) << c;
  }
  EXPECT_TRUE(std::signbit(E2M1ToF32(8)));  // -0
  EXPECT_EQ(E8M0ToF32(127), 1.0f);
  EXPECT_EQ(E8M0ToF32(128), 2.0f);
  EXPECT_EQ(E8M0ToF32(120), std::ldexp(1.0f, -7));
  EXPECT_EQ(E8M0ToF32(1), std::ldexp(1.0f, -126));
  EXPECT_EQ(E8M0ToF32(0), std::ldexp(1.0f, -127));  // subnormal
  EXPECT_EQ(E8M0ToF32(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(E8M0ToF32(255)));
}

}  // namespace
}  // namespace mimo
