// RecogniseVariant against the sibling table of spec section 1: each released geometry with its
// storage formats gives its name; the same geometry with another generation's formats, or any
// other geometry, does not pass for a release.
#include "io/model_variant.h"

#include <gtest/gtest.h>

namespace mimo {
namespace {

ModelConfig FlashSize() {
  ModelConfig c;
  c.hidden_size = 4096;
  c.num_hidden_layers = 48;
  c.num_attention_heads = 64;
  c.num_key_value_heads = 4;
  c.swa_num_key_value_heads = 8;
  c.n_routed_experts = 256;
  return c;
}

ModelConfig ProSize() {
  ModelConfig c;
  c.hidden_size = 6144;
  c.num_hidden_layers = 70;
  c.num_attention_heads = 128;
  c.num_key_value_heads = 8;
  c.swa_num_key_value_heads = 8;
  c.n_routed_experts = 384;
  return c;
}

ModelConfig V26(ModelConfig c) {
  c.mxfp4 = true;
  c.mxfp4_block_size = 32;
  c.moe_router_dtype = "bfloat16";
  return c;
}

TEST(ModelVariant, EverySiblingOfTheTable) {
  EXPECT_EQ(RecogniseVariant(FlashSize(), false).name, "MiMo-V2-Flash");
  EXPECT_EQ(RecogniseVariant(FlashSize(), true).name, "MiMo-V2.5");
  EXPECT_EQ(RecogniseVariant(ProSize(), true).name, "MiMo-V2.5-Pro");
  EXPECT_EQ(RecogniseVariant(V26(FlashSize()), true).name, "MiMo-V2.6-Flash");
  EXPECT_EQ(RecogniseVariant(V26(ProSize()), true).name, "MiMo-V2.6-Pro");
  const ModelVariant v = RecogniseVariant(V26(ProSize()), true);
  EXPECT_EQ(v.generation, "V2.6");
  EXPECT_EQ(v.size, "Pro");
  EXPECT_NE(v.reason.find("MXFP4"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("hidden 6144"), std::string::npos) << v.reason;
}

TEST(ModelVariant, EitherV26FormatDecidesTheGeneration) {
  ModelConfig router_only = FlashSize();
  router_only.moe_router_dtype = "bfloat16";
  EXPECT_EQ(RecogniseVariant(router_only, true).generation, "V2.6");
  ModelConfig experts_only = FlashSize();
  experts_only.mxfp4 = true;
  EXPECT_EQ(RecogniseVariant(experts_only, true).name, "MiMo-V2.6-Flash");
}

TEST(ModelVariant, OtherGeometriesAreNotPassedOffAsReleases) {
  ModelConfig tiny = V26(FlashSize());
  tiny.hidden_size = 256;
  const ModelVariant v = RecogniseVariant(tiny, true);
  EXPECT_EQ(v.name, "unrecognised");
  EXPECT_EQ(v.generation, "V2.6");  // the storage generation is still reported
  EXPECT_EQ(v.size, "other");
  ModelConfig few_experts = ProSize();
  few_experts.n_routed_experts = 256;
  EXPECT_EQ(RecogniseVariant(few_experts, true).name, "unrecognised");
  // No Pro-sized model ships separate q/k/v.
  EXPECT_EQ(RecogniseVariant(ProSize(), false).name, "unrecognised");
}

}  // namespace
}  // namespace mimo
