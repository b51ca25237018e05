// The MXFP4 rounding rule of `mimo quantize` (io/expert_quantizer.h) on blocks worked out by
// hand: E2M1 ties to the even code, OCP's max-rule exponent, and the least-squared-error exponent
// where it differs (one above the max rule's, and one below on a block of one large value among
// many small ones). The whole-checkpoint rewrite is checked against a numpy implementation in
// tests/python/test_quantize.py.
#include "io/expert_quantizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mimo {
namespace {

TEST(Mxfp4Rounding, NearestMagnitudeTiesToEvenCode) {
  struct Case {
    double y;
    int code;
  };
  // Grid {0, 0.5, 1, 1.5, 2, 3, 4, 6}; midpoints 0.25 .. 5 go to the even code of the pair.
  const Case cases[] = {{0, 0},    {0.2, 0}, {0.25, 0}, {0.26, 1}, {0.5, 1}, {0.75, 2}, {1.0, 2},
                        {1.25, 2}, {1.3, 3}, {1.75, 4}, {2.49, 4}, {2.5, 4}, {2.51, 5}, {3.5, 6},
                        {4.9, 6},  {5.0, 6}, {5.01, 7}, {6, 7},    {100, 7}};
  for (const Case& c : cases) EXPECT_EQ(RoundToE2M1Magnitude(c.y), c.code) << c.y;
}

// Unpacks code i of a packed block (element 2i low nibble, 2i + 1 high).
int CodeAt(const uint8_t* packed, int i) { return (packed[i / 2] >> (4 * (i % 2))) & 15; }

TEST(Mxfp4Rounding, MaxRuleIsOcpsAndPacksLowNibbleFirst) {
  std::vector<float> x(32, 0.0f);
  x[0] = 5.0f;   // amax 5: floor(log2 5) = 2 -> 2^(2 - 2) = 1 -> exponent byte 127
  x[1] = -0.5f;  // code 9 (sign bit + 0.5)
  x[2] = -0.1f;  // rounds to zero: +0, code 0
  x[31] = 1.5f;  // code 3
  uint8_t packed[16];
  Mxfp4ErrorStats st;
  EXPECT_EQ(QuantizeMxfp4Block(x.data(), 32, Mxfp4ScaleRule::kMax, packed, &st), 127);
  EXPECT_EQ(CodeAt(packed, 0), 6);  // 5 is the tie of 4 and 6: the even code (4)
  EXPECT_EQ(CodeAt(packed, 1), 9);
  EXPECT_EQ(CodeAt(packed, 2), 0);
  EXPECT_EQ(CodeAt(packed, 31), 3);
  EXPECT_EQ(packed[0], 6 | (9 << 4));
  EXPECT_NEAR(st.sum_sq_error, 1.0 + 0.01, 1e-6);  // 5 -> 4, -0.1 -> 0
  EXPECT_NEAR(st.sum_sq_weight, 25 + 0.25 + 0.01 + 2.25, 1e-6);
}

TEST(Mxfp4Rounding, MseRuleTakesTheNextExponentWhenStrictlyBetter) {
  std::vector<float> x(32, 0.0f);
  uint8_t packed[16];
  // 7.2: the max rule's scale 1 clamps it to 6 (error 1.44); scale 2 gives 3.6 -> 4 -> 8 (0.64).
  x[0] = 7.2f;
  EXPECT_EQ(QuantizeMxfp4Block(x.data(), 32, Mxfp4ScaleRule::kMax, packed, nullptr), 127);
  Mxfp4ErrorStats st;
  EXPECT_EQ(QuantizeMxfp4Block(x.data(), 32, Mxfp4ScaleRule::kMse, packed, &st), 128);
  EXPECT_EQ(CodeAt(packed, 0), 6);
  EXPECT_EQ(st.blocks_not_max, 1);
  EXPECT_NEAR(st.sum_sq_error, 0.64, 1e-6);
  EXPECT_NEAR(st.sum_sq_error_max_rule, 1.44, 1e-6);
  // 7.0: both scales give error 1 (6 at scale 1; 3.5 ties to 4 -> 8 at scale 2): kept.
  x[0] = 7.0f;
  EXPECT_EQ(QuantizeMxfp4Block(x.data(), 32, Mxfp4ScaleRule::kMse, packed, nullptr), 127);
}

TEST(Mxfp4Rounding, MseRuleTakesTheExponentBelowForOneOutlier) {
  // 4 and 31 x 0.25: at scale 1 each 0.25 ties to 0 (31 x 0.0625 = 1.94); at scale 0.5 the 4 is
  // clamped to 3 (error 1) and every 0.25 is exact.
  std::vector<float> x(32, 0.25f);
  x[7] = 4.0f;
  uint8_t packed[16];
  EXPECT_EQ(QuantizeMxfp4Block(x.data(), 32, Mxfp4ScaleRule::kMax, packed, nullptr), 127);
  Mxfp4ErrorStats st;
  EXPECT_EQ(QuantizeMxfp4Block(x.data(), 32, Mxfp4ScaleRule::kMse, packed, &st), 126);
  EXPECT_EQ(CodeAt(packed, 7), 7);
  EXPECT_EQ(CodeAt(packed, 0), 1);
  EXPECT_DOUBLE_EQ(st.sum_sq_error, 1.0);
  EXPECT_DOUBLE_EQ(st.sum_sq_error_max_rule, 31 * 0.0625);
}

TEST(Mxfp4Rounding, ZeroBlockAndExponentRange) {
  std::vector<float> x(32, 0.0f);
  uint8_t packed[16];
  EXPECT_EQ(QuantizeMxfp4Block(x.data(), 32, Mxfp4ScaleRule::kMse, packed, nullptr), 127);
  for (uint8_t b : packed) EXPECT_EQ(b, 0);
  x[3] = 1e-45f;  // a denormal: the smallest exponent byte, 0, with the value rounded to zero
  EXPECT_EQ(QuantizeMxfp4Block(x.data(), 32, Mxfp4ScaleRule::kMax, packed, nullptr), 0);
  x[3] = 3e38f;  // near FLT_MAX: exponent 127 + 127 - 2 = 252
  EXPECT_EQ(QuantizeMxfp4Block(x.data(), 32, Mxfp4ScaleRule::kMax, packed, nullptr), 252);
}

TEST(Mxfp4Rounding, RoutedExpertNames) {
  EXPECT_TRUE(IsRoutedExpertWeight("model.layers.3.mlp.experts.17.gate_proj.weight"));
  EXPECT_TRUE(IsRoutedExpertWeight("model.mtp.layers.0.mlp.experts.0.down_proj.weight"));
  EXPECT_FALSE(IsRoutedExpertWeight("model.layers.3.mlp.experts.17.gate_proj.weight_scale_inv"));
  EXPECT_FALSE(IsRoutedExpertWeight("model.layers.3.mlp.shared_experts.gate_proj.weight"));
  EXPECT_FALSE(IsRoutedExpertWeight("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_FALSE(IsRoutedExpertWeight("model.layers.3.mlp.gate.weight"));
}

// The int8 rule by hand: per row, per 32 columns, scale the smallest bf16 value at or above
// amax / 127 and codes rounded to nearest even; a short last block over its own elements; an
// all-zero block scale 1; FP8 input converted.
TEST(QuantizeWeightToInt8, BlockScalesAndRoundingByHand) {
  // Row 0: 40 columns. Block 0: amax 15.875 -> 15.875 / 127 = 0.125 exactly, a bf16 value kept
  // as is; 0.3125 / 0.125 and -0.0625 / 0.125 are exactly 2.5 and -0.5: ties, to even 2 and 0.
  // Block 1 (8 columns): amax 1 -> fp32(1 / 127) = 0x3c010204, rounded up to the bf16 0x3c02 =
  // 65 / 8192, so 1 codes as rint(126.03) = 126, not 127; 325 / 16384 over it is exactly 2.5
  // (to even: 2) and -0.5 codes as rint(-63.02) = -63. Row 1: all zero -> scales 1, codes 0.
  constexpr int64_t kCols = 40;
  std::vector<float> v(2 * kCols, 0.0f);
  v[0] = 0.3125f;
  v[1] = -0.0625f;
  v[3] = 15.875f;
  v[5] = -15.875f;
  v[32] = 1.0f;
  v[33] = 325.0f / 16384.0f;
  v[39] = -0.5f;
  MatrixWeight w;
  w.dtype = DType::kF32;
  w.rows = 2;
  w.cols = kCols;
  w.data = v.data();
  Mxfp4ErrorStats stats;
  auto q = QuantizeWeightToInt8(w, nullptr, "t", &stats);
  ASSERT_TRUE(q.ok()) << q.status().message();
  ASSERT_EQ(q->dtype, DType::kInt8);
  ASSERT_EQ(q->scale_cols, 2);
  ASSERT_EQ(q->block_cols, 32);
  const auto* codes = static_cast<const int8_t*>(q->data);
  const float s0 = 0.125f, s1 = 65.0f / 8192.0f;
  ASSERT_EQ(15.875f / 127.0f, s0);
  ASSERT_LT(1.0f / 127.0f, s1);
  EXPECT_EQ(q->scale_inv[0], s0);
  EXPECT_EQ(q->scale_inv[1], s1);
  EXPECT_EQ(q->scale_inv[2], 1.0f);
  EXPECT_EQ(q->scale_inv[3], 1.0f);
  ASSERT_EQ(0.3125f / s0, 2.5f);
  ASSERT_EQ(-0.0625f / s0, -0.5f);
  ASSERT_EQ(v[33] / s1, 2.5f);
  EXPECT_EQ(codes[0], 2);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[3], 127);
  EXPECT_EQ(codes[5], -127);
  EXPECT_EQ(codes[32], 126);
  EXPECT_EQ(codes[33], 2);
  EXPECT_EQ(codes[39], -63);
  for (int64_t c = 0; c < kCols; ++c) EXPECT_EQ(codes[kCols + c], 0);
  EXPECT_EQ(stats.blocks, 4);
  // A NaN is refused naming the row.
  v[kCols + 7] = std::nanf("");
  auto bad = QuantizeWeightToInt8(w, nullptr, "model.layers.0.mlp.up_proj.weight", nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.layers.0.mlp.up_proj.weight: row 1"),
            std::string::npos)
      << bad.status().message();
}

// A block whose amax / 127 is below fp32's least subnormal (0 in fp32) still gets a positive
// scale, so no code is 0 / 0: the least bf16 subnormal, against which its values code as 0.
TEST(QuantizeWeightToInt8, TinyBlockGetsAPositiveScale) {
  std::vector<float> v(32, 0.0f);
  v[4] = 1e-44f;  // a subnormal: / 127 is 0 in fp32
  ASSERT_EQ(v[4] / 127.0f, 0.0f);
  MatrixWeight w;
  w.dtype = DType::kF32;
  w.rows = 1;
  w.cols = 32;
  w.data = v.data();
  auto q = QuantizeWeightToInt8(w, nullptr, "t", nullptr);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->scale_inv[0], BF16ToF32(1));
  for (int c = 0; c < 32; ++c) EXPECT_EQ(static_cast<const int8_t*>(q->data)[c], 0) << c;
}

// --experts / --dense / --lm-head: what each flag's value selects, and the one message a bad value
// gets (from every model-running command and mimo inspect alike).
TEST(WeightFormatFlags, EachFlagSetsItsGroupAndBadValuesNameTheFlag) {
  std::map<std::string, std::string> given = {{"dense", "fp8"}, {"lm-head", "mxfp4"}};
  auto value_of = [&](const char* flag) -> std::optional<std::string> {
    auto it = given.find(flag);
    if (it == given.end()) return std::nullopt;
    return it->second;
  };
  auto f = ParseWeightFormatFlags(value_of);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->experts, WeightFormat::kKeep);
  EXPECT_EQ(f->dense, WeightFormat::kFp8);
  EXPECT_EQ(f->lm_head, WeightFormat::kMxfp4);
  EXPECT_TRUE(f->any());
  EXPECT_EQ(f->Flags(), "--dense fp8 --lm-head mxfp4");

  given = {{"experts", "int8"}};
  f = ParseWeightFormatFlags(value_of);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->experts, WeightFormat::kInt8);
  EXPECT_EQ(f->Flags(), "--experts int8");

  given = {};
  f = ParseWeightFormatFlags(value_of);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->any());
  EXPECT_EQ(f->Flags(), "");

  for (const char* bad : {"int4", "", "FP8"}) {
    given = {{"experts", "mxfp4"}, {"dense", bad}};
    f = ParseWeightFormatFlags(value_of);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().message(),
              std::string("--dense '") + bad + "' is not supported (fp8, int8 or mxfp4)");
  }
}

}  // namespace
}  // namespace mimo
