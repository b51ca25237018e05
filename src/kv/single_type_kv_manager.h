// One KV manager per attention kind, each over its own BlockPool: block tables of the
// sequences, which blocks a kind still needs, and which prefix-cache hits it can serve.
//   FullAttentionManager: keeps every block of a sequence.
//   SlidingWindowManager: a query at position p reads keys p-W+1..p, so once the first query of
//     a step is at q0, a block whose last position is < q0-W+1 is dead for this sequence; it is
//     freed (replaced by the null block). A sequence then holds at most
//     ceil((W - 1 + chunk) / block_size) + 1 blocks, whatever its length.
// Not thread-safe; engine thread only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace mimo {

class SingleTypeKvManager {
 public:
  SingleTypeKvManager(int block_size, int num_blocks, bool enable_caching);
  virtual ~SingleTypeKvManager() = default;
  SingleTypeKvManager(const SingleTypeKvManager&) = delete;
  SingleTypeKvManager& operator=(const SingleTypeKvManager&) = delete;

  virtual const char* kind_name() const = 0;
  // First logical block that a query at position >= first_query_pos may read.
  virtual int FirstNeededBlock(int first_query_pos) const = 0;
  // Whether a lower tier (RAM, disk) holds a block's content; empty: no tiers.
  using InLowerTier = std::function<bool(uint64_t hash)>;
  // Largest k <= max_blocks such that a prefix hit of k full blocks has every block this kind
  // needs for the next query (at k * block_size) in the pool or in a lower tier. 0 is always
  // valid.
  virtual int MaxCacheHit(std::span<const uint64_t> hashes, int max_blocks,
                          const InLowerTier& lower) const;
  bool Present(uint64_t hash, const InLowerTier& lower) const {
    return pool_.Lookup(hash).has_value() || (lower && lower(hash));
  }

  // A reference on the block holding `hash`: the cached pool block, or a new one that `load`
  // fills from a lower tier (then cached under `hash`). nullopt: no free block, or the load
  // failed (nothing held).
  using LoadBlock = std::function<bool(uint64_t hash, int block)>;
  std::optional<int32_t> AcquireBlock(uint64_t hash, const LoadBlock& load);
  // Drops the references AcquireBlock took (the blocks stay cached).
  void ReleaseBlocks(std::span<const int32_t> blocks);
  void SetPoolHooks(BlockPool::BlockHook on_evict, BlockPool::BlockHook on_cache) {
    pool_.SetHooks(std::move(on_evict), std::move(on_cache));
  }

  // Starts a sequence whose table holds blocks the caller already took references on (a
  // prefix hit from AcquireBlock; null entries for blocks a sliding window does not need).
  void AddSequence(int seq, std::vector<int32_t> hit_blocks);
  bool HasSequence(int seq) const { return seqs_.count(seq) > 0; }
  // Frees the blocks no query at position >= first_query_pos can read.
  void RemoveSkippedBlocks(int seq, int first_query_pos);
  // New blocks needed so the table covers positions [0, num_tokens).
  int NumNewBlocksNeeded(int seq, int num_tokens) const;
  // Appends those blocks; the caller checked NumNewBlocksNeeded <= num_free_blocks().
  std::vector<int> AllocateNewBlocks(int seq, int num_tokens);
  // Gives block b of the sequence the content hash hashes[b], for b < num_full_blocks.
  void CacheFullBlocks(int seq, std::span<const uint64_t> hashes, int num_full_blocks);
  void FreeSequence(int seq);

  const std::vector<int32_t>& BlockTable(int seq) const;  // [blocks covering the sequence]
  int block_size() const { return block_size_; }
  int num_free_blocks() const { return pool_.num_free_blocks(); }
  const BlockPool& pool() const { return pool_; }
  // True if queries from position `pos` on only read blocks this sequence still holds.
  bool CanServeFrom(int seq, int pos) const {
    return FirstNeededBlock(pos) >= State(seq).num_skipped;
  }
  // Blocks owned by a sequence (non-null table entries).
  int NumOwnedBlocks(int seq) const;

 protected:
  struct SeqState {
    std::vector<int32_t> table;  // logical block -> physical block (null when skipped)
    int num_skipped = 0;         // leading entries already released
    int num_cached = 0;          // leading blocks given a hash
  };
  SeqState& State(int seq);
  const SeqState& State(int seq) const;

  int block_size_;
  BlockPool pool_;
  std::unordered_map<int, SeqState> seqs_;
};

class FullAttentionManager final : public SingleTypeKvManager {
 public:
  using SingleTypeKvManager::SingleTypeKvManager;
  const char* kind_name() const override { return "full"; }
  int FirstNeededBlock(int) const override { return 0; }
  int MaxCacheHit(std::span<const uint64_t> hashes, int max_blocks,
                  const InLowerTier& lower) const override;
};

class SlidingWindowManager final : public SingleTypeKvManager {
 public:
  SlidingWindowManager(int block_size, int num_blocks, bool enable_caching, int window);
  const char* kind_name() const override { return "sliding_window"; }
  int FirstNeededBlock(int first_query_pos) const override;
  int window() const { return window_; }

 private:
  int window_;
};

}  // namespace mimo
