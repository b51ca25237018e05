// The sharding table: the one description of how each weight of a MiMo-V2 checkpoint is split over
// N tensor-parallel ranks. Loading (BindWeights slices what it binds by it), the per-rank byte
// counts (TpWeightBytesPerRank), `mimo inspect --tensor-parallel-size`'s memory plan and the KV
// cache's per-rank heads all read it; nothing else decides who holds which rows.
//
// Every split is of output rows, so partial results are all-gathered and never summed in another
// order (model/tensor_parallel.h):
//   role                              split
//   embed_tokens, norms, router       whole on every rank (router: identical routing everywhere)
//   q_proj, attention_sink_bias       this rank's query heads (num_heads / N)
//   k_proj, v_proj                    the kv heads those query heads read (split or replicated)
//   qkv_proj (fused, in checkpoints)  q, k and v sections as above
//   o_proj, down_proj, eh_proj        hidden / N rows
//   gate_proj, up_proj                intermediate / N rows (moe_intermediate for experts)
//   lm_head                           vocab / N rows
//   routed experts                    as their projection above, or under --expert-parallel
//                                     E / N whole experts per rank (the rest held nowhere here)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/hf_config.h"

namespace mimo {

// Which rank of how many; plain data (the loader needs no communicator).
struct TpSlice {
  int rank = 0;
  int size = 1;
  bool expert_parallel = false;
  bool active() const { return size > 1; }
};

// [begin, begin + count): rank's share of n items in ceil(n / size) chunks (the last may be short
// or empty).
struct RowRange {
  int64_t begin = 0;
  int64_t count = 0;
};
RowRange EvenSplit(int64_t n, int rank, int size);

// Attention heads of one rank. Query heads split evenly; kv heads: the ones those query heads
// read (kv_heads / N each, or 1 shared by N / kv_heads ranks when N > kv_heads).
struct HeadSlice {
  int q_begin = 0, num_q = 0;
  int kv_begin = 0, num_kv = 0;
};
// Errors when N does not divide the query heads, or neither N nor the kv-head count divides the
// other.
StatusOr<HeadSlice> SliceHeads(const LayerConfig& layer, int rank, int size);

// What a weight is, by the module it comes from. One entry of kShardTable per role.
enum class TensorRole : uint8_t {
  kEmbedding,          // model.embed_tokens
  kModelNorm,          // model.norm
  kLmHead,             // lm_head (rows of the embedding when tied)
  kInputNorm,          // <block>.input_layernorm
  kPostAttentionNorm,  // <block>.post_attention_layernorm (main layers)
  kPreMlpNorm,         // <block>.pre_mlp_layernorm (its MTP-layer name)
  kQProj,              // <block>.self_attn.q_proj
  kKProj,              // <block>.self_attn.k_proj
  kVProj,              // <block>.self_attn.v_proj
  kQkvProj,            // <block>.self_attn.qkv_proj: fused q|k|v, bound as the three above
  kOProj,              // <block>.self_attn.o_proj
  kSinks,              // <block>.self_attn.attention_sink_bias
  kGateProj,           // <block>.mlp.gate_proj (dense MLP)
  kUpProj,             // <block>.mlp.up_proj
  kDownProj,           // <block>.mlp.down_proj
  kRouter,             // <block>.mlp.gate
  kRouterBias,         // <block>.mlp.gate.e_score_correction_bias
  kExpertGateProj,     // <block>.mlp.experts.E.gate_proj
  kExpertUpProj,       // <block>.mlp.experts.E.up_proj
  kExpertDownProj,     // <block>.mlp.experts.E.down_proj
  kEnorm,              // <mtp>.enorm
  kHnorm,              // <mtp>.hnorm
  kEhProj,             // <mtp>.eh_proj
  kFinalNorm,          // <mtp>.final_layernorm
  kUnknown,            // a language-model tensor the table does not name: whole on every rank
  kCount
};

// How a role's rows are split (all splits are of output rows).
enum class SplitAxis : uint8_t {
  kWhole,         // replicated
  kQueryHeads,    // this rank's query heads
  kKvHeads,       // the kv heads this rank's query heads read
  kQkvSections,   // fused: q section by query heads, k and v sections by kv heads
  kHidden,        // EvenSplit of hidden_size rows
  kIntermediate,  // EvenSplit of intermediate_size rows (moe_intermediate_size for experts)
  kVocab,         // EvenSplit of vocab_size rows
};

// Where a role's module lives: its name is the scope's prefix + `module`.
enum class ShardScope : uint8_t {
  kModel,   // top level: "model.embed_tokens", "lm_head"
  kBlock,   // "model.layers.N." or "model.mtp.layers.N."
  kMtp,     // "model.mtp.layers.N." only
  kExpert,  // "<block>mlp.experts.E."
};

struct ShardRule {
  TensorRole role;
  ShardScope scope;
  const char* module;  // HF module (or, for a bias vector, tensor) name within the scope
  SplitAxis axis;
  int rows_per_head;  // kQueryHeads/kKvHeads: 0 head_dim, 1 one row per head, 2 v_head_dim
};
const ShardRule& RuleOf(TensorRole role);
bool IsRoutedExpert(TensorRole role);  // kExpert*Proj: split as whole experts under EP
// The projections --dense quantizes: q/k/v (or fused qkv), o_proj, the dense MLP, MTP's eh_proj.
bool IsDenseProjection(TensorRole role);

// One tensor of the checkpoint (or one bound weight): its role and where it sits.
struct TensorId {
  TensorRole role = TensorRole::kUnknown;
  int layer = -1;      // main layer l; MTP layer i is num_hidden_layers + i; -1: outside layers
  int mtp_layer = -1;  // MTP layer i, or -1
  int expert = -1;     // routed expert index, or -1
};
// The role of a language-model tensor name ("model.layers.3.self_attn.q_proj.weight_scale_inv"
// is kQProj in layer 3): parsed by structure (scope prefix, expert index, module) against the
// table, kUnknown when no rule names it.
TensorId ClassifyTensor(const std::string& name, const ModelConfig& cfg);
// The HF module name of a tensor ("model.layers.3.mlp.experts.5.gate_proj").
std::string TensorName(const TensorId& id);
// The layer geometry a tensor's heads come from (cfg.mtp_layer for MTP layers), or null.
const LayerConfig* LayerOf(const ModelConfig& cfg, const TensorId& id);

// The part of one tensor a rank holds.
struct TensorShard {
  bool whole = true;            // every row (a replicated role, or one rank)
  int64_t rows = 0;             // rows of the whole tensor (0 when whole by role)
  std::vector<RowRange> parts;  // when !whole: this rank's rows; empty: none (another's expert)
  // Share of the tensor's bytes this rank holds: 1 when whole, else held rows / rows.
  double Fraction() const;
};
// The rows of tensor `id` rank tp.rank holds (layer: LayerOf(cfg, id)). Errors as SliceHeads when
// the heads do not split tp.size ways. Under expert parallelism a routed expert is whole or absent.
StatusOr<TensorShard> ShardOf(const TensorId& id, const ModelConfig& cfg, const TpSlice& tp);
// The routed experts rank tp.rank holds: all of them, or under --expert-parallel E / N.
RowRange HeldExperts(int64_t num_experts, const TpSlice& tp);

}  // namespace mimo
