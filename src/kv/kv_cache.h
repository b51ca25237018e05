// KvCache: the one owner of the paged KV cache's state. Which blocks each sequence holds, how many
// of its tokens are computed, and which token ids they carry (prefix caching) change only through
// these methods, called between forward passes by the engine thread (the scheduler reserves and
// frees, the engine records ids and rolls back rejected drafts, a speculator adds its draft
// sequences) or by a tool that drives the model by hand. A step is then:
//   KvStepPlan plan = cache.PlanStep(batch)   // slots of the step's tokens, block tables
//   model.Forward(ctx, plan, ..., cache.attention())  // every layer writes and reads by the plan
// The plan is plain data: nothing in a forward pass allocates, frees, rewinds or guesses where a
// step begins. A speculator's state lives here too, so its lifetime is the sequence's: the draft
// sequences of the MTP pool and the per-sequence DraftState (DFlash's draft context) are freed
// with the sequence that owns them, and the drafter's FeatureCache of prompt blocks sits beside
// the prefix cache, where the scheduler sees it. Not thread-safe; engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "attention/kv_attention.h"
#include "core/status.h"
#include "io/hf_config.h"
#include "kv/draft_state.h"
#include "kv/feature_cache.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_memory_plan.h"
#include "kv/paged_kv_attention.h"
#include "kv/prefix_cache_tiers.h"

namespace mimo {

class KvCache {
 public:
  // config.layers: every layer with a cache (main layers, then MTP layers when they draft).
  static StatusOr<std::unique_ptr<KvCache>> Create(const ModelConfig& config,
                                                   const PagedKvOptions& opts);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // --- Sequences. Every method names the sequence it changes; nothing is created, freed or
  // rewound implicitly.
  // Starts `seq` empty at position 0 in the main groups (a tool driving the model by hand).
  Status StartSequence(int seq);
  // Starts `seq` on the longest cached prefix of `prompt` (main groups) and returns its length;
  // the first chunk then starts there. Records the prefix's ids.
  StatusOr<int> AttachCachedPrefix(int seq, std::span<const int32_t> prompt);
  // Speculative decoding: a draft sequence of the MTP layers only, starting at start_pos (a block
  // boundary; earlier positions are never read). Freed with FreeSequence, and with its owner's
  // when owner >= 0 (the sequence it drafts for).
  Status AddDraftSequence(int seq, int start_pos, int owner = -1);
  // Reserves slots for positions [num_tokens(seq), + num_new_tokens + num_lookahead) ahead of the
  // step (false: no room, nothing allocated; preempt or wait). PlanStep then finds them in place.
  bool ReserveSlots(int seq, int num_new_tokens, int num_lookahead_tokens = 0);
  // Forgets computed tokens from num_tokens on (rejected drafts), see KvCacheManager::Rewind.
  Status Rewind(int seq, int num_tokens);
  // Ids of the sequence's next tokens (in order, from the last recorded one), so full blocks can
  // be content-hashed for later prefix hits. Only final (accepted) tokens.
  void RecordTokenIds(int seq, std::span<const int32_t> token_ids);
  // Frees the sequence's blocks, its draft state and the draft sequences it owns; no-op for a
  // sequence not in the cache.
  void FreeSequence(int seq);

  // --- Speculative decoding: what a drafter keeps per sequence, owned with the sequence.
  DraftState* draft_state(int seq) const;  // null when none
  void SetDraftState(int seq, std::unique_ptr<DraftState> state);
  int64_t draft_state_bytes() const;  // summed over the sequences
  // The drafter's feature cache of full prompt blocks, capacity_bytes at most (none when that is
  // under one block of `width` floats per token); null until enabled. window: how many positions
  // before the first anchor the drafter reads (0: all); layout: what the features are (the
  // prefix cache's tiers key them by it).
  void EnableFeatureCache(int64_t capacity_bytes, int64_t width, int window = 0,
                          uint64_t layout = 0);
  FeatureCache* feature_cache() { return feature_cache_.get(); }
  const FeatureCache* feature_cache() const { return feature_cache_.get(); }
  // How far a prefix-cache hit over `tokens` may reach although the scheduler keeps a margin to
  // compute: the end of the last of the consecutive full blocks, from the one holding position
  // tokens.size() - window (0 with a window of 0), whose features the feature cache or a tier
  // below it holds (0 when none, or without a cache). Those blocks are made resident and pinned
  // until the drafter restores them (FeatureCache::Unpin).
  int FeatureCachedPrefix(std::span<const int32_t> tokens);

  // --- The step. Every chunk's sequence must exist and start where its computed tokens end
  // (start_pos == num_tokens(seq)); its slots are allocated (or found reserved) and its tokens
  // counted as computed. Errors: InvalidArgument (a malformed batch, an unknown sequence, a
  // chunk that does not continue its sequence), ResourceExhausted (no room).
  StatusOr<KvStepPlan> PlanStep(const StepBatch& batch);
  // What the model runs on: reads and writes K/V by a plan, changes nothing else.
  KvAttention& attention() { return *attention_; }

  // --- The prefix cache's tiers below the pools (null when off): after each step the engine
  // hands them the blocks the step cached (copied to the disk writer's queue, never waited on).
  void FlushTierWrites() {
    if (tiers_) tiers_->FlushWrites();
  }
  // Marks where a later prompt may resume the sequence (its last full block boundary: the end
  // of its prompt, or of the whole request when it is freed): the sliding-window blocks a hit
  // there reads, and the drafter's features of the window before it, go to the disk tier with
  // the step's writes. FreeSequence does it too.
  void CheckpointSequence(int seq);
  // How far before a sequence's end a later prompt may resume it: the scheduler's prefix-hit
  // margin (a speculator's), at least 1 token.
  void set_checkpoint_lookback(int tokens) { checkpoint_lookback_ = tokens; }
  PrefixCacheTiers* tiers() { return tiers_.get(); }
  const PrefixCacheTiers* tiers() const { return tiers_.get(); }

  bool HasSequence(int seq) const { return manager_->HasSequence(seq); }
  int num_tokens(int seq) const { return manager_->num_tokens(seq); }
  bool has_draft_pool() const { return attention_->group_layout().mtp_group >= 0; }
  const KvCacheManager& manager() const { return *manager_; }
  const KvMemoryPlan& memory_plan() const { return plan_; }
  const std::vector<LayerBackendChoice>& layer_backends() const {
    return attention_->layer_backends();
  }
  // What a tensor-parallel follower needs to build storage laid out like this cache's, and an id
  // that tells this cache from others made in the same process.
  const KvCacheSpec& spec() const { return spec_; }
  uint64_t id() const { return id_; }

 private:
  KvCache() = default;

  KvMemoryPlan plan_;
  KvCacheSpec spec_;
  uint64_t id_ = 0;
  std::unique_ptr<KvCacheManager> manager_;
  std::unique_ptr<PagedKvAttention> attention_;
  // What each sequence owns besides its blocks (speculative decoding).
  struct Owned {
    std::vector<int> draft_sequences;
    std::unique_ptr<DraftState> state;
  };
  std::unordered_map<int, Owned> owned_;
  std::unique_ptr<FeatureCache> feature_cache_;
  int feature_window_ = 0;
  int checkpoint_lookback_ = 1;
  // Declared last: destroyed first, while the pools it copies from still exist.
  std::unique_ptr<PrefixCacheTiers> tiers_;
};

}  // namespace mimo
