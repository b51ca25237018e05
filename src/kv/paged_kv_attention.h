// PagedKvAttention: the KvAttention the model runs on: every layer's paged K/V storage and the
// capability-selected attention backend of each layer. Forward writes a step's K/V at the slots
// of the step's plan and runs the layer's backend over the plan's block tables; it changes
// nothing else (which blocks a sequence holds is KvCache's business, kv/kv_cache.h). A
// tensor-parallel follower builds one from rank 0's KvCacheSpec and runs rank 0's plans on it.
// Owns its memory; not thread-safe (engine thread only; backends fan out over ctx.pool).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attention/kv_attention.h"
#include "attention/registry.h"
#include "core/status.h"
#include "io/hf_config.h"
#include "kv/block_tiers.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_memory_plan.h"
#include "kv/kv_storage.h"

namespace mimo {

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
  // The prefix cache's RAM and disk tiers below the pools (kv/prefix_cache_tiers.h). Not with
  // tensor parallelism (a follower's pools would not get the loaded blocks).
  PrefixCacheTierOptions prefix_tiers;
  int64_t num_full_blocks_override = 0;  // --num-kv-blocks: see KvMemoryPlanOptions
  int mtp_sequences_per_sequence = 0;    // speculative decoding: draft depths (see the plan)
  int mtp_chunk_tokens = 0;
  const AttentionBackendRegistry* registry = nullptr;  // null: BuiltinAttentionBackends()
};

// What a tensor-parallel follower needs to build storage identical in blocks to rank 0's
// (KvCache::spec): the options that shape storage and rank 0's block counts.
struct KvCacheSpec {
  int num_layers = 0;
  PagedKvOptions options;
  int64_t num_full_blocks = 0, num_swa_blocks = 0, num_mtp_blocks = 0;
};

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

// The KV-cache groups of a model: one per (attention kind, window, MTP), each with its block
// count from the memory plan; the layers of a group share block tables. MTP layers get a group
// of their own (their draft sequences are not the main model's).
struct KvGroupLayout {
  std::vector<KvCacheGroupConfig> groups;
  std::vector<int> layer_group;  // [num_layers] -> group
  int mtp_group = -1;            // the MTP layers' group, if any
};
KvGroupLayout MakeKvGroupLayout(const ModelConfig& config, const KvMemoryPlan& plan);

// The memory plan of `opts` (a budget in bytes, a fraction of physical memory, or sized for
// max_sequences x max_context).
StatusOr<KvMemoryPlan> PlanKvCacheMemory(const ModelConfig& config, const PagedKvOptions& opts);

class PagedKvAttention final : public KvAttention {
 public:
  // Storage for every layer of `config` in the groups of MakeKvGroupLayout(config, plan), and the
  // backend of each layer (warns once per distinct fallback).
  static StatusOr<std::unique_ptr<PagedKvAttention>> Create(const ModelConfig& config,
                                                            const PagedKvOptions& opts,
                                                            const KvMemoryPlan& plan);
  // A tensor-parallel follower's storage: rank 0's block counts, this rank's heads
  // (config.layers).
  static StatusOr<std::unique_ptr<PagedKvAttention>> CreateFromSpec(const ModelConfig& config,
                                                                    const KvCacheSpec& spec);

  void Forward(ExecContext& ctx, const KvStepPlan& plan, int layer, const AttentionGeometry& g,
               const float* q, const float* k, const float* v, const float* sinks,
               float* out) override;

  const KvGroupLayout& group_layout() const { return layout_; }

  // One block of a group as bytes: every layer of the group in layer order, K then V of each,
  // as stored (the prefix-cache tiers move blocks between the pool and RAM or disk).
  int64_t GroupBlockBytes(int group) const;
  void ReadGroupBlock(int group, int block, uint8_t* out) const;  // out [GroupBlockBytes]
  void WriteGroupBlock(int group, int block, const uint8_t* in);
  // What the bytes of a group's block depend on besides the tokens: each layer's shape and
  // dtype and, for fp8, its scales. nullopt while an fp8 layer's scales are not fixed yet.
  std::optional<uint64_t> GroupContentFingerprint(int group) const;
  // The same without the fp8 scales (what a prefix cache directory's recorded scales are for).
  uint64_t GroupLayoutFingerprint(int group) const;
  // fp8 first-write scales of a group's layers, K then V per layer in layer order (empty while
  // any is not fixed, or without fp8), and their preset before the first write (false: sizes
  // differ or a layer's scales are fixed already; nothing changed then).
  std::vector<float> GroupFp8Scales(int group) const;
  bool PresetGroupFp8Scales(int group, const std::vector<float>& scales);
  const std::vector<LayerBackendChoice>& layer_backends() const { return backends_; }

 private:
  PagedKvAttention() = default;

  KvGroupLayout layout_;
  std::vector<KvLayerStorage> storage_;       // [num_layers]
  std::vector<LayerBackendChoice> backends_;  // [num_layers]
};

}  // namespace mimo
