// The KV-cache facade: prefix lookup across groups, slot allocation, commit, rewind, free.
#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/check.h"

namespace mimo {

KvCacheManager::KvCacheManager(const KvCacheManagerConfig& config) : config_(config) {
  MIMO_CHECK(config.block_size > 0, "block size %d", config.block_size);
  for (const KvCacheGroupConfig& g : config.groups) {
    if (g.kind == AttentionKind::kSlidingWindow) {
      groups_.push_back(std::make_unique<SlidingWindowManager>(
          config.block_size, g.num_blocks, config.enable_prefix_caching, g.sliding_window));
    } else {
      groups_.push_back(std::make_unique<FullAttentionManager>(config.block_size, g.num_blocks,
                                                               config.enable_prefix_caching));
    }
  }
}

KvCacheManager::SeqState& KvCacheManager::State(int seq) {
  auto it = seqs_.find(seq);
  MIMO_CHECK(it != seqs_.end(), "unknown sequence %d", seq);
  return it->second;
}
const KvCacheManager::SeqState& KvCacheManager::State(int seq) const {
  auto it = seqs_.find(seq);
  MIMO_CHECK(it != seqs_.end(), "unknown sequence %d", seq);
  return it->second;
}

void KvCacheManager::SetTiers(KvBlockTiers* tiers) {
  tiers_ = tiers;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (tiers == nullptr || !config_.groups[g].default_member || !config_.enable_prefix_caching) {
      groups_[g]->SetPoolHooks(nullptr, nullptr);
      continue;
    }
    const int group = static_cast<int>(g);
    groups_[g]->SetPoolHooks(
        [tiers, group](int block, uint64_t hash) { tiers->OnEvict(group, block, hash); },
        [tiers, group](int block, uint64_t hash) { tiers->OnCached(group, block, hash); });
  }
}

SingleTypeKvManager::InLowerTier KvCacheManager::LowerTier(int group) const {
  if (tiers_ == nullptr) return {};
  KvBlockTiers* tiers = tiers_;
  return [tiers, group](uint64_t hash) { return tiers->Contains(group, hash); };
}

int KvCacheManager::CachedPrefixBlocks(std::span<const uint64_t> hashes, int max_blocks) const {
  // Each group lowers k to its own longest valid hit <= k. Full groups' validity is
  // downward-closed, so iterating to a fixed point gives a k valid for every group.
  int k = std::min<int>(max_blocks, static_cast<int>(hashes.size()));
  for (bool changed = true; changed && k > 0;) {
    changed = false;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (!config_.groups[g].default_member) continue;
      int k2 = groups_[g]->MaxCacheHit(hashes, k, LowerTier(static_cast<int>(g)));
      if (k2 < k) {
        k = k2;
        changed = true;
      }
    }
  }
  return k;
}

int KvCacheManager::ComputeCachedPrefix(std::span<const int32_t> tokens) const {
  if (!config_.enable_prefix_caching || tokens.size() < 2 || groups_.empty()) return 0;
  // At most len - 1 tokens so the last one is computed (its logits are needed).
  const std::vector<uint64_t> hashes =
      HashFullBlocks(tokens.first(tokens.size() - 1), config_.block_size, config_.cache_salt);
  return CachedPrefixBlocks(hashes, static_cast<int>(hashes.size())) * config_.block_size;
}

bool KvCacheManager::AcquireHit(uint32_t groups, std::span<const uint64_t> hashes, int k,
                                std::vector<std::vector<int32_t>>* tables, int* cap) {
  tables->assign(groups_.size(), {});
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!((groups >> g) & 1u)) continue;
    SingleTypeKvManager& m = *groups_[g];
    std::vector<int32_t>& table = (*tables)[g];
    table.assign(k, BlockPool::kNullBlock);
    SingleTypeKvManager::LoadBlock load;
    if (tiers_ != nullptr && config_.groups[g].default_member) {
      KvBlockTiers* tiers = tiers_;
      const int group = static_cast<int>(g);
      load = [tiers, group](uint64_t hash, int block) { return tiers->Load(group, hash, block); };
    }
    for (int b = m.FirstNeededBlock(k * config_.block_size); b < k; ++b) {
      std::optional<int32_t> blk = m.AcquireBlock(hashes[b], load);
      if (blk.has_value()) {
        table[b] = *blk;
        continue;
      }
      // No room to load it back, or the tier lost it: give back everything taken and retry
      // with a shorter hit (strictly shorter, so this ends).
      for (size_t h = 0; h <= g; ++h) groups_[h]->ReleaseBlocks((*tables)[h]);
      *cap = std::min(*cap, b);
      return false;
    }
  }
  return true;
}

StatusOr<int> KvCacheManager::AddSequence(int seq, std::span<const int32_t> tokens,
                                          uint32_t group_mask) {
  if (HasSequence(seq)) return InvalidArgument("KV cache: sequence %d already exists", seq);
  SeqState st;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (config_.groups[g].default_member) st.groups |= 1u << g;
  }
  if (group_mask != 0) st.groups = group_mask & all_groups_mask();
  // Prefix hits are looked up in the default-member groups only (only they publish blocks).
  bool only_default = true;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (((st.groups >> g) & 1u) && !config_.groups[g].default_member) only_default = false;
  }
  std::vector<uint64_t> hashes;
  if (only_default && config_.enable_prefix_caching && tokens.size() >= 2 && !groups_.empty()) {
    hashes = HashFullBlocks(tokens.first(tokens.size() - 1), config_.block_size,
                            config_.cache_salt);
  }
  std::vector<std::vector<int32_t>> tables;
  int cap = static_cast<int>(hashes.size());
  int k = 0;
  do {
    k = CachedPrefixBlocks(hashes, cap);
  } while (!AcquireHit(st.groups, hashes, k, &tables, &cap));
  const int hit = k * config_.block_size;
  st.num_tokens = hit;
  st.token_ids.assign(tokens.begin(), tokens.begin() + hit);
  st.block_hashes.assign(hashes.begin(), hashes.begin() + k);
  for (size_t g = 0; g < groups_.size(); ++g) {
    if ((st.groups >> g) & 1u) groups_[g]->AddSequence(seq, std::move(tables[g]));
  }
  seqs_.emplace(seq, std::move(st));
  return hit;
}

Status KvCacheManager::AddSequenceAt(int seq, int start_pos, uint32_t group_mask) {
  if (HasSequence(seq)) return InvalidArgument("KV cache: sequence %d already exists", seq);
  if (start_pos < 0 || start_pos % config_.block_size != 0) {
    return InvalidArgument("KV cache: a sequence must start at a block boundary, not %d", start_pos);
  }
  if (group_mask == 0 || (group_mask & ~all_groups_mask()) != 0) {
    return InvalidArgument("KV cache: bad group mask %x", group_mask);
  }
  SeqState st;
  st.groups = group_mask;
  st.hashing = false;
  st.num_tokens = start_pos;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if ((group_mask >> g) & 1u) {
      groups_[g]->AddSequence(
          seq, std::vector<int32_t>(start_pos / config_.block_size, BlockPool::kNullBlock));
    }
  }
  seqs_.emplace(seq, std::move(st));
  return Status::Ok();
}

std::optional<BlockAllocation> KvCacheManager::AllocateSlots(int seq, int num_new_tokens,
                                                             int num_lookahead_tokens) {
  MIMO_CHECK(num_new_tokens >= 0 && num_lookahead_tokens >= 0, "negative token counts");
  SeqState& st = State(seq);
  const int first = st.num_tokens;
  const int total = first + num_new_tokens + num_lookahead_tokens;
  // Blocks before the window of the first new query are dead whatever happens next: release
  // them before counting free blocks.
  for (size_t g = 0; g < groups_.size(); ++g) {
    if ((st.groups >> g) & 1u) groups_[g]->RemoveSkippedBlocks(seq, first);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (((st.groups >> g) & 1u) &&
        groups_[g]->NumNewBlocksNeeded(seq, total) > groups_[g]->num_free_blocks()) {
      return std::nullopt;
    }
  }
  BlockAllocation a;
  a.seq_id = seq;
  a.first_pos = first;
  a.num_tokens = num_new_tokens + num_lookahead_tokens;
  for (size_t g = 0; g < groups_.size(); ++g) {
    a.new_blocks.push_back((st.groups >> g) & 1u ? groups_[g]->AllocateNewBlocks(seq, total)
                                                 : std::vector<int>{});
  }
  return a;
}

void KvCacheManager::HashNewBlocks(int seq, SeqState& st) {
  if (!config_.enable_prefix_caching || !st.hashing) return;
  const int known = std::min<int>(st.num_tokens, static_cast<int>(st.token_ids.size()));
  const int full = known / config_.block_size;
  uint64_t parent = st.block_hashes.empty() ? kRootBlockHash : st.block_hashes.back();
  for (int b = static_cast<int>(st.block_hashes.size()); b < full; ++b) {
    std::span<const int32_t> ids(st.token_ids.data() + int64_t{b} * config_.block_size,
                                 config_.block_size);
    parent = HashBlockTokens(parent, ids, config_.cache_salt);
    st.block_hashes.push_back(parent);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    if ((st.groups >> g) & 1u) groups_[g]->CacheFullBlocks(seq, st.block_hashes, full);
  }
}

void KvCacheManager::CommitTokens(int seq, int num_new_tokens, std::span<const int32_t> token_ids) {
  SeqState& st = State(seq);
  MIMO_CHECK(num_new_tokens >= 0, "negative commit");
  const int end = st.num_tokens + num_new_tokens;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!((st.groups >> g) & 1u)) continue;
    MIMO_CHECK(static_cast<int64_t>(groups_[g]->BlockTable(seq).size()) * config_.block_size >= end,
               "commit of sequence %d to %d tokens beyond its allocated slots", seq, end);
  }
  st.num_tokens = end;
  if (!token_ids.empty()) {
    MIMO_CHECK(static_cast<int>(token_ids.size()) == num_new_tokens,
               "commit of %d tokens with %zu ids", num_new_tokens, token_ids.size());
    RecordTokenIds(seq, token_ids);
  } else {
    HashNewBlocks(seq, st);
  }
}

void KvCacheManager::RecordTokenIds(int seq, std::span<const int32_t> token_ids) {
  SeqState& st = State(seq);
  st.token_ids.insert(st.token_ids.end(), token_ids.begin(), token_ids.end());
  HashNewBlocks(seq, st);
}

Status KvCacheManager::Rewind(int seq, int num_tokens) {
  SeqState& st = State(seq);
  if (num_tokens > st.num_tokens) {
    return InvalidArgument("KV cache: sequence %d has %d tokens, cannot rewind forward to %d", seq,
                           st.num_tokens, num_tokens);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!((st.groups >> g) & 1u)) continue;
    if (!groups_[g]->CanServeFrom(seq, num_tokens)) {
      return InvalidArgument(
          "KV cache: sequence %d cannot rewind to %d: the sliding window already released keys "
          "that position needs",
          seq, num_tokens);
    }
  }
  const int hashed_tokens = static_cast<int>(st.block_hashes.size()) * config_.block_size;
  if (num_tokens < hashed_tokens) {
    return InvalidArgument(
        "KV cache: sequence %d cannot rewind to %d: tokens before %d are in the prefix cache", seq,
        num_tokens, hashed_tokens);
  }
  st.num_tokens = num_tokens;
  if (static_cast<int>(st.token_ids.size()) > num_tokens) st.token_ids.resize(num_tokens);
  return Status::Ok();
}

void KvCacheManager::FreeSequence(int seq) {
  const SeqState& st = State(seq);
  for (size_t g = 0; g < groups_.size(); ++g) {
    if ((st.groups >> g) & 1u) groups_[g]->FreeSequence(seq);
  }
  seqs_.erase(seq);
}

std::vector<std::pair<int, uint64_t>> KvCacheManager::HitWindowBlocks(int seq, int group,
                                                                      int lookback) const {
  const SeqState& st = State(seq);
  std::vector<std::pair<int, uint64_t>> out;
  if (!((st.groups >> group) & 1u)) return out;
  const SingleTypeKvManager& m = *groups_[group];
  // A hit leaves at least one token (a speculator's margin: more) to compute, so a later
  // prompt extending this one resumes at a boundary up to `lookback` tokens before its end:
  // cover the windows of every boundary from there to the last hashed one.
  const int k = static_cast<int>(st.block_hashes.size());
  const int n = std::min<int>(st.num_tokens, static_cast<int>(st.token_ids.size()));
  const int lowest = std::min(k, std::max(0, n - std::max(1, lookback)) / config_.block_size);
  for (int b = m.FirstNeededBlock(lowest * config_.block_size); b < k; ++b) {
    if (std::optional<int> blk = m.pool().Lookup(st.block_hashes[b])) {
      out.emplace_back(*blk, st.block_hashes[b]);
    }
  }
  return out;
}

int KvCacheManager::num_tokens(int seq) const { return State(seq).num_tokens; }

const std::vector<int32_t>& KvCacheManager::BlockTable(int seq, int group) const {
  return groups_[group]->BlockTable(seq);
}

void KvCacheManager::SlotMapping(int seq, int group, int first_pos, int n, int64_t* slots) const {
  const std::vector<int32_t>& table = BlockTable(seq, group);
  const int bs = config_.block_size;
  for (int i = 0; i < n; ++i) {
    const int pos = first_pos + i;
    MIMO_CHECK(
        pos / bs < static_cast<int>(table.size()) && table[pos / bs] != BlockPool::kNullBlock,
        "sequence %d position %d has no slot in group %d", seq, pos, group);
    slots[i] = int64_t{table[pos / bs]} * bs + pos % bs;
  }
}

}  // namespace mimo
