// config.json parsing: the MiMo-V2 quirks of spec section 1, per-layer derivation, validation.
#include "io/hf_config.h"

#include <gtest/gtest.h>

#include "io/test_files.h"

namespace mimo {
namespace {

using testing_io::json;
using testing_io::TinyConfig;

StatusOr<ModelConfig> Parse(const json& j) { return ParseModelConfig(j.dump()); }

// The error of parsing `j`, which must fail.
std::string ErrorOf(const json& j) {
  auto c = Parse(j);
  EXPECT_FALSE(c.ok()) << j.dump();
  return c.ok() ? std::string() : c.status().message();
}

TEST(HfConfig, FlashLikeConfigDerivesLayers) {
  auto c = Parse(TinyConfig());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->hidden_size, 200);
  EXPECT_EQ(c->routed_scaling_factor, 1.0f);  // null
  EXPECT_EQ(c->n_shared_experts, 0);          // null
  EXPECT_TRUE(c->fp8);
  EXPECT_EQ(c->weight_block_size, (std::vector<int>{128, 128}));
  EXPECT_EQ(c->ignored_layers.size(), 1u);
  EXPECT_TRUE(c->has_asymmetric_kv());
  EXPECT_EQ(c->num_nextn_predict_layers, 0);
  ASSERT_EQ(c->layers.size(), 4u);
  const LayerConfig& full = c->layers[0];
  EXPECT_EQ(full.attention, AttentionKind::kFull);
  EXPECT_EQ(full.ffn, FfnKind::kDense);
  EXPECT_EQ(full.num_key_value_heads, 2);
  EXPECT_EQ(full.rotary_dim, 64);  // int(192 * 0.334) = 64
  EXPECT_EQ(full.rope_theta, 5e6f);
  EXPECT_EQ(full.sliding_window, 0);
  EXPECT_FALSE(full.has_sinks);
  const LayerConfig& swa = c->layers[1];
  EXPECT_EQ(swa.attention, AttentionKind::kSlidingWindow);
  EXPECT_EQ(swa.ffn, FfnKind::kMoe);
  EXPECT_EQ(swa.num_key_value_heads, 4);
  EXPECT_EQ(swa.head_dim, 192);
  EXPECT_EQ(swa.v_head_dim, 128);
  EXPECT_EQ(swa.rope_theta, 1e4f);
  EXPECT_EQ(swa.sliding_window, 128);
  EXPECT_TRUE(swa.has_sinks);
  EXPECT_EQ(c->layers[3].attention, AttentionKind::kFull);
  EXPECT_TRUE(c->IsSlidingLayer(2));
  // MTP layers: SWA geometry, dense FFN.
  EXPECT_EQ(c->mtp_layer.attention, AttentionKind::kSlidingWindow);
  EXPECT_EQ(c->mtp_layer.ffn, FfnKind::kDense);
  EXPECT_EQ(c->mtp_layer.num_key_value_heads, 4);
  EXPECT_TRUE(c->mtp_layer.has_sinks);
}

TEST(HfConfig, RoutedScalingFactorValueKept) {
  json j = TinyConfig();
  j["routed_scaling_factor"] = 2.5;
  EXPECT_EQ(Parse(j)->routed_scaling_factor, 2.5f);
  j.erase("routed_scaling_factor");
  EXPECT_EQ(Parse(j)->routed_scaling_factor, 1.0f);
}

TEST(HfConfig, LayernormEpsilonFallbacks) {
  json j = TinyConfig();
  j["layernorm_epsilon"] = 1e-6;
  j["rms_norm_eps"] = 1e-3;  // ignored: layernorm_epsilon is the MiMo name
  EXPECT_FLOAT_EQ(Parse(j)->layernorm_epsilon, 1e-6f);
  j.erase("layernorm_epsilon");
  EXPECT_FLOAT_EQ(Parse(j)->layernorm_epsilon, 1e-3f);
  j.erase("rms_norm_eps");
  EXPECT_FLOAT_EQ(Parse(j)->layernorm_epsilon, 1e-5f);
}

TEST(HfConfig, RopeParametersOnlyNested) {
  json j = TinyConfig();
  j.erase("rope_theta");
  j.erase("partial_rotary_factor");
  j["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.334}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->rope_theta, 1e7f);
  EXPECT_EQ(c->layers[0].rotary_dim, 64);
  EXPECT_EQ(c->layers[0].rope_theta, 1e7f);
  EXPECT_EQ(c->layers[1].rope_theta, 1e4f);  // swa_rope_theta stays top level
}

TEST(HfConfig, TopLevelRopeWinsOverNested) {
  json j = TinyConfig();
  j["rope_parameters"] = {{"rope_theta", 123.0}, {"partial_rotary_factor", 0.5}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rope_theta, 5e6f);
  EXPECT_EQ(c->layers[0].rotary_dim, 64);
}

TEST(HfConfig, PerTypeRopeParameters) {
  json j = TinyConfig();
  j.erase("rope_theta");
  j.erase("swa_rope_theta");
  j.erase("partial_rotary_factor");
  j["rope_parameters"] = {
      {"full_attention",
       {{"rope_type", "default"}, {"rope_theta", 5e6}, {"partial_rotary_factor", 0.334}}},
      {"sliding_attention",
       {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.334}}}};
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->layers[0].rope_theta, 5e6f);
  EXPECT_EQ(c->layers[1].rope_theta, 1e4f);
  EXPECT_EQ(c->layers[1].rotary_dim, 64);
}

TEST(HfConfig, UnsupportedRopeScalingNamesField) {
  json j = TinyConfig();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
  EXPECT_NE(ErrorOf(j).find("rope_scaling"), std::string::npos);
  j["rope_scaling"] = {{"type", "default"}};
  EXPECT_TRUE(Parse(j).ok());
}

TEST(HfConfig, SwaFieldsDefaultToFullValues) {
  json j = TinyConfig();
  for (const char* k :
       {"swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim"}) {
    j.erase(k);
  }
  auto c = Parse(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->layers[1].num_attention_heads, 4);
  EXPECT_EQ(c->layers[1].num_key_value_heads, 2);
  EXPECT_EQ(c->layers[1].head_dim, 192);
  EXPECT_EQ(c->layers[1].v_head_dim, 128);
}

TEST(HfConfig, SlidingWindowSizeAlias) {
  json j = TinyConfig();
  j.erase("sliding_window");
  j["sliding_window_size"] = 64;
  EXPECT_EQ(Parse(j)->layers[1].sliding_window, 64);
  j["sliding_window"] = 32;  // disagreeing values are refused
  EXPECT_NE(ErrorOf(j).find("sliding_window_size"), std::string::npos);
}

TEST(HfConfig, PatternFromHybridBlockSize) {
  json j = TinyConfig();
  j["num_hidden_layers"] = 12;
  j.erase("hybrid_layer_pattern");
  j["hybrid_block_size"] = 6;
  j["moe_layer_freq"] = json::array();
  for (int i = 0; i < 12; ++i) j["moe_layer_freq"].push_back(i ? 1 : 0);
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  for (int i = 0; i < 12; ++i) {
    const bool full = (i == 5 || i == 11);  // (i + 1) % 6 == 0
    EXPECT_EQ(c->layers[i].attention == AttentionKind::kFull, full) << "layer " << i;
  }
  bool noted = false;
  for (const auto& n : c->parse_notes) noted |= n.find("INFERRED") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(HfConfig, HybridBlockSizeNullWithListUsesList) {
  json j = TinyConfig();
  j["hybrid_block_size"] = nullptr;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->hybrid_layer_pattern, (std::vector<int>{0, 1, 1, 0}));
}

TEST(HfConfig, MoeLayerFreqInt) {
  json j = TinyConfig();
  j["moe_layer_freq"] = 1;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->moe_layer_freq, (std::vector<int>{0, 1, 1, 1}));
  j["moe_layer_freq"] = 2;
  j["first_k_dense_replace"] = 0;
  EXPECT_EQ(Parse(j)->moe_layer_freq, (std::vector<int>{1, 0, 1, 0}));
}

TEST(HfConfig, EosListAndMtpCount) {
  json j = TinyConfig();
  j["vocab_size"] = 151680;  // the ids below must be in the vocabulary (OutOfVocabularyEos...)
  j["eos_token_id"] = {151645, 151643};
  j["num_nextn_predict_layers"] = 3;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->eos_token_id.value(), 151645);
  EXPECT_EQ(c->eos_token_ids.size(), 2u);
  EXPECT_EQ(c->num_nextn_predict_layers, 3);
}

TEST(HfConfig, ValidationErrorsNameTheField) {
  struct Case {
    const char* field;
    json value;
    const char* expect;  // substring of the error
  };
  const std::vector<Case> cases = {
      {"hidden_size", 0, "hidden_size"},
      {"hidden_size", "big", "hidden_size"},
      {"num_key_value_heads", 3, "num_key_value_heads"},
      {"swa_num_key_value_heads", 3, "swa_num_key_value_heads"},
      {"hybrid_layer_pattern", json::array({0, 1, 1}), "hybrid_layer_pattern"},
      {"hybrid_layer_pattern", json::array({0, 1, 2, 0}), "hybrid_layer_pattern[2]"},
      {"moe_layer_freq", json::array({0, 1}), "moe_layer_freq"},
      {"num_experts_per_tok", 9, "num_experts_per_tok"},
      {"n_group", 3, "n_group"},
      {"topk_group", 3, "topk_group"},
      {"partial_rotary_factor", 0.34, "rotary dim"},  // int(192*0.34) = 65: odd
      {"partial_rotary_factor", 1.5, "partial_rotary_factor"},
      {"layernorm_epsilon", -1.0, "layernorm_epsilon"},
      {"sliding_window", 0, "sliding_window"},
      {"hidden_act", "gelu", "hidden_act"},
      {"quantization_config", json{{"quant_method", "awq"}}, "quant_method"},
      {"quantization_config", json{{"quant_method", "fp8"}, {"weight_block_size", {128}}},
       "weight_block_size"},
      {"eos_token_id", "x", "eos_token_id"},
      {"quantization_config", json{{"quant_method", "fp8"}, {"store_dtype", "nvfp4"}},
       "quantization_config.store_dtype"},
      {"quantization_config",
       json{{"quant_method", "fp8"}, {"store_dtype", "mxfp4"}, {"mxfp4_block_size", 16}},
       "quantization_config.mxfp4_block_size"},
      {"moe_router_dtype", "float16", "moe_router_dtype"},
      {"vocab_size", nullptr, "vocab_size"},
  };
  for (const auto& tc : cases) {
    json j = TinyConfig();
    j[tc.field] = tc.value;
    const std::string err = ErrorOf(j);
    EXPECT_NE(err.find(tc.expect), std::string::npos)
        << tc.field << "=" << tc.value.dump() << " -> " << err;
  }
}

// Issue 44: an end-of-sequence id outside [0, vocab_size) is refused, naming the field and
// vocab_size (it was accepted, and min_tokens indexes logits rows by it).
TEST(HfConfig, OutOfVocabularyEosTokenIdIsRefused) {
  for (const json& eos : {json(64), json(-1), json::array({1, 64}), json::array({-7}),
                          json(2147483647)}) {
    json j = TinyConfig();  // vocab_size 64
    j["eos_token_id"] = eos;
    const std::string err = ErrorOf(j);
    EXPECT_NE(err.find("'eos_token_id'"), std::string::npos) << eos.dump() << " -> " << err;
    EXPECT_NE(err.find("vocab_size is 64"), std::string::npos) << eos.dump() << " -> " << err;
  }
  json j = TinyConfig();
  j["eos_token_id"] = json::array({0, 63});
  EXPECT_TRUE(Parse(j).ok());
}

// Issue 44: sizes far beyond any checkpoint (2^31 - 1 positions overflowed the sliding-window
// KV plan into a negative mmap, an abort) are refused at parse, naming the field and the bound.
TEST(HfConfig, ValuesBeyondSaneRangesAreRefused) {
  struct Case {
    const char* field;
    int64_t value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"max_position_embeddings", 2147483647, "'max_position_embeddings' = 2147483647 is out of "
                                              "range: at most 67108864"},
      {"max_position_embeddings", -1, "'max_position_embeddings' must be >= 0"},
      {"sliding_window", 2147483647, "'sliding_window' = 2147483647 is out of range"},
      {"vocab_size", 2147483647, "'vocab_size' = 2147483647 is out of range: at most 16777216"},
      {"hidden_size", 1 << 30, "'hidden_size' = 1073741824 is out of range"},
      {"intermediate_size", 1 << 30, "'intermediate_size'"},
      {"head_dim", 1 << 20, "'head_dim' = 1048576 is out of range: at most 4096"},
      {"n_routed_experts", 1 << 20, "'n_routed_experts'"},
      {"max_position_embeddings", int64_t{1} << 32, "'max_position_embeddings' is out of range"},
  };
  for (const auto& tc : cases) {
    json j = TinyConfig();
    j[tc.field] = tc.value;
    if (std::string(tc.field) == "sliding_window") j.erase("sliding_window_size");
    const std::string err = ErrorOf(j);
    EXPECT_NE(err.find(tc.expect), std::string::npos) << tc.field << "=" << tc.value << " -> "
                                                      << err;
  }
  // The bounds themselves are accepted.
  json j = TinyConfig();
  j["max_position_embeddings"] = 1 << 26;
  EXPECT_TRUE(Parse(j).ok());
}

// V2.6 (spec section 1 sibling table, section 4 MXFP4): store_dtype mxfp4 with block 32, a
// bf16 router, layernorm_epsilon 1e-6 and num_nextn_predict_layers 3, all read from the config.
TEST(HfConfig, V26StorageKeys) {
  json j = TinyConfig();
  j["quantization_config"]["store_dtype"] = "mxfp4";
  j["quantization_config"]["mxfp4_block_size"] = 32;
  j["moe_router_dtype"] = "bfloat16";
  j["layernorm_epsilon"] = 1e-6;
  j["num_nextn_predict_layers"] = 3;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->fp8);
  EXPECT_TRUE(c->mxfp4);
  EXPECT_EQ(c->mxfp4_block_size, 32);
  EXPECT_EQ(c->moe_router_dtype, "bfloat16");
  EXPECT_EQ(c->layernorm_epsilon, 1e-6f);
  EXPECT_EQ(c->num_nextn_predict_layers, 3);
  // Absent keys: FP8 experts, fp32 router; block size defaults to 32 with store_dtype mxfp4.
  auto flash = Parse(TinyConfig());
  ASSERT_TRUE(flash.ok());
  EXPECT_FALSE(flash->mxfp4);
  EXPECT_EQ(flash->moe_router_dtype, "float32");
  j["quantization_config"].erase("mxfp4_block_size");
  EXPECT_EQ(Parse(j)->mxfp4_block_size, 32);
}

TEST(HfConfig, BadJsonAndMissingFile) {
  EXPECT_FALSE(ParseModelConfig("{\"hidden_size\": ").ok());
  EXPECT_FALSE(ParseModelConfig("[1, 2]").ok());
  auto c = LoadModelConfig("/nonexistent/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/config.json"), std::string::npos);
}

}  // namespace
}  // namespace mimo
