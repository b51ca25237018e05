// Per-kind block tables: full layers keep everything, sliding-window layers drop dead blocks.
#include "kv/single_type_kv_manager.h"

#include <algorithm>

#include "core/check.h"

namespace mimo {

SingleTypeKvManager::SingleTypeKvManager(int block_size, int num_blocks, bool enable_caching)
    : block_size_(block_size), pool_(num_blocks, enable_caching) {
  MIMO_CHECK(block_size > 0, "block size %d", block_size);
}

SingleTypeKvManager::SeqState& SingleTypeKvManager::State(int seq) {
  auto it = seqs_.find(seq);
  MIMO_CHECK(it != seqs_.end(), "unknown sequence %d", seq);
  return it->second;
}
const SingleTypeKvManager::SeqState& SingleTypeKvManager::State(int seq) const {
  auto it = seqs_.find(seq);
  MIMO_CHECK(it != seqs_.end(), "unknown sequence %d", seq);
  return it->second;
}

int SingleTypeKvManager::MaxCacheHit(std::span<const uint64_t> hashes, int max_blocks,
                                     const InLowerTier& lower) const {
  max_blocks = std::min<int>(max_blocks, static_cast<int>(hashes.size()));
  for (int k = max_blocks; k > 0; --k) {
    bool all = true;
    for (int b = FirstNeededBlock(k * block_size_); b < k && all; ++b) {
      all = Present(hashes[b], lower);
    }
    if (all) return k;
  }
  return 0;
}

int FullAttentionManager::MaxCacheHit(std::span<const uint64_t> hashes, int max_blocks,
                                      const InLowerTier& lower) const {
  max_blocks = std::min<int>(max_blocks, static_cast<int>(hashes.size()));
  int k = 0;
  while (k < max_blocks && Present(hashes[k], lower)) ++k;
  return k;
}

SlidingWindowManager::SlidingWindowManager(int block_size, int num_blocks, bool enable_caching,
                                           int window)
    : SingleTypeKvManager(block_size, num_blocks, enable_caching), window_(window) {
  MIMO_CHECK(window > 0, "sliding window %d", window);
}

int SlidingWindowManager::FirstNeededBlock(int first_query_pos) const {
  // Keys needed from lo = q0 - W + 1 on; block b is dead iff its last position
  // (b + 1) * bs - 1 < lo, i.e. b < floor(lo / bs).
  const int lo = first_query_pos - window_ + 1;
  return lo > 0 ? lo / block_size_ : 0;
}

std::optional<int32_t> SingleTypeKvManager::AcquireBlock(uint64_t hash, const LoadBlock& load) {
  if (std::optional<int> hit = pool_.Lookup(hash)) {
    const int b = *hit;
    pool_.Touch(std::span<const int>(&b, 1));
    return b;
  }
  if (!load) return std::nullopt;
  std::optional<std::vector<int>> fresh = pool_.Allocate(1);
  if (!fresh.has_value()) return std::nullopt;
  const int b = (*fresh)[0];
  if (!load(hash, b)) {
    pool_.Free(std::span<const int>(&b, 1));
    return std::nullopt;
  }
  pool_.CacheBlock(b, hash);
  return b;
}

void SingleTypeKvManager::ReleaseBlocks(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    const int blk = b;
    pool_.Free(std::span<const int>(&blk, 1));  // the null block is skipped
  }
}

void SingleTypeKvManager::AddSequence(int seq, std::vector<int32_t> hit_blocks) {
  MIMO_CHECK(!HasSequence(seq), "sequence %d already present", seq);
  SeqState st;
  st.num_skipped = 0;
  while (st.num_skipped < static_cast<int>(hit_blocks.size()) &&
         hit_blocks[st.num_skipped] == BlockPool::kNullBlock) {
    ++st.num_skipped;
  }
  st.num_cached = static_cast<int>(hit_blocks.size());  // hit blocks already carry their hash
  st.table = std::move(hit_blocks);
  seqs_.emplace(seq, std::move(st));
}

void SingleTypeKvManager::RemoveSkippedBlocks(int seq, int first_query_pos) {
  SeqState& st = State(seq);
  const int first =
      std::min<int>(FirstNeededBlock(first_query_pos), static_cast<int>(st.table.size()));
  // Oldest first, so the oldest dead blocks sit nearest the eviction end of the free list.
  for (int b = st.num_skipped; b < first; ++b) {
    int blk = st.table[b];
    pool_.Free(std::span<const int>(&blk, 1));
    st.table[b] = BlockPool::kNullBlock;
  }
  st.num_skipped = std::max(st.num_skipped, first);
}

int SingleTypeKvManager::NumNewBlocksNeeded(int seq, int num_tokens) const {
  const SeqState& st = State(seq);
  const int need = (num_tokens + block_size_ - 1) / block_size_;
  return std::max(0, need - static_cast<int>(st.table.size()));
}

std::vector<int> SingleTypeKvManager::AllocateNewBlocks(int seq, int num_tokens) {
  const int n = NumNewBlocksNeeded(seq, num_tokens);
  auto blocks = pool_.Allocate(n);
  MIMO_CHECK(blocks.has_value(), "%s pool: %d blocks requested, %d free", kind_name(), n,
             pool_.num_free_blocks());
  SeqState& st = State(seq);
  st.table.insert(st.table.end(), blocks->begin(), blocks->end());
  return *blocks;
}

void SingleTypeKvManager::CacheFullBlocks(int seq, std::span<const uint64_t> hashes,
                                          int num_full_blocks) {
  SeqState& st = State(seq);
  num_full_blocks = std::min<int>(num_full_blocks, static_cast<int>(st.table.size()));
  for (int b = st.num_cached; b < num_full_blocks; ++b) {
    if (st.table[b] != BlockPool::kNullBlock) pool_.CacheBlock(st.table[b], hashes[b]);
  }
  st.num_cached = std::max(st.num_cached, num_full_blocks);
}

void SingleTypeKvManager::FreeSequence(int seq) {
  SeqState& st = State(seq);
  // Tail blocks first: a later prompt sharing this one's prefix reuses the head blocks, so the
  // tail should be evicted before them.
  std::vector<int> order(st.table.rbegin(), st.table.rend());
  pool_.Free(order);
  seqs_.erase(seq);
}

const std::vector<int32_t>& SingleTypeKvManager::BlockTable(int seq) const {
  return State(seq).table;
}

int SingleTypeKvManager::NumOwnedBlocks(int seq) const {
  const SeqState& st = State(seq);
  return static_cast<int>(std::count_if(st.table.begin(), st.table.end(),
                                        [](int32_t b) { return b != BlockPool::kNullBlock; }));
}

}  // namespace mimo
