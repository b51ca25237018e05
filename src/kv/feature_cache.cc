// FeatureCache (see feature_cache.h).
#include "kv/feature_cache.h"

namespace mimo {

FeatureCache::FeatureCache(int64_t capacity_bytes, int block_size, int64_t width)
    : block_size_(block_size),
      width_(width),
      block_bytes_(int64_t{block_size} * width * static_cast<int64_t>(sizeof(float))),
      capacity_(block_bytes_ > 0 && capacity_bytes > 0
                    ? static_cast<size_t>(capacity_bytes / block_bytes_)
                    : 0) {}

const std::vector<float>* FeatureCache::Find(uint64_t hash) {
  auto it = map_.find(hash);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.second);
  return &it->second.first;
}

void FeatureCache::Insert(uint64_t hash, std::vector<float> rows) {
  if (Find(hash) != nullptr) return;
  while (map_.size() >= capacity_ && !lru_.empty()) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(hash);
  map_.emplace(hash, std::make_pair(std::move(rows), lru_.begin()));
}

}  // namespace mimo
