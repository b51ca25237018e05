// PrefixCacheTiers: the prefix cache below the KV pools. A cached block (full, hashed) that a pool
// reuses is copied to host RAM; with a directory, every cached block is also written to disk
// once its step has run, by the disk tier's own thread. A prefix lookup counts blocks of any tier
// as cached, and the hit loads lower-tier blocks back into free pool blocks before the request's
// first chunk is computed (kv/kv_cache_manager.h: KvBlockTiers). Identity is today's chained
// block hash, so a hit is exact. The sliding-window groups' blocks go to the tiers only at
// checkpoints (the window before where a sequence's next turn resumes), so what they cost is
// bounded by the window per checkpoint, not by the context.
// The drafter's features (DFlash, kv/feature_cache.h) of those checkpoints' windows go to the
// same tiers, so a hit from any of them resumes the drafter's context without recomputing it.
// Engine thread only (the disk tier's writer is internal).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/block_tiers.h"
#include "kv/feature_cache.h"
#include "kv/kv_cache_manager.h"
#include "kv/paged_kv_attention.h"

namespace mimo {

struct PrefixCacheTierStats {
  BlockTierStats ram, disk;
};

class PrefixCacheTiers final : public KvBlockTiers, public FeatureTiers {
 public:
  // groups: the KV-cache groups whose blocks are cached (the default-member ones);
  // window_groups: those of them with a sliding window, whose blocks go to disk only at
  // checkpoints (Checkpoint), since a hit reads just the window before its boundary.
  PrefixCacheTiers(PagedKvAttention& storage, int block_size, std::vector<int> groups,
                   std::vector<int> window_groups, const PrefixCacheTierOptions& opts);
  ~PrefixCacheTiers() override;
  // Opens the disk tier now when the fingerprint is known (else at the first step after the
  // fp8 scales are fixed). Errors: the directory cannot be created or read.
  Status OpenDisk();

  bool Contains(int group, uint64_t hash) const override;
  bool Load(int group, uint64_t hash, int block) override;
  void OnEvict(int group, int block, uint64_t hash) override;
  void OnCached(int group, int block, uint64_t hash) override;
  // A sliding-window group's blocks that a hit at a sequence's boundary needs (the end of a
  // prompt, the end of a request: where the next turn of a conversation resumes); written to
  // disk after the step like the full groups' blocks. llama-server's context checkpoints, sized
  // by the window, not the context.
  void Checkpoint(int group, int block, uint64_t hash);

  // The drafter's feature blocks (FeatureTiers): one more group, kFeatureGroup.
  static constexpr int kFeatureGroup = 1 << 16;
  bool ContainsFeatures(uint64_t key) const override;
  bool LoadFeatures(uint64_t key, int64_t floats, std::vector<float>* rows) override;
  void OnFeaturesEvicted(uint64_t key, std::vector<float> rows) override;
  void CheckpointFeatures(uint64_t key, const std::vector<float>& rows) override;

  // After a step: copies the blocks cached during it (their K/V now written) to the disk
  // writer's queue. Never waits on the disk.
  void FlushWrites();
  PrefixCacheTierStats stats() const;

 private:
  std::optional<uint64_t> DiskFingerprint() const;
  // fp8 first-write scales: the directory records the first process's (DIR/fp8-scales-<fp>.bin,
  // fp over everything but the scales); a later process adopts them before its first write, so
  // its blocks' bytes, and fingerprint, match the files.
  uint64_t ScalesFingerprint() const;
  std::string ScalesFile() const;
  void AdoptRecordedScales();
  void RecordScales() const;
  void QueueDiskWrite(const TierKey& k, int block);

  PagedKvAttention& storage_;
  int block_size_;
  std::vector<int> groups_;
  std::vector<int> window_groups_;
  PrefixCacheTierOptions opts_;
  std::unique_ptr<HostBlockTier> ram_;
  std::unique_ptr<DiskBlockTier> disk_;
  bool disk_failed_ = false;
  bool IsWindowGroup(int group) const;
  // Sliding-window blocks marked by Checkpoint while in the pool: the only ones of those groups
  // that go to the RAM tier when evicted (the others serve no hit the tiers could resume).
  std::unordered_set<TierKey, TierKeyHash> checkpoints_;
  // Blocks cached during the current step, to be written once it ran: key -> pool block.
  std::unordered_map<TierKey, int, TierKeyHash> pending_;
  // Feature blocks checkpointed while in the feature cache: the ones that go to RAM when it
  // drops them.
  std::unordered_set<uint64_t> feature_checkpoints_;
  std::vector<uint8_t> buffer_;  // a block read from disk before it is checked
};

}  // namespace mimo
