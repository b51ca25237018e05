// FeatureCache: a drafter's features [block_size, width] of full prompt blocks, by the chained
// content hash the prefix cache uses (HashFullBlocks), least recently used evicted first, within
// a byte budget. The KvCache owns it (KvCache::EnableFeatureCache) so the scheduler sees it: a
// prefix-cache hit may cover the blocks it holds (KvCache::FeatureCachedPrefix), whose features
// a drafter (DFlash) restores instead of recomputing them. Engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mimo {

class FeatureCache {
 public:
  // capacity_bytes / (block_size * width floats) blocks at most.
  FeatureCache(int64_t capacity_bytes, int block_size, int64_t width);
  bool Contains(uint64_t hash) const { return map_.count(hash) != 0; }
  const std::vector<float>* Find(uint64_t hash);  // marks it used
  // rows [block_size, width]; a hash already held is kept (the same tokens, the same features).
  void Insert(uint64_t hash, std::vector<float> rows);
  size_t size() const { return map_.size(); }  // blocks held
  size_t capacity_blocks() const { return capacity_; }
  int64_t bytes() const { return static_cast<int64_t>(map_.size()) * block_bytes_; }
  int64_t capacity_bytes() const { return static_cast<int64_t>(capacity_) * block_bytes_; }
  int block_size() const { return block_size_; }
  int64_t width() const { return width_; }

 private:
  int block_size_;
  int64_t width_;
  int64_t block_bytes_;
  size_t capacity_;
  std::list<uint64_t> lru_;  // most recently used first
  std::unordered_map<uint64_t, std::pair<std::vector<float>, std::list<uint64_t>::iterator>> map_;
};

}  // namespace mimo
