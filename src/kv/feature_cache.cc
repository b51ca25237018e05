// FeatureCache (see feature_cache.h).
#include "kv/feature_cache.h"

#include "kv/block_pool.h"

namespace mimo {

FeatureCache::FeatureCache(int64_t capacity_bytes, int block_size, int64_t width)
    : block_size_(block_size),
      width_(width),
      block_bytes_(int64_t{block_size} * width * static_cast<int64_t>(sizeof(float))),
      capacity_(block_bytes_ > 0 && capacity_bytes > 0
                    ? static_cast<size_t>(capacity_bytes / block_bytes_)
                    : 0) {}

void FeatureCache::SetTiers(FeatureTiers* tiers, uint64_t layout) {
  tiers_ = tiers;
  layout_ = layout;
}

uint64_t FeatureCache::TierKeyOf(uint64_t hash) const {
  const uint64_t words[] = {hash, layout_, static_cast<uint64_t>(block_size_),
                            static_cast<uint64_t>(width_)};
  return HashWords(words);
}

bool FeatureCache::Available(uint64_t hash) const {
  return Contains(hash) || (tiers_ != nullptr && tiers_->ContainsFeatures(TierKeyOf(hash)));
}

bool FeatureCache::Acquire(uint64_t hash) {
  if (Find(hash) == nullptr) {
    std::vector<float> rows;
    const int64_t floats = int64_t{block_size_} * width_;
    if (tiers_ == nullptr || !tiers_->LoadFeatures(TierKeyOf(hash), floats, &rows) ||
        static_cast<int64_t>(rows.size()) != floats) {
      return false;
    }
    Insert(hash, std::move(rows));
    if (!Contains(hash)) return false;  // no capacity at all
  }
  pinned_.insert(hash);
  return true;
}

const std::vector<float>* FeatureCache::Find(uint64_t hash) {
  auto it = map_.find(hash);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.second);
  return &it->second.first;
}

void FeatureCache::MakeRoom() {
  auto victim = lru_.end();
  while (map_.size() >= capacity_ && victim != lru_.begin()) {
    --victim;
    if (pinned_.count(*victim)) continue;
    auto m = map_.find(*victim);
    if (tiers_ != nullptr) tiers_->OnFeaturesEvicted(TierKeyOf(*victim), std::move(m->second.first));
    map_.erase(m);
    victim = lru_.erase(victim);
  }
}

void FeatureCache::Insert(uint64_t hash, std::vector<float> rows) {
  if (Find(hash) != nullptr || capacity_ == 0) return;
  MakeRoom();
  lru_.push_front(hash);
  map_.emplace(hash, std::make_pair(std::move(rows), lru_.begin()));
}

void FeatureCache::Checkpoint(uint64_t hash) {
  if (tiers_ == nullptr) return;
  auto it = map_.find(hash);
  if (it != map_.end()) tiers_->CheckpointFeatures(TierKeyOf(hash), it->second.first);
}

}  // namespace mimo
