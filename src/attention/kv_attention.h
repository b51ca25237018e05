// The model's only view of attention and the KV cache: per layer, append the step's new K/V and
// attend. Implementations own K/V storage (a simple contiguous cache in the engine-core issue,
// the paged cache with capability-selected backends later); the model never sees blocks.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/status.h"
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

class KvAttention {
 public:
  virtual ~KvAttention() = default;
  // Writes k/v of the step's tokens into `layer`'s cache, then computes causal (windowed)
  // attention of q over every visible cached key, with the per-head sink logit in the softmax
  // denominator when sinks != nullptr.
  //   q [T, num_heads, head_dim]; k [T, num_kv_heads, head_dim];
  //   v [T, num_kv_heads, v_head_dim] (already multiplied by attention_value_scale);
  //   sinks [num_heads] or nullptr; out [T, num_heads, v_head_dim].
  virtual void Forward(ExecContext& ctx, int layer, const AttentionGeometry& g,
                       const StepBatch& batch, const float* q, const float* k, const float* v,
                       const float* sinks, float* out) = 0;

  // Tensor parallelism (model/tensor_parallel.h): rank 0's cache describes itself and each
  // step's slot plan as plain words; a follower's cache of the same spec imports the plan and
  // so writes and reads the same blocks without a block manager of its own.
  uint64_t instance_id() const { return instance_id_; }
  virtual Status ExportSpec(std::vector<int64_t>* words) const {
    (void)words;
    return Unimplemented("this KV cache cannot run tensor parallel");
  }
  virtual Status ExportStep(const StepBatch& batch, std::vector<int64_t>* words) {
    (void)batch;
    (void)words;
    return Unimplemented("this KV cache cannot run tensor parallel");
  }
  virtual Status ImportStep(const StepBatch& batch, const std::vector<int64_t>& words) {
    (void)batch;
    (void)words;
    return Unimplemented("this KV cache cannot run tensor parallel");
  }

 private:
  static uint64_t NextInstanceId() {
    static std::atomic<uint64_t> next{1};
    return next++;
  }
  const uint64_t instance_id_ = NextInstanceId();
};

}  // namespace mimo
