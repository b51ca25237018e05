// Block ids, ref counts, LRU free list and the prefix-hash map.
#include "kv/block_pool.h"

#include "core/check.h"

namespace mimo {
namespace {

inline uint64_t Mix(uint64_t h, uint64_t x) {
  // splitmix64 finalizer over (h ^ x) with a rotation so the order of inputs matters.
  uint64_t z = (h ^ x) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t HashBlockTokens(uint64_t parent_hash, std::span<const int32_t> tokens, uint64_t extra) {
  uint64_t h = Mix(parent_hash, extra);
  h = Mix(h, tokens.size());
  for (int32_t t : tokens) h = Mix(h, static_cast<uint32_t>(t));
  return h;
}

uint64_t HashWords(std::span<const uint64_t> words) {
  uint64_t h = Mix(kRootBlockHash, words.size());
  for (uint64_t w : words) h = Mix(h, w);
  return h;
}

std::vector<uint64_t> HashFullBlocks(std::span<const int32_t> tokens, int block_size,
                                     uint64_t extra) {
  std::vector<uint64_t> out;
  uint64_t parent = kRootBlockHash;
  for (size_t b = 0; (b + 1) * block_size <= tokens.size(); ++b) {
    parent = HashBlockTokens(parent, tokens.subspan(b * block_size, block_size), extra);
    out.push_back(parent);
  }
  return out;
}

BlockPool::BlockPool(int num_blocks, bool enable_caching)
    : caching_(enable_caching),
      ref_(num_blocks, 0),
      prev_(num_blocks, -1),
      next_(num_blocks, -1),
      in_free_(num_blocks, 0),
      hash_(num_blocks, 0),
      has_hash_(num_blocks, 0) {
  MIMO_CHECK(num_blocks >= 1, "a block pool needs at least the null block");
  ref_[kNullBlock] = 1;  // permanently owned: never on the free list
  for (int b = 1; b < num_blocks; ++b) PushTail(b);
}

void BlockPool::PushTail(int b) {
  MIMO_DCHECK(!in_free_[b], "block %d already free", b);
  prev_[b] = tail_;
  next_[b] = -1;
  if (tail_ >= 0)
    next_[tail_] = b;
  else
    head_ = b;
  tail_ = b;
  in_free_[b] = 1;
  ++num_free_;
}

void BlockPool::Unlink(int b) {
  MIMO_DCHECK(in_free_[b], "block %d not free", b);
  if (prev_[b] >= 0)
    next_[prev_[b]] = next_[b];
  else
    head_ = next_[b];
  if (next_[b] >= 0)
    prev_[next_[b]] = prev_[b];
  else
    tail_ = prev_[b];
  prev_[b] = next_[b] = -1;
  in_free_[b] = 0;
  --num_free_;
}

void BlockPool::DropHash(int b) {
  if (!has_hash_[b]) return;
  auto it = cached_.find(hash_[b]);
  if (it != cached_.end() && it->second == b) cached_.erase(it);
  has_hash_[b] = 0;
}

std::optional<std::vector<int>> BlockPool::Allocate(int n) {
  MIMO_CHECK(n >= 0, "negative block count %d", n);
  if (n > num_free_) return std::nullopt;
  std::vector<int> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    int b = head_;
    Unlink(b);
    if (has_hash_[b] && on_evict_) on_evict_(b, hash_[b]);
    DropHash(b);  // evicted: its content no longer serves prefix hits
    ref_[b] = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::Touch(std::span<const int> blocks) {
  for (int b : blocks) {
    MIMO_CHECK(b > kNullBlock && b < num_blocks(), "touch of invalid block %d", b);
    if (ref_[b] == 0) Unlink(b);
    ++ref_[b];
  }
}

void BlockPool::Free(std::span<const int> blocks) {
  for (int b : blocks) {
    if (b == kNullBlock) continue;
    MIMO_CHECK(b > kNullBlock && b < num_blocks() && ref_[b] > 0, "free of unowned block %d", b);
    if (--ref_[b] == 0) PushTail(b);
  }
}

std::optional<int> BlockPool::Lookup(uint64_t hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::CacheBlock(int block, uint64_t hash) {
  MIMO_CHECK(block > kNullBlock && block < num_blocks(), "cache of invalid block %d", block);
  if (!caching_ || has_hash_[block]) return;
  if (cached_.count(hash)) return;  // an identical block is already cached; keep that one
  cached_[hash] = block;
  hash_[block] = hash;
  has_hash_[block] = 1;
  if (on_cache_) on_cache_(block, hash);
}

std::vector<int> BlockPool::FreeListForTest() const {
  std::vector<int> out;
  for (int b = head_; b >= 0; b = next_[b]) out.push_back(b);
  return out;
}

}  // namespace mimo
