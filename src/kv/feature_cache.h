// FeatureCache: a drafter's features [block_size, width] of full prompt blocks, by the chained
// content hash the prefix cache uses (HashFullBlocks), least recently used evicted first, within
// a byte budget. The KvCache owns it (KvCache::EnableFeatureCache) so the scheduler sees it: a
// prefix-cache hit may cover the blocks it holds (KvCache::FeatureCachedPrefix), whose features
// a drafter (DFlash) restores instead of recomputing them. Below it, the prefix cache's tiers
// (FeatureTiers, kv/prefix_cache_tiers.h) keep the blocks of checkpoints in host RAM and on disk,
// so a hit from any tier, after a restart too, restores the drafter's context as well.
// Engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace mimo {

// Tiers below the feature cache. Keys are FeatureCache::TierKeyOf(hash): the block's hash mixed
// with the features' layout (which target layers, how wide), so another drafter's features never
// pass for these.
class FeatureTiers {
 public:
  virtual ~FeatureTiers() = default;
  virtual bool ContainsFeatures(uint64_t key) const = 0;
  // rows: the block's `floats` ([block_size * width]); false when no tier has them or the disk
  // copy fails its checks (then it is gone and the positions are recomputed).
  virtual bool LoadFeatures(uint64_t key, int64_t floats, std::vector<float>* rows) = 0;
  // A block the cache drops: kept in RAM if it was checkpointed (CheckpointFeatures).
  virtual void OnFeaturesEvicted(uint64_t key, std::vector<float> rows) = 0;
  // A block a later turn may resume over (the window before a checkpoint): written to disk
  // behind the engine, and kept in RAM when the cache drops it.
  virtual void CheckpointFeatures(uint64_t key, const std::vector<float>& rows) = 0;
};

class FeatureCache {
 public:
  // capacity_bytes / (block_size * width floats) blocks at most (pinned blocks may overshoot
  // it until Unpin).
  FeatureCache(int64_t capacity_bytes, int block_size, int64_t width);
  // tiers: null for none; layout: what the features are (mixed into the tiers' keys).
  void SetTiers(FeatureTiers* tiers, uint64_t layout);
  bool Contains(uint64_t hash) const { return map_.count(hash) != 0; }
  // In the cache or a tier below it.
  bool Available(uint64_t hash) const;
  // Makes the block resident (loading it from a tier) and pins it until Unpin, so a restore in
  // the same step finds it; false when neither has it.
  bool Acquire(uint64_t hash);
  void Unpin() { pinned_.clear(); }
  const std::vector<float>* Find(uint64_t hash);  // marks it used
  // rows [block_size, width]; a hash already held is kept (the same tokens, the same features).
  void Insert(uint64_t hash, std::vector<float> rows);
  // Hands the block to the tiers as a checkpoint (no-op without tiers or when not held).
  void Checkpoint(uint64_t hash);
  uint64_t TierKeyOf(uint64_t hash) const;
  size_t size() const { return map_.size(); }  // blocks held
  size_t capacity_blocks() const { return capacity_; }
  int64_t bytes() const { return static_cast<int64_t>(map_.size()) * block_bytes_; }
  int64_t capacity_bytes() const { return static_cast<int64_t>(capacity_) * block_bytes_; }
  int block_size() const { return block_size_; }
  int64_t width() const { return width_; }

 private:
  void MakeRoom();  // evicts unpinned blocks, least recently used first, below the capacity

  int block_size_;
  int64_t width_;
  int64_t block_bytes_;
  size_t capacity_;
  FeatureTiers* tiers_ = nullptr;
  uint64_t layout_ = 0;
  std::list<uint64_t> lru_;  // most recently used first
  std::unordered_map<uint64_t, std::pair<std::vector<float>, std::list<uint64_t>::iterator>> map_;
  std::unordered_set<uint64_t> pinned_;
};

}  // namespace mimo
