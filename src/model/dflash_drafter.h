// DFlash block-diffusion drafter (shared/spec/dflash.md sections 2-3): a small transformer that
// fills B - 1 masked positions after an anchor token in ONE non-causal forward pass, conditioned
// on the target's hidden states ("features") at its target_layer_ids:
//   context  c = hidden_norm(fc(features))            per committed position t < P
//            K_ctx = RoPE(k_norm(k_proj c), t), V_ctx = v_proj c * value_scale   (per layer)
//   block    x = [embed(anchor), mask_embedding x (B-1)] at positions P .. P+B-1
//   layer    x += o_proj(attn(q_norm(q_proj h), [K_ctx | K_blk], [V_ctx | V_blk]))  h = norm_in(x)
//            attention non-causal, key j visible to query p iff |p - j| <= W - 1, per-head sink
//            x += mlp(norm_post(x))
//   logits   target lm_head(norm(x)) for rows 1 .. B-1 (row j predicts the token at P + j)
// The drafter has no embedding and no lm_head of its own: it uses the target's. Its per-sequence
// context K/V (DFlashContext) lives outside the target's paged cache, bounded by the window.
// Thread-safety: the weights are read-only; a DFlashContext belongs to one sequence.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/matrix_weight.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/mimo_v2.h"

namespace mimo {

struct DFlashLayerWeights {
  TensorView input_layernorm;           // [hidden]
  TensorView post_attention_layernorm;  // [hidden]
  MatrixWeight q_proj;                  // [heads * head_dim, hidden]
  MatrixWeight k_proj;                  // [kv_heads * head_dim, hidden]
  MatrixWeight v_proj;                  // [kv_heads * head_dim, hidden]
  MatrixWeight o_proj;                  // [hidden, heads * head_dim]
  TensorView q_norm;                    // [head_dim]
  TensorView k_norm;                    // [head_dim]
  std::vector<float> sinks;             // [heads] attention_sink_bias; empty without sinks
  MatrixWeight gate_proj, up_proj;      // [intermediate, hidden]
  MatrixWeight down_proj;               // [hidden, intermediate]
};

// One sequence's draft context: every draft layer's K/V at the committed positions a block can
// still see (the last W - 1 before the next anchor; all of them without a window).
struct DFlashContext {
  int begin = 0;  // first position held
  int end = 0;    // positions [begin, end) are held; the next anchor sits at `end`
  std::vector<std::vector<float>> k;  // [layer][(pos - begin) * kv_heads * head_dim]
  std::vector<std::vector<float>> v;  // [layer][(pos - begin) * kv_heads * head_dim]
};

class DFlashDrafter {
 public:
  // dir: the drafter directory (config.json, safetensors, mask_embedding.pt). Errors name the
  // file and tensor; a drafter whose hidden size, vocabulary or target layers do not match
  // `target` is refused. rope: the RoPE bases to use (an open point of the spec).
  static StatusOr<std::unique_ptr<DFlashDrafter>> Load(const std::string& dir,
                                                       const MimoV2Model& target, DFlashRope rope);

  const DFlashConfig& config() const { return cfg_; }
  // Width of one feature row: target_layer_ids.size() * hidden.
  int64_t feature_width() const {
    return static_cast<int64_t>(cfg_.target_layer_ids.size()) * cfg_.hidden_size;
  }

  // Appends committed positions [ctx.end, ctx.end + n) from their features [n, feature_width()]
  // (the target's residual stream after each target layer, MimoV2Model ForwardOutputs::captured),
  // then drops positions no later block can see.
  void AppendContext(ExecContext& ctx, DFlashContext& dc, const float* features, int n) const;
  // The block [anchor, mask x num_drafts] at positions dc.end ..; writes the logits of rows
  // 1 .. num_drafts: logits [num_drafts, head.rows]. head: the target's lm_head (nullptr) or its
  // rows for a draft vocabulary. 1 <= num_drafts <= B - 1.
  void Draft(ExecContext& ctx, const DFlashContext& dc, int32_t anchor, int num_drafts,
             float* logits, const MatrixWeight* head = nullptr) const;

  // One block per sequence in one pass: every projection runs over all blocks' rows together
  // (the drafter's weights are read once per step, not once per sequence), attention per block.
  // logits: the blocks' draft rows in order, [sum of num_drafts, head.rows]; each block's rows
  // equal what Draft gives it alone.
  struct Block {
    const DFlashContext* context;
    int32_t anchor;
    int num_drafts;
  };
  void DraftBatch(ExecContext& ctx, std::span<const Block> blocks, float* logits,
                  const MatrixWeight* head = nullptr) const;

 private:
  DFlashDrafter() = default;
  // One layer over all blocks' rows x [rows, hidden]; block i's rows start at row_begin[i].
  void Layer(ExecContext& ctx, int l, std::span<const Block> blocks,
             const std::vector<int>& row_begin, int rows, float* x) const;

  DFlashConfig cfg_;
  const MimoV2Model* target_ = nullptr;
  std::unique_ptr<SafetensorsSet> files_;
  MatrixWeight fc_;         // [hidden, feature_width]
  TensorView hidden_norm_;  // [hidden]
  TensorView norm_;         // [hidden]
  std::vector<DFlashLayerWeights> layers_;
  std::vector<float> mask_embedding_;  // [hidden]
};

}  // namespace mimo
