// SimpleKvAttention: a contiguous per-sequence, per-layer K/V cache with plain fp32 attention.
// Used by `mimo logits`/`generate` for single sequences and as a second, independent
// implementation of the KvAttention contract. Not thread-safe; engine thread only.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "attention/kv_attention.h"

namespace mimo {

class SimpleKvAttention : public KvAttention {
 public:
  void Forward(ExecContext& ctx, int layer, const AttentionGeometry& g, const StepBatch& batch,
               const float* q, const float* k, const float* v, const float* sinks,
               float* out) override;
  // Drops cached positions >= num_tokens of a sequence (speculative rollback).
  void Truncate(int seq_id, int num_tokens);
  void Clear() { cache_.clear(); }

 private:
  struct LayerCache {
    std::vector<float> k;  // [positions, num_kv_heads, head_dim]
    std::vector<float> v;  // [positions, num_kv_heads, v_head_dim]
    int num_positions = 0;
    int k_row = 0, v_row = 0;  // floats per position
  };
  std::map<std::pair<int, int>, LayerCache> cache_;  // (seq_id, layer) -> cache
};

}  // namespace mimo
