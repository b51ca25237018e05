// ModelConfig: config.json of a MiMo-V2 checkpoint, fields under their Hugging Face names, plus
// derived per-layer facts (LayerConfig) so the forward pass never re-derives them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace mimo {

// Upper bounds on config.json values (ParseModelConfig refuses larger ones, naming the field), far
// above any released checkpoint, so that everything derived from them (token counts, KV bytes per
// sequence, a head count times a head dimension) fits its int32 / int64 without overflow checks
// at every use. A sequence, whether trained (max_position_embeddings, sliding_window) or served
// (--max-model-len), is at most kMaxContextTokens long: 64 Mi tokens, six times the longest
// context any released model claims, with room to add a few of them in an int32.
inline constexpr int kMaxContextTokens = 1 << 26;
inline constexpr int kMaxVocabSize = 1 << 24;  // released models: up to ~256 Ki
inline constexpr int kMaxWidth = 1 << 20;      // hidden_size, intermediate sizes: up to ~32 Ki
inline constexpr int kMaxHeads = 1 << 12;      // attention heads and their dimension: <= 256
inline constexpr int kMaxExperts = 1 << 16;    // n_routed_experts: up to 384

enum class AttentionKind { kFull, kSlidingWindow, kCount };
enum class FfnKind { kDense, kMoe, kCount };

// Per-layer geometry, resolved from hybrid_layer_pattern / moe_layer_freq.
struct LayerConfig {
  AttentionKind attention = AttentionKind::kFull;
  FfnKind ffn = FfnKind::kDense;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;        // Q/K
  int v_head_dim = 0;      // V
  int rotary_dim = 0;      // int(head_dim * partial_rotary_factor)
  float rope_theta = 0.0f;
  int sliding_window = 0;  // 0 on full layers
  bool has_sinks = false;  // attention_sink_bias present
  bool mtp = false;        // an MTP layer (KV layer configs only: its cache is a pool of its own)
};

struct ModelConfig {
  // Identity.
  std::vector<std::string> architectures;
  std::string model_type;

  // Sizes.
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;      // dense MLP
  int moe_intermediate_size = 0;  // per expert
  int num_hidden_layers = 0;
  int max_position_embeddings = 0;

  // Attention, full layers.
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int v_head_dim = 0;
  float rope_theta = 10000.0f;
  float partial_rotary_factor = 1.0f;
  bool add_full_attention_sink_bias = false;

  // Attention, sliding-window layers (swa_* default to the full-layer value when absent).
  int swa_num_attention_heads = 0;
  int swa_num_key_value_heads = 0;
  int swa_head_dim = 0;
  int swa_v_head_dim = 0;
  float swa_rope_theta = 10000.0f;
  int sliding_window = 0;  // sliding_window, else sliding_window_size
  bool add_swa_attention_sink_bias = false;
  std::vector<int> hybrid_layer_pattern;  // [num_hidden_layers]: 1 = SWA, 0 = full

  float attention_value_scale = 1.0f;  // absent -> 1.0
  bool attention_bias = false;
  float layernorm_epsilon = 1e-5f;
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;

  // MoE.
  std::vector<int> moe_layer_freq;  // [num_hidden_layers]: 1 = MoE, 0 = dense (an int k also
                                    // accepted: every k-th layer, layer 0 dense)
  int n_routed_experts = 0;
  int num_experts_per_tok = 0;
  int n_shared_experts = 0;  // null -> 0
  int n_group = 1;
  int topk_group = 1;
  std::string scoring_func = "sigmoid";
  std::string topk_method = "noaux_tc";
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;  // null -> 1.0
  std::string moe_router_dtype = "float32";  // "float32" | "bfloat16" (V2.6): router storage

  // MTP.
  int num_nextn_predict_layers = 0;  // absent in Flash; the loader counts model.mtp.layers.*

  // FP8.
  bool fp8 = false;                      // quantization_config.quant_method == "fp8"
  std::vector<int> weight_block_size;    // [128, 128]
  std::vector<std::string> ignored_layers;
  // quantization_config.store_dtype == "mxfp4" (V2.6): routed experts are MXFP4, i.e.
  // experts.E.*.weight uint8 [rows, cols/2] E2M1 pairs + weight_scale uint8 [rows, cols/32] E8M0.
  bool mxfp4 = false;
  int mxfp4_block_size = 0;  // 32 when mxfp4

  // Tokens.
  std::optional<int> bos_token_id, eos_token_id, pad_token_id;

  // Derived.
  std::vector<LayerConfig> layers;  // [num_hidden_layers]
  // Geometry of every MTP layer (model.mtp.layers.N): SWA attention with the swa_* values and
  // add_swa_attention_sink_bias, dense FFN of intermediate_size (spec section 3).
  LayerConfig mtp_layer;
  // Less common keys, kept for completeness (see io/hf_config.cc for how each is used).
  int hybrid_block_size = 0;         // null/absent -> 0; used only when the pattern list is absent
  int first_k_dense_replace = -1;    // absent -> -1; used only with an int moe_layer_freq
  std::vector<int> eos_token_ids;    // eos_token_id as int or list (eos_token_id = first)
  std::vector<std::string> parse_notes;  // defaults and inferences applied, for logs/inspect
  bool has_asymmetric_kv() const {
    return head_dim != v_head_dim || swa_head_dim != swa_v_head_dim;
  }
  bool IsSlidingLayer(int l) const { return layers[l].attention == AttentionKind::kSlidingWindow; }
};

// Parses and validates config.json text; errors name the offending field.
StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text);
StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// The RoPE bases of a DFlash drafter (shared/spec/dflash.md section 3, an open point): kSplit
// rotates the context K (from the target's features) at dflash_config.backbone_rotary_base and the
// block's Q/K at rope_theta (ik_llama.cpp's reading); kBackbone uses backbone_rotary_base for
// both, kDraft rope_theta for both.
enum class DFlashRope { kSplit, kBackbone, kDraft };
StatusOr<DFlashRope> ParseDFlashRope(const std::string& s);  // "split" | "backbone" | "draft"
const char* DFlashRopeName(DFlashRope r);

// `<ckpt>/dflash/config.json` of a DFlash block-diffusion drafter (DFlashDraftModel), fields under
// their Hugging Face names (dflash_config.* flattened).
struct DFlashConfig {
  int hidden_size = 0;  // must equal the target's: block inputs are the target's embeddings
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  float partial_rotary_factor = 1.0f;
  int rotary_dim = 0;  // int(head_dim * partial_rotary_factor): 64 of 128 on MiMo's drafters
  float rope_theta = 10000.0f;
  float backbone_rotary_base = 0.0f;  // dflash_config.backbone_rotary_base (0: rope_theta)
  float rms_norm_eps = 1e-6f;
  int block_size = 0;         // B: the anchor plus B - 1 mask slots
  int num_target_layers = 0;  // the target's num_hidden_layers
  int vocab_size = 0;
  std::vector<int> target_layer_ids;  // dflash_config: layers whose outputs feed fc, ascending
  int mask_token_id = -1;
  bool use_swa = true;
  int sliding_window = 0;  // dflash_config.swa_window_size, else sliding_window: |q - k| <= W - 1
  float attention_value_scale = 1.0f;
  bool attention_sink_bias = false;
  DFlashRope rope = DFlashRope::kSplit;  // not in the file: the engine's choice (see above)
  float ContextTheta() const {
    return rope == DFlashRope::kDraft ? rope_theta : backbone_rotary_base;
  }
  float BlockTheta() const {
    return rope == DFlashRope::kBackbone ? backbone_rotary_base : rope_theta;
  }
};
StatusOr<DFlashConfig> ParseDFlashConfig(const std::string& json_text);
StatusOr<DFlashConfig> LoadDFlashConfig(const std::string& path);
// A drafter the target cannot drive: hidden size, vocabulary, target layer count or layer ids
// that do not match. The error names both values.
Status CheckDFlashMatchesTarget(const DFlashConfig& d, const ModelConfig& target);

}  // namespace mimo
