// PagedKvAttention: the KvAttention the model runs on for any number of sequences. It ties
// together the KV-cache manager (block tables per attention kind), per-layer K/V storage and a
// capability-selected attention backend per layer, driven by the StepBatch the model passes.
// Owns its memory; not thread-safe (engine thread only; backends fan out over ctx.pool).
#pragma once

#include <memory>
#include <span>
#include <tuple>
#include <string>
#include <vector>

#include "attention/kv_attention.h"
#include "attention/registry.h"
#include "core/status.h"
#include "io/hf_config.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_memory_plan.h"
#include "kv/kv_storage.h"

namespace mimo {

struct PagedKvSpec;

struct PagedKvOptions {
  std::string attention_backend;  // --attention-backend; "" = automatic per layer
  bool strict_backend = false;    // incapable explicit backend: error instead of fallback
  int block_size = 16;            // --block-size
  DType kv_dtype = DType::kF32;   // --kv-cache-dtype f32|bf16|fp8
  Fp8ScaleMode fp8_scale_mode = Fp8ScaleMode::kPerHeadFirstWrite;
  float fp8_scale = 1.0f;               // kConfigured
  int64_t kv_cache_memory_bytes = 0;    // --kv-cache-memory; 0 = see fraction / max_context
  double kv_cache_memory_fraction = 0;  // of physical RAM, when bytes == 0
  int max_sequences = 1;                // sequences resident at once
  int64_t max_context = 4096;           // per sequence; sizes the cache when no budget is given
  int max_chunk_tokens = 512;           // largest chunk of one sequence in a step
  bool enable_prefix_caching = true;
  int64_t num_full_blocks_override = 0;  // --num-kv-blocks: see KvMemoryPlanOptions
  int mtp_sequences_per_sequence = 0;    // speculative decoding: draft depths (see the plan)
  int mtp_chunk_tokens = 0;
  const AttentionBackendRegistry* registry = nullptr;  // null: BuiltinAttentionBackends()
  const PagedKvSpec* follower_spec = nullptr;  // CreateFollower: rank 0's block counts
};

// What a tensor-parallel follower needs to build a cache identical in blocks to rank 0's
// (PagedKvAttention::ExportSpec): the options that shape storage and rank 0's block counts.
struct PagedKvSpec {
  int num_layers = 0;
  PagedKvOptions options;
  int64_t num_full_blocks = 0, num_swa_blocks = 0, num_mtp_blocks = 0;
};
StatusOr<PagedKvSpec> DecodePagedKvSpec(const std::vector<int64_t>& words);

// Parses "f32" | "bf16" | "fp8" (also "fp8_e4m3").
StatusOr<DType> ParseKvCacheDType(const std::string& s);

struct LayerBackendChoice {
  int layer = 0;
  AttentionKind kind = AttentionKind::kFull;
  const AttentionBackend* backend = nullptr;
  std::string reason;
  std::string warning;  // non-empty when an explicit request fell back
};

AttentionRequirements LayerAttentionRequirements(const LayerConfig& layer,
                                                 const PagedKvOptions& opts);
// The backend every layer will use and why (no memory is allocated).
StatusOr<std::vector<LayerBackendChoice>> ResolveLayerBackends(const ModelConfig& config,
                                                               const PagedKvOptions& opts);

class PagedKvAttention final : public KvAttention {
 public:
  static StatusOr<std::unique_ptr<PagedKvAttention>> Create(const ModelConfig& config,
                                                            const PagedKvOptions& opts);
  // A follower rank's cache: storage and backends of `spec` (rank 0's block counts), no block
  // manager; every step's slots come from ImportStep. config.layers: this rank's KV layers.
  static StatusOr<std::unique_ptr<PagedKvAttention>> CreateFollower(const ModelConfig& config,
                                                                    const PagedKvSpec& spec);
  Status ExportSpec(std::vector<int64_t>* words) const override;
  Status ExportStep(const StepBatch& batch, std::vector<int64_t>* words) override;
  Status ImportStep(const StepBatch& batch, const std::vector<int64_t>& words) override;

  // Allocates the step's slots (idempotent for the same batch until a layer has run). Forward
  // calls it itself; call it first to get "no room" as a Status (ResourceExhausted) instead of
  // an abort. A chunk with start_pos 0 starts its sequence afresh; start_pos below the cached
  // length rewinds (rejected speculative tokens); above it is an error.
  Status PrepareStep(const StepBatch& batch);

  void Forward(ExecContext& ctx, int layer, const AttentionGeometry& g, const StepBatch& batch,
               const float* q, const float* k, const float* v, const float* sinks,
               float* out) override;

  // Reserves slots for positions [num_tokens(seq), + num_new_tokens + num_lookahead) ahead of
  // the step (the engine's scheduler plans this way: false = no room, nothing allocated; preempt
  // or wait). The step's PrepareStep then finds them in place. The sequence must exist.
  bool ReserveSlots(int seq, int num_new_tokens, int num_lookahead_tokens = 0);

  // Speculative decoding: a draft sequence of the MTP layers only, starting at start_pos (a block
  // boundary; earlier positions are never read). Freed with FreeSequence.
  Status AddMtpSequence(int seq, int start_pos);
  bool has_mtp_pool() const { return mtp_group_ >= 0; }
  // Forgets computed tokens from num_tokens on (rejected drafts), see KvCacheManager::Rewind.
  Status Rewind(int seq, int num_tokens);

  // Prefix caching: starts `seq` on the longest cached prefix of `prompt` and returns its length;
  // the first chunk then starts there. Records the prefix's ids.
  StatusOr<int> AttachCachedPrefix(int seq, std::span<const int32_t> prompt);
  // Ids of the sequence's next tokens (in order, from the last recorded one), so full blocks
  // can be content-hashed for later prefix hits. Only final (accepted) tokens.
  void RecordTokenIds(int seq, std::span<const int32_t> token_ids);
  void FreeSequence(int seq);

  const KvCacheManager& manager() const { return *manager_; }
  const KvMemoryPlan& memory_plan() const { return plan_; }
  const std::vector<LayerBackendChoice>& layer_backends() const { return backends_; }

 private:
  PagedKvAttention() = default;
  bool SameChunks(const StepBatch& batch) const;

  ModelConfig config_;
  PagedKvOptions opts_;
  KvMemoryPlan plan_;
  std::unique_ptr<KvCacheManager> manager_;
  std::vector<int> layer_group_;              // [num_layers] -> KV-cache group
  int mtp_group_ = -1;                        // the MTP layers' group, if any
  std::vector<KvLayerStorage> storage_;       // [num_layers]
  std::vector<LayerBackendChoice> backends_;  // [num_layers]

  // The prepared step.
  bool prepared_ = false;
  std::vector<SequenceChunk> step_chunks_;
  std::vector<uint8_t> layer_done_;               // [num_layers]
  std::vector<std::vector<int64_t>> step_slots_;  // [num_groups][num_tokens] by token row
  std::vector<AttentionBatch> step_batches_;      // [num_groups]
  // Follower: no manager; the imported step's block tables.
  bool follower_ = false;
  int num_groups_ = 0;
  std::vector<std::vector<int32_t>> imported_tables_;
};

// The factory the model/CLI calls.
StatusOr<std::unique_ptr<KvAttention>> MakePagedKvAttention(const ModelConfig& config,
                                                            const PagedKvOptions& opts);

}  // namespace mimo
