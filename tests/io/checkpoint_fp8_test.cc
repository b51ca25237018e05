// FP8 dequantisation of every layout, end to end through Checkpoint: the test quantizes known
// float matrices the way spec section 4 describes each checkpoint was produced, writes them as
// safetensors, binds them, and compares MatrixWeight::At with the original values. It also shows
// that the naive grids the spec warns about would be clearly wrong on the same bytes.
#include <gtest/gtest.h>

#include <functional>

#include "core/max_error.h"
#include "io/checkpoint.h"
#include "io/test_files.h"

namespace mimo {
namespace {

using namespace testing_io;  // NOLINT

constexpr int64_t kHidden = 200;  // TinyConfig hidden_size: two column blocks, the second partial

// Largest |got(r,c) - want(r,c)| / |want(r,c)|, +inf if any got(r,c) is NaN or infinite (a
// std::max accumulator would skip a NaN, so a NaN dequantisation could never fail the bound).
double MaxRelErr(const std::function<float(int64_t, int64_t)>& got, const Matrix& want) {
  test::MaxError worst;
  for (int64_t r = 0; r < want.rows; ++r) {
    for (int64_t c = 0; c < want.cols; ++c) {
      const double w = want.at(r, c);
      worst.Add(std::fabs(got(r, c) - w) / std::fabs(w), r * want.cols + c);
    }
  }
  return worst.max;
}

// e4m3 keeps 3 mantissa bits: rounding error <= 1/16 relative for the normal values the test
// matrices produce (every |x| / scale lies in [112, 448]).
constexpr double kFp8Tol = 0.0625 + 1e-6;

void ExpectMatches(const MatrixWeight& w, const Matrix& want, const char* what) {
  ASSERT_EQ(w.rows, want.rows) << what;
  ASSERT_EQ(w.cols, want.cols) << what;
  EXPECT_LE(MaxRelErr([&](int64_t r, int64_t c) { return w.At(r, c); }, want), kFp8Tol) << what;
}

// Dequantises stored fp8 bytes [rows, cols] with an explicitly given scale row per row.
float Deq(const std::string& fp8, const Matrix& scale, int64_t cols, int64_t r, int64_t c,
          int64_t scale_row) {
  return F8E4M3ToF32(static_cast<uint8_t>(fp8[r * cols + c])) * scale.at(scale_row, c / 128);
}

struct Part {
  Matrix original;  // [rows, hidden]
  std::string fp8;  // stored bytes
  Matrix scale;     // stored weight_scale_inv
};

std::string WriteCheckpoint(const json& config, const std::vector<RawTensor>& tensors) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/config.json", config.dump());
  WriteSafetensors(dir + "/model.safetensors", tensors);
  return dir;
}

void AddF8(std::vector<RawTensor>* t, const std::string& prefix, const Part& p) {
  t->push_back({prefix + ".weight", "F8_E4M3", {p.original.rows, kHidden}, p.fp8});
  t->push_back(
      {prefix + ".weight_scale_inv", "F32", {p.scale.rows, p.scale.cols}, F32Bytes(p.scale.v)});
}

std::unique_ptr<Checkpoint> OpenOk(const std::string& dir) {
  auto ck = Checkpoint::Open(dir);
  EXPECT_TRUE(ck.ok()) << ck.status().message();
  return ck.ok() ? std::move(ck).value() : nullptr;
}

TEST(CheckpointFp8, UniformLinearWithPartialBlocks) {
  const Matrix m = RandomBlocky(300, kHidden, 1);  // 3 row blocks (last partial), 2 col blocks
  const Quantized q = QuantizeBlocks(m);
  ASSERT_EQ(q.scale.rows, 3);
  ASSERT_EQ(q.scale.cols, 2);
  std::vector<RawTensor> t;
  AddF8(&t, "model.layers.0.mlp.gate_proj", {m, q.fp8, q.scale});
  auto ck = OpenOk(WriteCheckpoint(TinyConfig(), t));
  ASSERT_TRUE(ck);
  auto w = ck->GetLinear("model.layers.0.mlp.gate_proj", 300, kHidden);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->dtype, DType::kF8E4M3);
  ExpectMatches(*w, m, "gate_proj");
  // The same bytes with 100-row blocks (rows / scale_rows) are far off.
  EXPECT_GT(
      MaxRelErr([&](int64_t r, int64_t c) { return Deq(q.fp8, q.scale, kHidden, r, c, r / 100); },
                m),
      0.5);
  auto counts = ck->Fp8LayoutCounts();
  ASSERT_TRUE(counts.ok()) << counts.status().message();
  EXPECT_EQ((*counts)[Fp8Layout::kUniform], 1);
}

// Flash full-attention layer (layer 0 of TinyConfig: 4 q heads, 2 kv heads, TP = 2): each TP
// section [Q_r; K_r; V_r] = [384; 192; 128] rows was quantized as ONE matrix; its 6 block scales
// are stored as q_s[3h..3h+2], k_s[2h], k_s[2h+1], v_s[h] (spec section 4, "padding" trap).
struct FlashKv {
  Part q, k, v;
};
FlashKv MakeFlashSectionKv() {
  std::vector<Matrix> qs, ks, vs, sq, sk, sv;
  std::string fq, fk, fv;
  for (int h = 0; h < 2; ++h) {
    const Matrix section = RandomBlocky(704, kHidden, 100 + h, /*block_phase=*/h);
    const Quantized qz = QuantizeBlocks(section);
    EXPECT_EQ(qz.scale.rows, 6);  // ceil(704 / 128): the last block has 64 phantom rows
    qs.push_back(Rows(section, 0, 384));
    ks.push_back(Rows(section, 384, 576));
    vs.push_back(Rows(section, 576, 704));
    fq += qz.fp8.substr(0, 384 * kHidden);
    fk += qz.fp8.substr(384 * kHidden, 192 * kHidden);
    fv += qz.fp8.substr(576 * kHidden, 128 * kHidden);
    sq.push_back(Rows(qz.scale, 0, 3));  // q_s[3h..3h+2]
    sk.push_back(Rows(qz.scale, 3, 5));  // k_s[2h], k_s[2h+1]
    sv.push_back(Rows(qz.scale, 5, 6));  // v_s[h]
  }
  FlashKv f;
  f.q = {Stack(qs), fq, Stack(sq)};
  f.k = {Stack(ks), fk, Stack(sk)};
  f.v = {Stack(vs), fv, Stack(sv)};
  return f;
}

TEST(CheckpointFp8, FlashFullAttentionKvSectionGrid) {
  const FlashKv f = MakeFlashSectionKv();
  ASSERT_EQ(f.k.scale.rows, 4);  // 2 per kv head (uniform would be 3)
  ASSERT_EQ(f.v.scale.rows, 2);  // 1 per kv head
  std::vector<RawTensor> t;
  AddF8(&t, "model.layers.0.self_attn.q_proj", f.q);
  AddF8(&t, "model.layers.0.self_attn.k_proj", f.k);
  AddF8(&t, "model.layers.0.self_attn.v_proj", f.v);
  auto ck = OpenOk(WriteCheckpoint(TinyConfig(), t));
  ASSERT_TRUE(ck);
  auto qkv = ck->GetQkv("model.layers.0.self_attn", ck->config().layers[0],
                        ck->config().num_key_value_heads);
  ASSERT_TRUE(qkv.ok()) << qkv.status().message();
  EXPECT_FALSE(qkv->fused);
  EXPECT_TRUE(qkv->fp8);
  EXPECT_EQ(qkv->layout, Fp8Layout::kKvTpSection);
  ExpectMatches(qkv->q, f.q.original, "q");
  ExpectMatches(qkv->k, f.k.original, "k");
  ExpectMatches(qkv->v, f.v.original, "v");

  // Wrong grids on the same bytes (spec: "naive alternatives are WRONG"):
  // uniform 128-row blocks of each tensor,
  EXPECT_GT(MaxRelErr([&](int64_t r,
                          int64_t c) { return Deq(f.k.fp8, f.k.scale, kHidden, r, c, r / 128); },
                      f.k.original),
            0.5);
  EXPECT_GT(MaxRelErr([&](int64_t r,
                          int64_t c) { return Deq(f.v.fp8, f.v.scale, kHidden, r, c, r / 128); },
                      f.v.original),
            0.5);
  // and uniform 96-row blocks (rows / scale rows, as some converters assume).
  EXPECT_GT(MaxRelErr([&](int64_t r,
                          int64_t c) { return Deq(f.k.fp8, f.k.scale, kHidden, r, c, r / 96); },
                      f.k.original),
            0.5);
  EXPECT_GT(MaxRelErr([&](int64_t r,
                          int64_t c) { return Deq(f.v.fp8, f.v.scale, kHidden, r, c, r / 64); },
                      f.v.original),
            0.5);

  auto counts = ck->Fp8LayoutCounts();
  ASSERT_TRUE(counts.ok()) << counts.status().message();
  EXPECT_EQ((*counts)[Fp8Layout::kKvTpSection], 1);
  EXPECT_EQ((*counts)[Fp8Layout::kUniform], 0);
}

TEST(CheckpointFp8, SeparateUniformQkv) {
  // Full layer 0 quantized per tensor (k scale rows = ceil(384/128) = 3): the uniform grid.
  std::vector<RawTensor> t;
  std::vector<Matrix> orig;
  const char* names[3] = {"q_proj", "k_proj", "v_proj"};
  const int64_t rows[3] = {768, 384, 256};
  for (int i = 0; i < 3; ++i) {
    orig.push_back(RandomBlocky(rows[i], kHidden, 10 + i));
    const Quantized qz = QuantizeBlocks(orig.back());
    AddF8(&t, std::string("model.layers.0.self_attn.") + names[i], {orig.back(), qz.fp8, qz.scale});
  }
  auto ck = OpenOk(WriteCheckpoint(TinyConfig(), t));
  ASSERT_TRUE(ck);
  auto qkv = ck->GetQkv("model.layers.0.self_attn", ck->config().layers[0], 2);
  ASSERT_TRUE(qkv.ok()) << qkv.status().message();
  EXPECT_EQ(qkv->layout, Fp8Layout::kUniform);
  ExpectMatches(qkv->q, orig[0], "q");
  ExpectMatches(qkv->k, orig[1], "k");
  ExpectMatches(qkv->v, orig[2], "v");
}

TEST(CheckpointFp8, ScaleShapeMatchingNoLayoutIsRefused) {
  FlashKv f = MakeFlashSectionKv();
  f.k.scale = Rows(f.k.scale, 0, 2);  // 2 rows: neither 3 (uniform) nor 4 (section)
  std::vector<RawTensor> t;
  AddF8(&t, "model.layers.0.self_attn.q_proj", f.q);
  AddF8(&t, "model.layers.0.self_attn.k_proj", f.k);
  AddF8(&t, "model.layers.0.self_attn.v_proj", f.v);
  auto ck = OpenOk(WriteCheckpoint(TinyConfig(), t));
  ASSERT_TRUE(ck);
  auto qkv = ck->GetQkv("model.layers.0.self_attn", ck->config().layers[0], 2);
  ASSERT_FALSE(qkv.ok());
  const std::string& msg = qkv.status().message();
  for (const char* s :
       {"model.layers.0.self_attn", "[2, 2]", "uniform", "kv-tp-section", "model.safetensors"}) {
    EXPECT_NE(msg.find(s), std::string::npos) << s << " not in: " << msg;
  }
}

// Fused qkv_proj (V2.5 style): TP sections [Q_s; K_s; V_s] concatenated, each quantized on its
// own with ceil(section_rows / 128) scale rows.
struct Fused {
  Matrix q, k, v;  // originals in head order
  Part fused;      // stored tensor
};
Fused MakeFused(int64_t q_r, int64_t k_r, int64_t v_r, int tp, uint32_t seed) {
  Fused f;
  std::vector<Matrix> qs, ks, vs, sections, scales;
  std::string bytes;
  for (int s = 0; s < tp; ++s) {
    const Matrix section = RandomBlocky(q_r + k_r + v_r, kHidden, seed + s, s);
    const Quantized qz = QuantizeBlocks(section);
    qs.push_back(Rows(section, 0, q_r));
    ks.push_back(Rows(section, q_r, q_r + k_r));
    vs.push_back(Rows(section, q_r + k_r, q_r + k_r + v_r));
    sections.push_back(section);
    scales.push_back(qz.scale);
    bytes += qz.fp8;
  }
  f.q = Stack(qs);
  f.k = Stack(ks);
  f.v = Stack(vs);
  f.fused = {Stack(sections), bytes, Stack(scales)};
  return f;
}

TEST(CheckpointFp8, FusedQkvFullAndSwaLayers) {
  const Fused full = MakeFused(384, 192, 128, 2, 200);  // 704-row sections: 6 scale rows each
  const Fused swa = MakeFused(384, 384, 256, 2, 300);   // 1024-row sections, block-aligned
  ASSERT_EQ(full.fused.scale.rows, 12);
  std::vector<RawTensor> t;
  AddF8(&t, "model.layers.0.self_attn.qkv_proj", full.fused);
  AddF8(&t, "model.layers.1.self_attn.qkv_proj", swa.fused);
  auto ck = OpenOk(WriteCheckpoint(TinyConfig(), t));
  ASSERT_TRUE(ck);
  for (int l = 0; l < 2; ++l) {
    const Fused& f = l == 0 ? full : swa;
    auto qkv = ck->GetQkv("model.layers." + std::to_string(l) + ".self_attn",
                          ck->config().layers[l], ck->config().num_key_value_heads);
    ASSERT_TRUE(qkv.ok()) << qkv.status().message();
    EXPECT_TRUE(qkv->fused);
    EXPECT_EQ(qkv->layout, Fp8Layout::kFusedQkvTpSection);
    ExpectMatches(qkv->q, f.q, "q");
    ExpectMatches(qkv->k, f.k, "k");
    ExpectMatches(qkv->v, f.v, "v");
  }
  // A flat 128-row grid over the fused rows (llama.cpp's generic path) is wrong once a section
  // is not block-aligned: section 1 of the full layer starts at row 704.
  const Part& p = full.fused;
  EXPECT_GT(MaxRelErr(
                [&](int64_t r, int64_t c) {
                  return F8E4M3ToF32(static_cast<uint8_t>(p.fp8[r * kHidden + c])) *
                         p.scale.at(std::min<int64_t>(r / 128, p.scale.rows - 1), c / 128);
                },
                p.original),
            0.5);
  auto counts = ck->Fp8LayoutCounts();
  ASSERT_TRUE(counts.ok()) << counts.status().message();
  EXPECT_EQ((*counts)[Fp8Layout::kFusedQkvTpSection], 2);
}

TEST(CheckpointFp8, FusedBf16IsDeinterleaved) {
  const Fused f = MakeFused(384, 192, 128, 2, 400);
  std::vector<RawTensor> t = {{"model.layers.0.self_attn.qkv_proj.weight",
                               "BF16",
                               {f.fused.original.rows, kHidden},
                               BF16Bytes(f.fused.original.v)}};
  auto ck = OpenOk(WriteCheckpoint(TinyConfig(), t));
  ASSERT_TRUE(ck);
  auto qkv = ck->GetQkv("model.layers.0.self_attn", ck->config().layers[0], 2);
  ASSERT_TRUE(qkv.ok()) << qkv.status().message();
  EXPECT_FALSE(qkv->fp8);
  for (int i = 0; i < 3; ++i) {
    const MatrixWeight& w = i == 0 ? qkv->q : i == 1 ? qkv->k : qkv->v;
    const Matrix& want = i == 0 ? f.q : i == 1 ? f.k : f.v;
    ASSERT_EQ(w.rows, want.rows);
    for (int64_t r = 0; r < want.rows; ++r)
      for (int64_t c = 0; c < kHidden; ++c)
        ASSERT_EQ(w.At(r, c), BF16ToF32(F32ToBF16(want.at(r, c)))) << i << " " << r << " " << c;
  }
}

TEST(CheckpointFp8, FusedWrongRowCountIsRefused) {
  const Fused f = MakeFused(384, 192, 64, 2, 500);  // V too short for the config's geometry
  std::vector<RawTensor> t;
  AddF8(&t, "model.layers.0.self_attn.qkv_proj", f.fused);
  auto ck = OpenOk(WriteCheckpoint(TinyConfig(), t));
  ASSERT_TRUE(ck);
  auto qkv = ck->GetQkv("model.layers.0.self_attn", ck->config().layers[0], 2);
  ASSERT_FALSE(qkv.ok());
  EXPECT_NE(qkv.status().message().find("[1408, 200]"), std::string::npos)
      << qkv.status().message();
}

}  // namespace
}  // namespace mimo
