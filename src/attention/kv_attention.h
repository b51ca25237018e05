// The model's only view of attention and the KV cache: per layer, write the step's new K/V where
// the step's plan says and attend. The plan (KvStepPlan) is plain data made by the KV cache
// before the step; the model passes it through and never sees blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/paged_kv_view.h"
#include "core/thread_pool.h"

namespace mimo {

// Geometry of one attention layer (from LayerConfig).
struct AttentionGeometry {
  int num_heads = 0;       // query heads
  int num_kv_heads = 0;    // GQA: query head h uses kv head h / (num_heads / num_kv_heads)
  int head_dim = 0;        // Q/K dim (192 on MiMo-V2)
  int v_head_dim = 0;      // V dim (128 on MiMo-V2), never padded to head_dim
  int sliding_window = 0;  // 0: full causal; W: query at p sees keys p-W+1..p (W keys)
  float scale = 0.0f;      // softmax scale, 1/sqrt(head_dim)
};

// One sequence's new tokens in a step: rows [token_begin, token_begin + num_tokens) of the
// step's activations, at absolute positions start_pos, start_pos + 1, ...
struct SequenceChunk {
  int seq_id = 0;
  int token_begin = 0;
  int num_tokens = 0;
  int start_pos = 0;  // tokens of this sequence already in the cache
};

struct StepBatch {
  std::vector<SequenceChunk> chunks;
  int num_tokens = 0;  // sum of chunk sizes
};

// One KV-cache group's part of a step (layers of one attention kind share block tables): the
// slot every row's K/V is written to, and the sequences whose queries attend over the group.
struct KvGroupStep {
  std::vector<int64_t> slots;  // [num_tokens]; -1: the row's sequence has no table in the group
  AttentionBatch attention;    // the sequences with a table in this group
};

// A step as the KV cache planned it (KvCache::PlanStep): plain data that every layer of the step
// reads, and all a tensor-parallel follower needs to write and read the same blocks.
struct KvStepPlan {
  StepBatch batch;                  // rows, sequences and positions
  std::vector<KvGroupStep> groups;  // [KV-cache groups]
};

// Per layer: write the step's new K/V where the plan says, then attend. Implementations own K/V
// storage and change nothing else: which blocks a sequence has is the KV cache's business
// (kv/kv_cache.h), decided before the step.
class KvAttention {
 public:
  virtual ~KvAttention() = default;
  // Writes k/v of the step's tokens into `layer`'s cache at the plan's slots, then computes
  // causal (windowed) attention of q over every visible cached key, with the per-head sink
  // logit in the softmax denominator when sinks != nullptr.
  //   q [T, num_heads, head_dim]; k [T, num_kv_heads, head_dim];
  //   v [T, num_kv_heads, v_head_dim] (already multiplied by attention_value_scale);
  //   sinks [num_heads] or nullptr; out [T, num_heads, v_head_dim].
  virtual void Forward(ExecContext& ctx, const KvStepPlan& plan, int layer,
                       const AttentionGeometry& g, const float* q, const float* k, const float* v,
                       const float* sinks, float* out) = 0;
};

}  // namespace mimo
