// KvCache: sequence bookkeeping through the block manager, and the step's plan (see kv_cache.h).
#include "kv/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <set>

#include "kv/block_pool.h"

namespace mimo {

StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const ModelConfig& config,
                                                   const PagedKvOptions& o) {
  std::unique_ptr<KvCache> c(new KvCache());
  MIMO_ASSIGN_OR_RETURN(c->plan_, PlanKvCacheMemory(config, o));
  MIMO_ASSIGN_OR_RETURN(c->attention_, PagedKvAttention::Create(config, o, c->plan_));
  KvCacheManagerConfig mc;
  mc.block_size = o.block_size;
  mc.enable_prefix_caching = o.enable_prefix_caching;
  mc.groups = c->attention_->group_layout().groups;
  c->manager_ = std::make_unique<KvCacheManager>(mc);
  const PrefixCacheTierOptions& t = o.prefix_tiers;
  if (o.enable_prefix_caching && (t.ram_bytes > 0 || !t.dir.empty())) {
    std::vector<int> cached_groups, window_groups;
    for (size_t g = 0; g < mc.groups.size(); ++g) {
      if (!mc.groups[g].default_member) continue;
      cached_groups.push_back(static_cast<int>(g));
      if (mc.groups[g].kind == AttentionKind::kSlidingWindow) {
        window_groups.push_back(static_cast<int>(g));
      }
    }
    c->tiers_ = std::make_unique<PrefixCacheTiers>(
        *c->attention_, o.block_size, std::move(cached_groups), std::move(window_groups), t);
    MIMO_RETURN_IF_ERROR(c->tiers_->OpenDisk());
    c->manager_->SetTiers(c->tiers_.get());
  }
  c->spec_.num_layers = static_cast<int>(config.layers.size());
  c->spec_.options = o;
  c->spec_.options.registry = nullptr;  // a pointer means nothing in another process
  c->spec_.num_full_blocks = c->plan_.num_full_blocks;
  c->spec_.num_swa_blocks = c->plan_.num_swa_blocks;
  c->spec_.num_mtp_blocks = c->plan_.num_mtp_blocks;
  static std::atomic<uint64_t> next_id{1};
  c->id_ = next_id++;
  return c;
}

Status KvCache::StartSequence(int seq) {
  if (manager_->HasSequence(seq))
    return InvalidArgument("sequence %d is already in the KV cache", seq);
  return manager_->AddSequence(seq).status();
}

StatusOr<int> KvCache::AttachCachedPrefix(int seq, std::span<const int32_t> prompt) {
  if (manager_->HasSequence(seq))
    return InvalidArgument("sequence %d is already in the KV cache", seq);
  return manager_->AddSequence(seq, prompt);
}

Status KvCache::AddDraftSequence(int seq, int start_pos, int owner) {
  const int g = attention_->group_layout().mtp_group;
  if (g < 0) return InvalidArgument("the KV cache has no MTP layers to draft with");
  if (manager_->HasSequence(seq))
    return InvalidArgument("sequence %d is already in the KV cache", seq);
  MIMO_RETURN_IF_ERROR(manager_->AddSequenceAt(seq, start_pos, 1u << g));
  if (owner >= 0) owned_[owner].draft_sequences.push_back(seq);
  return Status::Ok();
}

bool KvCache::ReserveSlots(int seq, int num_new_tokens, int num_lookahead_tokens) {
  return manager_->AllocateSlots(seq, num_new_tokens, num_lookahead_tokens).has_value();
}

Status KvCache::Rewind(int seq, int num_tokens) {
  if (!manager_->HasSequence(seq))
    return InvalidArgument("sequence %d is not in the KV cache", seq);
  return manager_->Rewind(seq, num_tokens);
}

void KvCache::RecordTokenIds(int seq, std::span<const int32_t> token_ids) {
  manager_->RecordTokenIds(seq, token_ids);
}

void KvCache::CheckpointSequence(int seq) {
  if (!tiers_ || !manager_->HasSequence(seq)) return;
  const std::vector<KvCacheGroupConfig>& groups = attention_->group_layout().groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!groups[g].default_member || groups[g].kind != AttentionKind::kSlidingWindow) continue;
    for (const auto& [block, hash] : manager_->HitWindowBlocks(seq, static_cast<int>(g), checkpoint_lookback_)) {
      tiers_->Checkpoint(static_cast<int>(g), block, hash);
    }
  }
  // The drafter's features of the window before every boundary a later prompt may resume at.
  if (feature_cache_) {
    const std::vector<int32_t>& ids = manager_->token_ids(seq);
    const int bs = feature_cache_->block_size();
    const int n = std::min(manager_->num_tokens(seq), static_cast<int>(ids.size()));
    const int lo = feature_window_ > 0
                       ? std::max(0, n - std::max(1, checkpoint_lookback_) - feature_window_) / bs
                       : 0;
    const std::vector<uint64_t> hashes =
        HashFullBlocks(std::span<const int32_t>(ids).first(n), bs, 0);
    for (size_t b = lo; b < hashes.size(); ++b) feature_cache_->Checkpoint(hashes[b]);
  }
}

void KvCache::FreeSequence(int seq) {
  CheckpointSequence(seq);
  if (manager_->HasSequence(seq)) manager_->FreeSequence(seq);
  auto it = owned_.find(seq);
  if (it == owned_.end()) return;
  const Owned owned = std::move(it->second);
  owned_.erase(it);
  for (int d : owned.draft_sequences) FreeSequence(d);
}

DraftState* KvCache::draft_state(int seq) const {
  auto it = owned_.find(seq);
  return it == owned_.end() ? nullptr : it->second.state.get();
}

void KvCache::SetDraftState(int seq, std::unique_ptr<DraftState> state) {
  owned_[seq].state = std::move(state);
}

int64_t KvCache::draft_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [seq, o] : owned_) bytes += o.state ? o.state->bytes() : 0;
  return bytes;
}

void KvCache::EnableFeatureCache(int64_t capacity_bytes, int64_t width, int window,
                                 uint64_t layout) {
  auto cache = std::make_unique<FeatureCache>(capacity_bytes, spec_.options.block_size, width);
  feature_cache_ = cache->capacity_blocks() > 0 ? std::move(cache) : nullptr;
  feature_window_ = std::max(0, window);
  if (feature_cache_ && tiers_) feature_cache_->SetTiers(tiers_.get(), layout);
}

int KvCache::FeatureCachedPrefix(std::span<const int32_t> tokens) {
  if (!feature_cache_) return 0;
  const int block_size = feature_cache_->block_size();
  const int n = static_cast<int>(tokens.size());
  const int first = feature_window_ > 0 ? std::max(0, n - feature_window_) / block_size : 0;
  const std::vector<uint64_t> hashes = HashFullBlocks(tokens, block_size, 0);
  int b = first;
  while (b < static_cast<int>(hashes.size()) && feature_cache_->Acquire(hashes[b])) ++b;
  return b > first ? b * block_size : 0;
}

StatusOr<KvStepPlan> KvCache::PlanStep(const StepBatch& batch) {
  KvCacheManager& m = *manager_;
  // Everything is checked before anything changes.
  std::set<int> seen;
  int rows = 0;
  for (const SequenceChunk& c : batch.chunks) {
    if (!seen.insert(c.seq_id).second) {
      return InvalidArgument("step batch has sequence %d twice", c.seq_id);
    }
    if (c.num_tokens <= 0 || c.start_pos < 0 || c.token_begin != rows) {
      return InvalidArgument("sequence %d: bad chunk (rows %d+%d after %d rows, start_pos %d)",
                             c.seq_id, c.token_begin, c.num_tokens, rows, c.start_pos);
    }
    if (!m.HasSequence(c.seq_id)) {
      return InvalidArgument("sequence %d is not in the KV cache (start it first)", c.seq_id);
    }
    if (c.start_pos != m.num_tokens(c.seq_id)) {
      return InvalidArgument(
          "sequence %d: chunk starts at position %d but the cache holds %d tokens (a chunk "
          "continues its sequence; rewind or start it first)",
          c.seq_id, c.start_pos, m.num_tokens(c.seq_id));
    }
    rows += c.num_tokens;
  }
  if (rows != batch.num_tokens) {
    return InvalidArgument("step batch: chunks cover %d rows, num_tokens is %d", rows,
                           batch.num_tokens);
  }
  for (const SequenceChunk& c : batch.chunks) {
    if (!m.AllocateSlots(c.seq_id, c.num_tokens, 0).has_value()) {
      return ResourceExhausted(
          "KV cache full: no room for %d tokens of sequence %d at position %d (free blocks per "
          "group: full/SWA %d/%d); raise --kv-cache-memory or preempt",
          c.num_tokens, c.seq_id, c.start_pos, m.num_free_blocks(0),
          m.num_groups() > 1 ? m.num_free_blocks(1) : 0);
    }
  }
  for (const SequenceChunk& c : batch.chunks) m.CommitTokens(c.seq_id, c.num_tokens);
  KvStepPlan plan;
  plan.batch = batch;
  plan.groups.resize(m.num_groups());
  for (int g = 0; g < m.num_groups(); ++g) {
    KvGroupStep& step = plan.groups[g];
    step.slots.assign(batch.num_tokens, -1);
    step.attention.num_tokens = batch.num_tokens;
    for (const SequenceChunk& c : batch.chunks) {
      if (!m.InGroup(c.seq_id, g)) continue;  // e.g. main sequences and the MTP pool
      m.SlotMapping(c.seq_id, g, c.start_pos, c.num_tokens, &step.slots[c.token_begin]);
      const std::vector<int32_t>& table = m.BlockTable(c.seq_id, g);
      std::vector<int32_t>& tables = step.attention.block_tables;
      step.attention.seqs.push_back({c.token_begin, c.num_tokens, c.start_pos,
                                     static_cast<int>(tables.size()),
                                     static_cast<int>(table.size())});
      tables.insert(tables.end(), table.begin(), table.end());
    }
  }
  return plan;
}

}  // namespace mimo
