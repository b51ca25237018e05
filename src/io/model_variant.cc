// RecogniseVariant: the sibling table of spec section 1 as two independent questions, storage
// generation and size class, each answered from config facts.
#include "io/model_variant.h"

namespace mimo {
namespace {

bool IsFlashSize(const ModelConfig& c) {
  return c.hidden_size == 4096 && c.num_hidden_layers == 48 && c.num_attention_heads == 64 &&
         c.num_key_value_heads == 4 && c.swa_num_key_value_heads == 8 &&
         c.n_routed_experts == 256;
}

bool IsProSize(const ModelConfig& c) {
  return c.hidden_size == 6144 && c.num_hidden_layers == 70 && c.num_attention_heads == 128 &&
         c.num_key_value_heads == 8 && c.swa_num_key_value_heads == 8 &&
         c.n_routed_experts == 384;
}

}  // namespace

ModelVariant RecogniseVariant(const ModelConfig& c, bool fused_qkv) {
  ModelVariant v;
  if (c.mxfp4 || c.moe_router_dtype == "bfloat16") {
    v.generation = "V2.6";
    v.reason = c.mxfp4 ? "MXFP4 routed experts" : "bf16 router";
  } else if (fused_qkv) {
    v.generation = "V2.5";
    v.reason = "fused qkv_proj, FP8 experts";
  } else {
    v.generation = "V2-Flash";
    v.reason = "separate q/k/v projections";
  }
  v.size = IsFlashSize(c) ? "Flash" : IsProSize(c) ? "Pro" : "other";
  v.reason += "; hidden " + std::to_string(c.hidden_size) + ", " +
              std::to_string(c.num_hidden_layers) + " layers, " +
              std::to_string(c.num_attention_heads) + " heads, " +
              std::to_string(c.num_key_value_heads) + "/" +
              std::to_string(c.swa_num_key_value_heads) + " kv heads, " +
              std::to_string(c.n_routed_experts) + " experts";
  if (v.size == "Flash") {
    v.name = v.generation == "V2-Flash" ? "MiMo-V2-Flash"
             : v.generation == "V2.5"   ? "MiMo-V2.5"
                                        : "MiMo-V2.6-Flash";
  } else if (v.size == "Pro" && v.generation != "V2-Flash") {
    v.name = v.generation == "V2.5" ? "MiMo-V2.5-Pro" : "MiMo-V2.6-Pro";
  } else {
    v.name = "unrecognised";
  }
  return v;
}

}  // namespace mimo
