// MXFP4 routed experts (V2.6, spec section 4) through Checkpoint: a weight quantized here the way
// the spec describes (E2M1 pairs, low nibble first; one E8M0 exponent per 32 columns of a row)
// binds as 4-bit codes left in the mapping, dequantizes to what the test's own decoder computes,
// and every malformed variant of it is an error naming the tensor.
#include <gtest/gtest.h>

#include <cmath>

#include "io/checkpoint.h"
#include "io/test_files.h"

namespace mimo {
namespace {

using namespace testing_io;  // NOLINT

constexpr int64_t kRows = 40, kCols = 200;  // 7 exponent blocks, the last one 8 columns

// OCP MX E2M1 magnitudes by code 0..7; bit 3 is the sign.
constexpr double kE2M1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

struct Mxfp4 {
  std::string codes;  // [rows, cols / 2] bytes
  std::string exps;   // [rows, ceil(cols / 32)] bytes
};

// Per (row, 32-column block): e = 127 + ceil(log2(amax / 6)), codes = nearest E2M1 of
// x / 2^(e - 127).
Mxfp4 Quantize(const Matrix& m) {
  const int64_t nb = (m.cols + 31) / 32;
  Mxfp4 q;
  q.codes.assign(m.rows * ((m.cols + 1) / 2), '\0');
  q.exps.assign(m.rows * nb, '\0');
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t j = 0; j < nb; ++j) {
      double amax = 0.0;
      for (int64_t c = 32 * j; c < std::min(m.cols, 32 * j + 32); ++c)
        amax = std::max(amax, std::fabs(static_cast<double>(m.at(r, c))));
      const int e = 127 + static_cast<int>(std::ceil(std::log2(amax / 6.0)));
      q.exps[r * nb + j] = static_cast<char>(e);
      for (int64_t c = 32 * j; c < std::min(m.cols, 32 * j + 32); ++c) {
        const double v = m.at(r, c) / std::ldexp(1.0, e - 127);
        int best = 0;
        for (int k = 1; k < 8; ++k)
          if (std::fabs(std::fabs(v) - kE2M1[k]) < std::fabs(std::fabs(v) - kE2M1[best])) best = k;
        const int code = best | (v < 0 ? 8 : 0);
        char& byte = q.codes[r * ((m.cols + 1) / 2) + c / 2];
        byte = static_cast<char>((c & 1) ? (byte & 0x0f) | (code << 4) : (byte & 0xf0) | code);
      }
    }
  }
  return q;
}

double Decode(const Mxfp4& q, int64_t r, int64_t c) {
  const uint8_t byte = static_cast<uint8_t>(q.codes[r * ((kCols + 1) / 2) + c / 2]);
  const int code = (c & 1) ? byte >> 4 : byte & 15;
  const int e = static_cast<uint8_t>(q.exps[r * ((kCols + 31) / 32) + c / 32]);
  return (code & 8 ? -1.0 : 1.0) * kE2M1[code & 7] * std::ldexp(1.0, e - 127);
}

json Mxfp4Config() {
  json j = TinyConfig();
  j["quantization_config"]["store_dtype"] = "mxfp4";
  j["quantization_config"]["mxfp4_block_size"] = 32;
  return j;
}

const std::string kPrefix = "model.layers.1.mlp.experts.3.up_proj";

std::vector<RawTensor> Tensors(const Mxfp4& q) {
  return {{kPrefix + ".weight", "U8", {kRows, kCols / 2}, q.codes},
          {kPrefix + ".weight_scale", "U8", {kRows, (kCols + 31) / 32}, q.exps}};
}

std::string Write(const json& config, const std::vector<RawTensor>& tensors) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/config.json", config.dump());
  WriteSafetensors(dir + "/model.safetensors", tensors);
  return dir;
}

// The error of binding kPrefix (which must fail), and the same from Mxfp4WeightCount.
std::pair<std::string, std::string> BindErrors(const json& config,
                                               const std::vector<RawTensor>& tensors) {
  auto ck = Checkpoint::Open(Write(config, tensors));
  EXPECT_TRUE(ck.ok()) << ck.status().message();
  if (!ck.ok()) return {};
  auto w = (*ck)->GetLinear(kPrefix, kRows, kCols);
  auto n = (*ck)->Mxfp4WeightCount();
  EXPECT_FALSE(w.ok());
  EXPECT_FALSE(n.ok());
  return {w.ok() ? "" : w.status().message(), n.ok() ? "" : n.status().message()};
}

TEST(CheckpointMxfp4, BindsCodesInPlaceAndDequantizesBySpec) {
  const Matrix m = RandomBlocky(kRows, kCols, 7);
  const Mxfp4 q = Quantize(m);
  auto ck = Checkpoint::Open(Write(Mxfp4Config(), Tensors(q)));
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  auto w = (*ck)->GetLinear(kPrefix, kRows, kCols);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->dtype, DType::kMxfp4);
  EXPECT_EQ(w->RowBytes(), kCols / 2);
  EXPECT_EQ(w->DataBytes(), kRows * kCols / 2);
  EXPECT_EQ(w->ScaleBytes(), kRows * 7);
  EXPECT_EQ(w->owned, nullptr);  // codes and exponents stay in the mapping
  const SafetensorsTensor* raw = (*ck)->FindTensor(kPrefix + ".weight");
  EXPECT_EQ(w->data, raw->data);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const double want = Decode(q, r, c);
      ASSERT_EQ(w->At(r, c), static_cast<float>(want)) << r << "," << c;
      // Nearest-E2M1 rounding: within one step (<= 2 units of the block's 2^(e-127)).
      const int e = static_cast<uint8_t>(q.exps[r * 7 + c / 32]);
      EXPECT_LE(std::fabs(want - m.at(r, c)), std::ldexp(1.0, e - 127) + 1e-30);
    }
  }
  auto n = (*ck)->Mxfp4WeightCount();
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(*n, 1);
}

TEST(CheckpointMxfp4, MalformedTensorsAreNamedErrors) {
  const Mxfp4 q = Quantize(RandomBlocky(kRows, kCols, 8));
  const std::string w = kPrefix + ".weight", s = kPrefix + ".weight_scale";
  {  // scale missing
    auto t = Tensors(q);
    t.pop_back();
    auto [bind, count] = BindErrors(Mxfp4Config(), t);
    EXPECT_NE(bind.find("'" + s + "' not found"), std::string::npos) << bind;
    EXPECT_NE(count.find("'" + s + "' not found"), std::string::npos) << count;
  }
  {  // FP8-style weight_scale_inv instead of E8M0 exponents
    auto t = Tensors(q);
    t.back().name = s + "_inv";
    auto [bind, count] = BindErrors(Mxfp4Config(), t);
    EXPECT_NE(bind.find("weight_scale_inv"), std::string::npos) << bind;
    EXPECT_NE(bind.find(s), std::string::npos) << bind;
    EXPECT_NE(count.find(s), std::string::npos) << count;
  }
  {  // wrong scale shape: one exponent per 64 columns
    auto t = Tensors(q);
    t.back().shape = {kRows, 4};
    t.back().bytes = q.exps.substr(0, kRows * 4);
    auto [bind, count] = BindErrors(Mxfp4Config(), t);
    for (const std::string& e : {bind, count}) {
      EXPECT_NE(e.find(s), std::string::npos) << e;
      EXPECT_NE(e.find("[40, 7]"), std::string::npos) << e;
      EXPECT_NE(e.find("[40, 4]"), std::string::npos) << e;
    }
  }
  {  // scales stored as F32 values
    auto t = Tensors(q);
    t.back().dtype = "F32";
    t.back().bytes = F32Bytes(std::vector<float>(kRows * 7, 1.0f));
    auto [bind, count] = BindErrors(Mxfp4Config(), t);
    EXPECT_NE(bind.find(s), std::string::npos) << bind;
    EXPECT_NE(bind.find("F32"), std::string::npos) << bind;
  }
  {  // codes not packed (one byte per element)
    auto t = Tensors(q);
    t.front().shape = {kRows / 2, kCols};
    auto [bind, count] = BindErrors(Mxfp4Config(), t);
    EXPECT_NE(bind.find(w), std::string::npos) << bind;
    EXPECT_NE(bind.find("[40, 100]"), std::string::npos) << bind;
  }
  {  // U8 weights without quantization_config.store_dtype "mxfp4"
    auto [bind, count] = BindErrors(TinyConfig(), Tensors(q));
    for (const std::string& e : {bind, count}) {
      EXPECT_NE(e.find(w), std::string::npos) << e;
      EXPECT_NE(e.find("store_dtype"), std::string::npos) << e;
    }
  }
}

TEST(CheckpointMxfp4, OrphanExponentsAreAnError) {
  const Mxfp4 q = Quantize(RandomBlocky(kRows, kCols, 9));
  auto t = Tensors(q);
  t.front().name = kPrefix + ".other";
  auto ck = Checkpoint::Open(Write(Mxfp4Config(), t));
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  auto n = (*ck)->Mxfp4WeightCount();
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find(kPrefix + ".weight_scale"), std::string::npos)
      << n.status().message();
}

}  // namespace
}  // namespace mimo
