// Checkpoint: opening (single, sharded, bad), binding errors that name tensor, file, expected and
// actual, MTP layer counting and skipping of multimodal tensors.
#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include "io/test_files.h"

namespace mimo {
namespace {

using namespace testing_io;  // NOLINT

std::vector<RawTensor> BasicTensors() {
  return {
      {"model.embed_tokens.weight",
       "BF16",
       {64, 200},
       BF16Bytes(std::vector<float>(64 * 200, 0.5f))},
      {"model.norm.weight", "F32", {200}, F32Bytes(std::vector<float>(200, 1.0f))},
      {"model.layers.0.mlp.gate_proj.weight", "F16", {96, 200}, std::string(96 * 200 * 2, '\0')},
      {"model.mtp.layers.0.enorm.weight", "BF16", {200}, BF16Bytes(std::vector<float>(200, 1.0f))},
      {"model.mtp.layers.1.enorm.weight", "BF16", {200}, BF16Bytes(std::vector<float>(200, 1.0f))},
      {"visual.blocks.0.attn.qkv.weight", "BF16", {6, 4}, BF16Bytes(std::vector<float>(24, 1.0f))},
      {"audio_tower.conv.weight", "F32", {3}, F32Bytes({1, 2, 3})},
      {"model.vision_embed.weight", "F32", {2}, F32Bytes({1, 2})},
  };
}

std::string WriteDir(const json& config, const std::vector<RawTensor>& tensors) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/config.json", config.dump());
  WriteSafetensors(dir + "/model.safetensors", tensors);
  return dir;
}

TEST(Checkpoint, OpensAndCountsMtpAndSkipsMultimodal) {
  const std::string dir = WriteDir(TinyConfig(), BasicTensors());
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  EXPECT_EQ((*ck)->NumMtpLayers(), 2);
  EXPECT_EQ((*ck)->config().num_nextn_predict_layers, 2);  // absent in config: counted
  EXPECT_EQ((*ck)->SkippedTensorNames().size(), 3u);
  EXPECT_FALSE((*ck)->Has("visual.blocks.0.attn.qkv.weight"));
  EXPECT_TRUE((*ck)->Has("model.norm.weight"));
  EXPECT_EQ((*ck)->TensorNames().size(), 5u);
  auto bytes = (*ck)->BytesByDType();
  EXPECT_EQ(bytes[DType::kBF16], 64u * 200 * 2 + 200 * 2 * 2 + 24 * 2);
  EXPECT_EQ(bytes[DType::kF32], 200u * 4 + 3 * 4 + 2 * 4);
  EXPECT_EQ(bytes[DType::kF16], 96u * 200 * 2);
}

TEST(Checkpoint, ConfigClaimingMoreMtpLayersIsLowered) {
  json cfg = TinyConfig();
  cfg["num_nextn_predict_layers"] = 3;
  auto ck = Checkpoint::Open(WriteDir(cfg, BasicTensors()));
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ((*ck)->config().num_nextn_predict_layers, 2);
}

TEST(Checkpoint, GetChecksShapeAndDtype) {
  const std::string dir = WriteDir(TinyConfig(), BasicTensors());
  auto ck = std::move(Checkpoint::Open(dir)).value();
  auto t = ck->Get("model.norm.weight", {200}, {DType::kF32, DType::kBF16});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->as<float>()[7], 1.0f);
  EXPECT_TRUE(ck->Get("model.embed_tokens.weight", {-1, 200}, {}).ok());

  auto bad_shape = ck->Get("model.norm.weight", {300}, {DType::kF32});
  ASSERT_FALSE(bad_shape.ok());
  const std::string& m = bad_shape.status().message();
  for (const char* s :
       {"model.norm.weight", "model.safetensors", "expected F32 [300]", "got F32 [200]"}) {
    EXPECT_NE(m.find(s), std::string::npos) << s << " not in: " << m;
  }
  auto bad_dtype = ck->Get("model.embed_tokens.weight", {64, 200}, {DType::kF32});
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_NE(bad_dtype.status().message().find("got BF16 [64, 200]"), std::string::npos);

  auto missing = ck->Get("model.layers.3.input_layernorm.weight", {200}, {DType::kBF16});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("model.layers.3.input_layernorm.weight"),
            std::string::npos);
}

TEST(Checkpoint, GetLinearNonQuantizedAndErrors) {
  std::vector<RawTensor> t = BasicTensors();
  t.push_back(
      {"model.layers.0.mlp.up_proj.weight", "F8_E4M3", {96, 200}, std::string(96 * 200, '\x38')});
  t.push_back(
      {"model.layers.0.mlp.down_proj.weight", "F8_E4M3", {200, 96}, std::string(200 * 96, '\x38')});
  t.push_back({"model.layers.0.mlp.down_proj.weight_scale_inv", "F32", {1, 1}, F32Bytes({2.0f})});
  t.push_back({"model.layers.0.mlp.wide.weight", "I32", {2, 2}, std::string(16, '\0')});
  auto ck = std::move(Checkpoint::Open(WriteDir(TinyConfig(), t))).value();

  auto gate = ck->GetLinear("model.layers.0.mlp.gate_proj", 96, 200);
  ASSERT_TRUE(gate.ok()) << gate.status().message();
  EXPECT_EQ(gate->dtype, DType::kF16);
  EXPECT_EQ(gate->At(5, 7), 0.0f);

  auto up = ck->GetLinear("model.layers.0.mlp.up_proj", 96, 200);  // no scale tensor
  ASSERT_FALSE(up.ok());
  EXPECT_NE(up.status().message().find("model.layers.0.mlp.up_proj.weight_scale_inv"),
            std::string::npos);

  auto down = ck->GetLinear("model.layers.0.mlp.down_proj", 200, 96);  // scale must be [2, 1]
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.status().message().find("expected F32/BF16 [2, 1], got F32 [1, 1]"),
            std::string::npos)
      << down.status().message();

  auto wide = ck->GetLinear("model.layers.0.mlp.wide", 2, 2);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("got I32 [2, 2]"), std::string::npos);

  auto swapped = ck->GetLinear("model.layers.0.mlp.gate_proj", 200, 96);
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find("expected F32/BF16/F16/F8_E4M3 [200, 96], got F16 "
                                            "[96, 200]"),
            std::string::npos)
      << swapped.status().message();
}

TEST(Checkpoint, BadScaleDtypeBf16IsConverted) {
  std::vector<RawTensor> t = {
      {"model.layers.0.mlp.up_proj.weight", "F8_E4M3", {96, 200}, std::string(96 * 200, '\x38')},
      {"model.layers.0.mlp.up_proj.weight_scale_inv", "BF16", {1, 2}, BF16Bytes({0.5f, 4.0f})}};
  auto ck = std::move(Checkpoint::Open(WriteDir(TinyConfig(), t))).value();
  auto up = ck->GetLinear("model.layers.0.mlp.up_proj", 96, 200);
  ASSERT_TRUE(up.ok()) << up.status().message();
  EXPECT_EQ(up->At(3, 5), 0.5f);    // e4m3 0x38 = 1.0, column block 0
  EXPECT_EQ(up->At(3, 150), 4.0f);  // column block 1
}

TEST(Checkpoint, ShardedCheckpoint) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/config.json", TinyConfig().dump());
  std::vector<RawTensor> t = BasicTensors();
  WriteSafetensors(dir + "/model-00001-of-00002.safetensors", {t[0], t[1]});
  WriteSafetensors(dir + "/model_mtp.safetensors", {t[3], t[4]});
  json index = {{"weight_map", json::object()}};
  index["weight_map"][t[0].name] = "model-00001-of-00002.safetensors";
  index["weight_map"][t[1].name] = "model-00001-of-00002.safetensors";
  index["weight_map"][t[3].name] = "model_mtp.safetensors";
  index["weight_map"][t[4].name] = "model_mtp.safetensors";
  WriteFile(dir + "/model.safetensors.index.json", index.dump());
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  EXPECT_EQ((*ck)->NumFiles(), 2u);
  EXPECT_EQ((*ck)->NumMtpLayers(), 2);
  auto norm = (*ck)->Get("model.norm.weight", {300}, {DType::kF32});
  ASSERT_FALSE(norm.ok());
  EXPECT_NE(norm.status().message().find("model-00001-of-00002.safetensors"), std::string::npos);
}

TEST(Checkpoint, OpenErrors) {
  // No config.json.
  std::string dir = MakeTempDir();
  WriteSafetensors(dir + "/model.safetensors", BasicTensors());
  auto ck = Checkpoint::Open(dir);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("config.json"), std::string::npos);
  // Bad config names the field and the file.
  json cfg = TinyConfig();
  cfg["num_key_value_heads"] = 3;
  WriteFile(dir + "/config.json", cfg.dump());
  ck = Checkpoint::Open(dir);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("num_key_value_heads"), std::string::npos);
  // Truncated weights.
  WriteFile(dir + "/config.json", TinyConfig().dump());
  std::string bytes = ReadFile(dir + "/model.safetensors");
  WriteFile(dir + "/model.safetensors", bytes.substr(0, bytes.size() / 2));
  ck = Checkpoint::Open(dir);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("model.safetensors"), std::string::npos);
  // No weights at all.
  dir = MakeTempDir();
  WriteFile(dir + "/config.json", TinyConfig().dump());
  EXPECT_FALSE(Checkpoint::Open(dir).ok());
}

}  // namespace
}  // namespace mimo
