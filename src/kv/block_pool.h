// BlockPool: the bookkeeping of one pool of KV blocks, with no tensors: block ids, reference
// counts, a free list in eviction order (least recently freed first) and the prefix-cache map
// from chained block-content hashes to blocks. Block 0 is the null block: never handed out,
// used as a placeholder in block tables for blocks a sliding-window layer no longer needs.
// Not thread-safe; engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace mimo {

// Chained content hash of one full block: hash(parent block's hash, the block's token ids,
// extra key). `extra` separates caches whose K/V differ for the same tokens (e.g. a different
// adapter); 0 when unused. 64-bit; a collision would alias two prefixes (probability ~n^2/2^64).
uint64_t HashBlockTokens(uint64_t parent_hash, std::span<const int32_t> tokens, uint64_t extra);
// A 64-bit hash of a list of words (fingerprints of layouts and files).
uint64_t HashWords(std::span<const uint64_t> words);
inline constexpr uint64_t kRootBlockHash = 0x6d696d6f6b763031ull;  // parent of block 0

// Hashes of every FULL block of `tokens` (a trailing partial block has none).
std::vector<uint64_t> HashFullBlocks(std::span<const int32_t> tokens, int block_size,
                                     uint64_t extra);

class BlockPool {
 public:
  static constexpr int kNullBlock = 0;

  // num_blocks includes the null block, so num_blocks - 1 are allocatable.
  BlockPool(int num_blocks, bool enable_caching);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int num_blocks() const { return static_cast<int>(ref_.size()); }
  // Blocks with no owner (including cached ones that would be evicted on demand).
  int num_free_blocks() const { return num_free_; }
  bool caching() const { return caching_; }

  // n blocks from the head of the free list (evicting their cached content), ref count 1.
  // nullopt (and nothing changed) when fewer than n are free.
  std::optional<std::vector<int>> Allocate(int n);
  // Takes a reference on cached blocks found by Lookup (removing them from the free list).
  void Touch(std::span<const int> blocks);
  // Drops one reference; blocks reaching 0 join the free-list TAIL in the given order (so pass
  // the blocks to evict first first). They keep their hash until reallocated.
  void Free(std::span<const int> blocks);

  // Prefix cache. Lookup returns the block holding content `hash`, if cached.
  std::optional<int> Lookup(uint64_t hash) const;
  // Records that `block` (full, computed) holds content `hash`. A no-op when caching is off,
  // when the block already has a hash, or when another block already serves this hash.
  void CacheBlock(int block, uint64_t hash);

  // Hooks of the tiers below the pool: on_evict(block, hash) runs when a cached block is about
  // to be reused (its content still intact), on_cache(block, hash) when a block gets a hash.
  using BlockHook = std::function<void(int block, uint64_t hash)>;
  void SetHooks(BlockHook on_evict, BlockHook on_cache) {
    on_evict_ = std::move(on_evict);
    on_cache_ = std::move(on_cache);
  }

  int ref_count(int block) const { return ref_[block]; }
  bool is_cached(int block) const { return has_hash_[block]; }
  // The free list, head (next evicted) first. For tests and debugging.
  std::vector<int> FreeListForTest() const;

 private:
  void PushTail(int b);
  void Unlink(int b);
  void DropHash(int b);

  bool caching_;
  std::vector<int> ref_;           // [num_blocks]
  std::vector<int> prev_, next_;   // [num_blocks] intrusive doubly-linked free list; -1 = none
  std::vector<uint8_t> in_free_;   // [num_blocks]
  std::vector<uint64_t> hash_;     // [num_blocks] valid when has_hash_
  std::vector<uint8_t> has_hash_;  // [num_blocks]
  int head_ = -1, tail_ = -1, num_free_ = 0;
  std::unordered_map<uint64_t, int> cached_;  // hash -> block
  BlockHook on_evict_, on_cache_;
};

}  // namespace mimo
