// KvCache: the one owner of the paged KV cache's state. Which blocks each sequence holds, how many
// of its tokens are computed, and which token ids they carry (prefix caching) change only through
// these methods, called between forward passes by the engine thread (the scheduler reserves and
// frees, the engine records ids and rolls back rejected drafts, a speculator adds its draft
// sequences) or by a tool that drives the model by hand. A step is then:
//   KvStepPlan plan = cache.PlanStep(batch)   // slots of the step's tokens, block tables
//   model.Forward(ctx, plan, ..., cache.attention())  // every layer writes and reads by the plan
// The plan is plain data: nothing in a forward pass allocates, frees, rewinds or guesses where a
// step begins. Not thread-safe; engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "attention/kv_attention.h"
#include "core/status.h"
#include "io/hf_config.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_memory_plan.h"
#include "kv/paged_kv_attention.h"

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
  // boundary; earlier positions are never read). Freed with FreeSequence.
  Status AddDraftSequence(int seq, int start_pos);
  // Reserves slots for positions [num_tokens(seq), + num_new_tokens + num_lookahead) ahead of the
  // step (false: no room, nothing allocated; preempt or wait). PlanStep then finds them in place.
  bool ReserveSlots(int seq, int num_new_tokens, int num_lookahead_tokens = 0);
  // Forgets computed tokens from num_tokens on (rejected drafts), see KvCacheManager::Rewind.
  Status Rewind(int seq, int num_tokens);
  // Ids of the sequence's next tokens (in order, from the last recorded one), so full blocks can
  // be content-hashed for later prefix hits. Only final (accepted) tokens.
  void RecordTokenIds(int seq, std::span<const int32_t> token_ids);
  void FreeSequence(int seq);  // no-op for a sequence not in the cache

  // --- The step. Every chunk's sequence must exist and start where its computed tokens end
  // (start_pos == num_tokens(seq)); its slots are allocated (or found reserved) and its tokens
  // counted as computed. Errors: InvalidArgument (a malformed batch, an unknown sequence, a
  // chunk that does not continue its sequence), ResourceExhausted (no room).
  StatusOr<KvStepPlan> PlanStep(const StepBatch& batch);
  // What the model runs on: reads and writes K/V by a plan, changes nothing else.
  KvAttention& attention() { return *attention_; }

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
};

}  // namespace mimo
