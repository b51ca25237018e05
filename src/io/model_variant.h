// Which MiMo-V2 sibling a checkpoint is (spec section 1, sibling table), recognised from the
// config's shape and the storage formats it declares, never from a model name: `mimo inspect`
// and logs report it; nothing in the forward pass depends on it.
#pragma once

#include <string>

#include "io/hf_config.h"

namespace mimo {

struct ModelVariant {
  // "MiMo-V2-Flash", "MiMo-V2.5", "MiMo-V2.5-Pro", "MiMo-V2.6-Flash", "MiMo-V2.6-Pro", or
  // "unrecognised" when the geometry matches no released sibling (e.g. generated test models).
  std::string name;
  // The storage generation, decided by formats alone: "V2.6" (MXFP4 experts or a bf16 router),
  // "V2.5" (fused qkv_proj), "V2-Flash" (separate q/k/v).
  std::string generation;
  // "Flash" (hidden 4096, 48 layers, 64 heads, 4/8 kv heads, 256 experts), "Pro" (hidden 6144,
  // 70 layers, 128 heads, 8/8 kv heads, 384 experts) or "other".
  std::string size;
  std::string reason;  // the facts that decided it, for humans
};

// `fused_qkv`: the checkpoint stores attention as one qkv_proj (a tensor fact, not a config key).
ModelVariant RecogniseVariant(const ModelConfig& config, bool fused_qkv);

}  // namespace mimo
