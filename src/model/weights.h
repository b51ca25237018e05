// The weights of a MiMo-V2 checkpoint, bound (not copied) from the mmap'd safetensors.
// One ForEachTensor-style binder (BindWeights) is the single list of what a checkpoint holds.
// Ownership: views point into the Checkpoint, which must outlive the weights.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/matrix_weight.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "model/sharding.h"
#include "model/tensor_parallel.h"

namespace mimo {

struct AttentionWeights {
  MatrixWeight q_proj;       // [num_heads * head_dim, hidden]
  MatrixWeight k_proj;       // [num_kv_heads * head_dim, hidden]
  MatrixWeight v_proj;       // [num_kv_heads * v_head_dim, hidden]
  MatrixWeight o_proj;       // [hidden, num_heads * v_head_dim]
  std::vector<float> sinks;  // [num_heads] attention_sink_bias as fp32; empty without sinks
};

struct MlpWeights {
  MatrixWeight gate_proj;  // [intermediate, hidden]
  MatrixWeight up_proj;    // [intermediate, hidden]
  MatrixWeight down_proj;  // [hidden, intermediate]
};

struct MoeWeights {
  MatrixWeight gate;                    // [n_routed_experts, hidden] (F32, or BF16 on V2.6)
  std::vector<float> score_bias;        // [n_routed_experts] e_score_correction_bias (selection only)
  std::vector<MlpWeights> experts;      // [n_routed_experts]
};

struct LayerWeights {
  TensorView input_layernorm;           // [hidden]
  TensorView post_attention_layernorm;  // [hidden] (pre_mlp_layernorm in MTP layers)
  AttentionWeights attn;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // MoE layers
};

// One multi-token-prediction layer (model.mtp.layers.N): an SWA block with a dense MLP.
struct MtpLayerWeights {
  TensorView enorm;            // [hidden]
  TensorView hnorm;            // [hidden]
  MatrixWeight eh_proj;        // [hidden, 2 * hidden]: input is [enorm(embed) | hnorm(h)]
  LayerWeights block;          // SWA attention + dense MLP
  TensorView final_layernorm;  // [hidden]
};

struct ModelWeights {
  TensorView embed_tokens;  // [vocab_size, hidden]
  TensorView norm;          // [hidden]
  MatrixWeight lm_head;     // [vocab_size, hidden] (the embedding when tie_word_embeddings)
  std::vector<LayerWeights> layers;   // [num_hidden_layers]
  std::vector<MtpLayerWeights> mtp;   // [num MTP layers found]
  LayerConfig mtp_layer_config;       // SWA geometry with a dense FFN
};

// One weight as the walk over all of them sees it: what it is (its sharding-table role, layer,
// expert; TensorName(id) is its HF name) and the bound data, one of: a matrix (projections,
// router, experts, eh_proj, lm_head), a tensor view (embedding, norms) or an fp32 copy (sinks,
// router score bias). M is `const MatrixWeight` for the read-only walk, MatrixWeight for the
// mutable one.
template <class M>
struct BasicWeightRef {
  TensorId id;
  M* matrix = nullptr;
  const TensorView* tensor = nullptr;
  std::conditional_t<std::is_const_v<M>, const std::vector<float>, std::vector<float>>* floats =
      nullptr;
  bool tied = false;  // kLmHead: rows of the embedding (tie_word_embeddings), not stored twice
  // As bound: data plus FP8 block scales / MXFP4 exponents of a matrix, a view's bytes; the fp32
  // copies (a few floats per layer, not in the mapping) count 0.
  double bytes() const {
    if (matrix) {
      return static_cast<double>(matrix->DataBytes()) + static_cast<double>(matrix->ScaleBytes());
    }
    return tensor ? static_cast<double>(tensor->nbytes()) : 0.0;
  }
};
using WeightRef = BasicWeightRef<const MatrixWeight>;
using MutableWeightRef = BasicWeightRef<MatrixWeight>;

// Calls f for every weight this rank holds (its slices under tensor parallelism; under expert
// parallelism only its experts), in one order: embedding, then each main layer (input norm,
// q/k/v/o, sinks, post-attention norm, then router, score bias and each held expert's
// gate/up/down, or the dense MLP), model.norm, lm_head, then each MTP layer (enorm, hnorm, eh_proj,
// its block, final_layernorm). Loading (slicing by the sharding table), byte accounting, MXFP4
// quantization, the FP8 plain-tile maps and FLOP counting all walk the weights through it.
void ForEachWeight(const ModelWeights& w, const std::function<void(const WeightRef&)>& f);
void ForEachWeight(ModelWeights& w, const std::function<void(const MutableWeightRef&)>& f);

// Binds every tensor the config implies; errors name tensor, file, expected and actual. With
// tp.active(), only this rank's slices, as the sharding table (model/sharding.h) gives them:
// attention heads, FFN rows, experts, lm_head rows; layer configs in the weights' heads are then
// the caller's to localise.
StatusOr<ModelWeights> BindWeights(Checkpoint& ckpt, const ModelConfig& cfg,
                                   const TpSlice& tp = {});

}  // namespace mimo
