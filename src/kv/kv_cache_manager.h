// KvCacheManager: the facade the engine (and PagedKvAttention) talks to. It owns one
// SingleTypeKvManager per KV-cache group (one group per attention kind: full layers share one
// block table per sequence, sliding-window layers another, each with its own block pool and
// block count) and keeps per-sequence token counts and content hashes for prefix caching.
// Not thread-safe; engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "io/hf_config.h"
#include "kv/single_type_kv_manager.h"

namespace mimo {

struct KvCacheGroupConfig {
  AttentionKind kind = AttentionKind::kFull;
  int sliding_window = 0;  // kSlidingWindow only
  int num_blocks = 0;      // including the null block
  // Sequences started by AddSequence belong to it (the MTP group is joined only explicitly, by
  // the draft sequences of speculative decoding, through AddSequenceAt).
  bool default_member = true;
};

struct KvCacheManagerConfig {
  int block_size = 16;
  bool enable_prefix_caching = true;
  uint64_t cache_salt = 0;  // the `extra` key of every block hash
  std::vector<KvCacheGroupConfig> groups;
};

// What AllocateSlots added: per group, the new physical blocks (the rest of the table is
// unchanged). Plain data for the engine's plan; the manager already owns the blocks.
struct BlockAllocation {
  int seq_id = 0;
  int first_pos = 0;                         // position of the first new token
  int num_tokens = 0;                        // new + lookahead tokens the slots cover
  std::vector<std::vector<int>> new_blocks;  // [num_groups][...]
};

// The prefix-cache tiers below the pools (kv/prefix_cache_tiers.h): where cached blocks go
// when a pool reuses them, and where a prefix hit finds blocks the pools no longer hold.
// Called on the engine thread.
class KvBlockTiers {
 public:
  virtual ~KvBlockTiers() = default;
  virtual bool Contains(int group, uint64_t hash) const = 0;
  // Writes the block's content into pool block `block` of `group`. False when the tier no
  // longer has it or it failed its checks (then it is dropped from the tier).
  virtual bool Load(int group, uint64_t hash, int block) = 0;
  // Pool block `block` holding `hash` is about to be reused; its content is still intact.
  virtual void OnEvict(int group, int block, uint64_t hash) = 0;
  // Pool block `block` now holds `hash`; its content is complete once the current step ran.
  virtual void OnCached(int group, int block, uint64_t hash) = 0;
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheManagerConfig& config);

  int num_groups() const { return static_cast<int>(groups_.size()); }
  int block_size() const { return config_.block_size; }
  const SingleTypeKvManager& group(int g) const { return *groups_[g]; }

  // Prefix caching. The number of leading tokens of `tokens` whose K/V every group can serve
  // from cached blocks (a multiple of block_size, at most tokens.size() - 1 so at least one token
  // is computed). Rule: full groups need every block before the hit point P; sliding-window
  // groups need the blocks holding positions P-W+1 .. P-1 (what the query at P reads). The
  // longest P satisfying all groups is returned; a full-layer hit whose window blocks were
  // evicted is shortened to the longest P whose window is still cached.
  // Blocks in a lower tier count as cached (AddSequence loads them back into the pool).
  int ComputeCachedPrefix(std::span<const int32_t> tokens) const;
  // Prefix hits also from (and evictions to) these tiers, of the default-member groups; null:
  // the pools only. Not owned; must outlive the manager or be reset.
  void SetTiers(KvBlockTiers* tiers);

  // Starts a sequence in the groups of group_mask (0: the default-member groups). With `tokens`
  // and prefix caching on, it attaches the cached prefix and returns its length (the engine
  // starts computing from there); otherwise returns 0.
  StatusOr<int> AddSequence(int seq, std::span<const int32_t> tokens = {}, uint32_t group_mask = 0);
  // Starts a sequence in the groups of `group_mask` (bit g = group g) at position start_pos (a
  // multiple of the block size): positions before it are never written nor read (their table
  // entries are the null block). Not prefix-cached.
  Status AddSequenceAt(int seq, int start_pos, uint32_t group_mask);
  bool HasSequence(int seq) const { return seqs_.count(seq) > 0; }
  bool InGroup(int seq, int group) const { return (State(seq).groups >> group) & 1u; }
  uint32_t all_groups_mask() const { return (1u << groups_.size()) - 1u; }

  // Ensures slots for positions [num_tokens(seq), num_tokens(seq) + new + lookahead), first
  // releasing blocks sliding-window groups no longer need (relative to the first new token).
  // nullopt = no room in some group (nothing allocated; preempt or retry later).
  std::optional<BlockAllocation> AllocateSlots(int seq, int num_new_tokens,
                                               int num_lookahead_tokens = 0);
  // Marks num_new_tokens more tokens as computed (their K/V written). token_ids, when given
  // (one per new token), are recorded as by RecordTokenIds.
  void CommitTokens(int seq, int num_new_tokens, std::span<const int32_t> token_ids = {});
  // Appends the ids of the sequence's next tokens (ids may lag behind computed tokens, e.g.
  // when KV is written before the sampled token is final). Every block that is both computed
  // and has known ids is content-hashed into the prefix cache.
  void RecordTokenIds(int seq, std::span<const int32_t> token_ids);
  // Forgets computed tokens from num_tokens on (rejected speculative tokens). Fails if that
  // would reach into hashed blocks, or if a query there would read keys a sliding window
  // already released.
  Status Rewind(int seq, int num_tokens);
  void FreeSequence(int seq);
  // The cached blocks of `group` that a prefix hit reads at any block boundary from `lookback`
  // tokens before the sequence's end to its last hashed boundary, as (pool block, hash): for a
  // sliding-window group the windows before those boundaries (blocks the sequence released but
  // the pool still holds included).
  std::vector<std::pair<int, uint64_t>> HitWindowBlocks(int seq, int group, int lookback) const;

  int num_tokens(int seq) const;
  // Known ids of the sequence's tokens (computed or recorded), from position 0.
  const std::vector<int32_t>& token_ids(int seq) const { return State(seq).token_ids; }
  const std::vector<int32_t>& BlockTable(int seq, int group) const;
  // slots[i] = physical slot of position first_pos + i in `group` (block * block_size + offset).
  void SlotMapping(int seq, int group, int first_pos, int n, int64_t* slots) const;
  int num_free_blocks(int group) const { return groups_[group]->num_free_blocks(); }

 private:
  struct SeqState {
    uint32_t groups = 0;                 // bit g: the sequence has a block table in group g
    bool hashing = true;                 // full blocks are published to the prefix cache
    int num_tokens = 0;                  // computed tokens (K/V written)
    std::vector<int32_t> token_ids;      // known ids of tokens [0, token_ids.size())
    std::vector<uint64_t> block_hashes;  // hashes of full blocks with known ids
  };
  SeqState& State(int seq);
  const SeqState& State(int seq) const;
  void HashNewBlocks(int seq, SeqState& st);
  // Longest hit, in blocks, of at most max_blocks over `hashes`.
  int CachedPrefixBlocks(std::span<const uint64_t> hashes, int max_blocks) const;
  // References on the blocks of a k-block hit in every group of `groups` (loading blocks from
  // the tiers). False (nothing held) when a block could not be had; *cap is then lowered.
  bool AcquireHit(uint32_t groups, std::span<const uint64_t> hashes, int k,
                  std::vector<std::vector<int32_t>>* tables, int* cap);
  SingleTypeKvManager::InLowerTier LowerTier(int group) const;

  KvCacheManagerConfig config_;
  std::vector<std::unique_ptr<SingleTypeKvManager>> groups_;
  std::unordered_map<int, SeqState> seqs_;
  KvBlockTiers* tiers_ = nullptr;
};

}  // namespace mimo
