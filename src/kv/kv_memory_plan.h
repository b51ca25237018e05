// KV memory planning: bytes per token of full-attention layers, the fixed per-sequence bytes of
// sliding-window layers (bounded by the window, not the context), and how a memory budget splits
// into blocks per KV-cache group. Plain struct + a formatter for `mimo inspect --max-context N`.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "io/hf_config.h"

namespace mimo {

struct KvMemoryPlanOptions {
  int block_size = 16;
  DType kv_dtype = DType::kF32;
  int64_t budget_bytes = 0;  // 0: size the cache for max_sequences x max_context
  int max_sequences = 1;
  int64_t max_context = 4096;  // tokens per sequence
  int max_chunk_tokens = 1;    // largest number of new tokens of one sequence in one step
  // > 0: exactly this many allocatable full-attention blocks, whatever the budget (vLLM's
  // num_gpu_blocks_override; for tests and benchmarks that need a given cache size).
  int64_t num_full_blocks_override = 0;
  // MTP layers (LayerConfig::mtp) keep their sliding-window caches in a pool of their own, under
  // sequence ids of their own: this many MTP sequences per sequence (speculative decoding: one
  // per draft depth), each computing up to mtp_chunk_tokens positions in a step. 0: the pool is
  // sized like the main sliding-window pool (tools that run MTP layers on ordinary sequences).
  int mtp_sequences_per_sequence = 0;
  int mtp_chunk_tokens = 0;
};

struct KvMemoryPlan {
  int block_size = 0;
  DType kv_dtype = DType::kF32;
  int num_full_layers = 0;
  int num_swa_layers = 0;
  int sliding_window = 0;  // largest window among SWA layers
  int max_chunk_tokens = 0;
  // Per token, K + V summed over the layers of each kind (fp8 scales are per layer, negligible).
  int64_t full_bytes_per_token = 0;
  int64_t swa_bytes_per_token = 0;
  int64_t full_bytes_per_block = 0;
  int64_t swa_bytes_per_block = 0;
  // SWA layers keep ceil((W - 1 + chunk) / block_size) + 1 blocks per sequence, at any context.
  int swa_blocks_per_sequence = 0;
  int64_t swa_bytes_per_sequence = 0;
  // At max_context tokens, one sequence.
  int64_t max_context = 0;
  int64_t full_bytes_per_sequence = 0;
  int64_t unbounded_swa_bytes_per_sequence = 0;  // a cache sized to the context would take this
  // Budget split (block counts include each pool's null block).
  int max_sequences = 0;
  int64_t budget_bytes = 0;
  int64_t num_full_blocks = 0;
  int64_t num_swa_blocks = 0;
  // MTP layers' pool.
  int num_mtp_layers = 0;
  int64_t mtp_bytes_per_token = 0;
  int64_t mtp_bytes_per_block = 0;
  int mtp_blocks_per_sequence = 0;  // per MTP sequence
  int64_t num_mtp_blocks = 0;
  int64_t total_bytes = 0;      // what the pools take
  int64_t tokens_that_fit = 0;  // full-layer token slots over all sequences
};

// Errors: unusable block size / dtype, or a budget below the fixed SWA memory.
StatusOr<KvMemoryPlan> PlanKvMemory(const ModelConfig& config, const KvMemoryPlanOptions& opts);
std::string FormatKvMemoryPlan(const KvMemoryPlan& plan);  // human-readable, multi-line
int64_t PhysicalMemoryBytes();
// RAM + swap (sysinfo): no KV cache larger than this can ever be backed, whatever the budget.
int64_t PhysicalMemoryAndSwapBytes();

}  // namespace mimo
