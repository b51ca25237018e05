// The two stores below the KV pools for prefix-cache blocks (llama-server's --cache-ram and slot
// files, SGLang's HiCache, vLLM's LMCache, on a CPU engine):
//   HostBlockTier: blocks the pools evicted, in host RAM, LRU within a byte bound.
//   DiskBlockTier: blocks as files under a directory that outlive the process, LRU within a
//     byte bound, written by a thread of its own so no step waits on the disk.
// A block is named by its KV-cache group and its chained content hash (kv/block_pool.h), so a
// hit is exact; its bytes are every layer of the group's K and V, as the pool stores them.
//
// On disk: DIR/<fingerprint>/g<group>-<hash>.kvb, one file per block, each a 64-byte header
// (magic, format version, group, the fingerprint, the hash, the payload's size and checksum, the
// header's checksum) and the payload. The fingerprint covers everything that changes the bytes
// (the checkpoint, KV dtype and layout, fp8 scales, block size), so another model's or layout's
// files are never looked at. A file is written as DIR/<fingerprint>/.part-<pid>-<n> and renamed
// into place, so a crash mid-write leaves only a .part file, which no reader opens (and the next
// Open removes once it is an hour old); two processes on one directory write whole files under
// distinct temporary names and rename atomically, and a file that fails any check when read is
// reported, deleted and recomputed, never used.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace mimo {

struct TierKey {
  int group = 0;
  uint64_t hash = 0;
  bool operator==(const TierKey& o) const { return group == o.group && hash == o.hash; }
};
struct TierKeyHash {
  size_t operator()(const TierKey& k) const {
    return static_cast<size_t>(k.hash ^ (uint64_t(k.group) * 0x9e3779b97f4a7c15ull));
  }
};

// Counters of one tier. Hits and loads are blocks of every group; *_tokens are the tokens of
// the first group's blocks (the prefix a hit covers).
struct BlockTierStats {
  int64_t capacity_bytes = 0;
  int64_t bytes = 0;   // held now
  int64_t blocks = 0;  // held now
  int64_t stores = 0;  // blocks written into the tier
  int64_t evictions = 0;
  int64_t loads = 0;  // blocks loaded back into a pool
  int64_t hit_tokens = 0;
  double load_seconds = 0;
  int64_t rejected = 0;  // disk: files that failed a check (skipped, deleted, recomputed)
  int64_t dropped = 0;   // disk: writes dropped because the writer fell behind
};

// 64-bit checksum of a byte string (not cryptographic: it catches torn and flipped bytes).
uint64_t Checksum64(const uint8_t* data, size_t n);

// Keys in least-recently-used order with a byte size each. Not thread-safe.
class LruIndex {
 public:
  bool Contains(const TierKey& k) const { return map_.count(k) > 0; }
  void Insert(const TierKey& k, int64_t bytes);  // most recent; replaces an existing entry
  void Touch(const TierKey& k);                  // most recent
  void Erase(const TierKey& k);
  // The least recently used key; the index must not be empty.
  TierKey Oldest() const { return lru_.back(); }
  int64_t bytes() const { return bytes_; }
  int64_t size() const { return static_cast<int64_t>(map_.size()); }

 private:
  struct Entry {
    int64_t bytes;
    std::list<TierKey>::iterator it;
  };
  std::list<TierKey> lru_;  // front: most recent
  std::unordered_map<TierKey, Entry, TierKeyHash> map_;
  int64_t bytes_ = 0;
};

class HostBlockTier {
 public:
  explicit HostBlockTier(int64_t capacity_bytes) { stats_.capacity_bytes = capacity_bytes; }
  bool Contains(const TierKey& k) const { return index_.Contains(k); }
  // Takes the block's bytes, evicting the least recently used blocks to stay within the bound
  // (a block larger than the whole bound is not kept).
  void Put(const TierKey& k, std::vector<uint8_t> bytes);
  // The block's bytes, now most recently used; null when absent.
  const std::vector<uint8_t>* Get(const TierKey& k);
  BlockTierStats& stats() { return stats_; }
  const BlockTierStats& stats() const { return stats_; }

 private:
  LruIndex index_;
  std::unordered_map<TierKey, std::vector<uint8_t>, TierKeyHash> data_;
  BlockTierStats stats_;
};

struct PrefixCacheTierOptions {
  int64_t ram_bytes = 0;   // --prefix-cache-ram; 0: no RAM tier
  std::string dir;         // --prefix-cache-dir; empty: no disk tier
  int64_t disk_bytes = 0;  // --prefix-cache-disk
  // Identifies the checkpoint's weights (io/checkpoint_fingerprint.h); part of the disk
  // fingerprint with the KV layout and dtype, so files of other weights are never read.
  uint64_t checkpoint_fingerprint = 0;
};

struct DiskTierOptions {
  std::string dir;
  int64_t capacity_bytes = 0;
  uint64_t fingerprint = 0;
  int64_t max_pending_bytes = int64_t{256} << 20;  // queued writes beyond this are dropped
};

class DiskBlockTier {
 public:
  static constexpr uint32_t kFormatVersion = 1;
  static constexpr int64_t kHeaderBytes = 64;
  // Creates DIR/<fingerprint>/ if needed and indexes the blocks already there (LRU by mtime);
  // removes .part files an hour old. Errors: the directory cannot be created or read.
  static StatusOr<std::unique_ptr<DiskBlockTier>> Open(const DiskTierOptions& opts);
  ~DiskBlockTier();  // writes what is queued, then stops the writer
  DiskBlockTier(const DiskBlockTier&) = delete;
  DiskBlockTier& operator=(const DiskBlockTier&) = delete;

  // On disk, or queued to be written.
  bool Contains(const TierKey& k) const;
  // Reads the block into out[bytes]. False when it is not there or fails a check (wrong size,
  // magic, version, fingerprint, key or checksum): the file is then reported and deleted.
  bool Read(const TierKey& k, uint8_t* out, int64_t bytes);
  // Queues the block for the writer; false (dropped, counted) when the queue is full.
  bool Write(const TierKey& k, std::vector<uint8_t> bytes);
  void Flush();  // waits until every queued block is written
  BlockTierStats stats() const;
  void AddLoadStats(int64_t hit_tokens, double seconds);
  const std::string& path() const { return path_; }  // DIR/<fingerprint>
  std::string FileName(const TierKey& k) const;         // its file, under path()

 private:
  explicit DiskBlockTier(const DiskTierOptions& opts);
  Status Scan();
  void WriterLoop();
  bool WriteFile(const TierKey& k, const std::vector<uint8_t>& bytes);
  void EvictToBound();  // mu_ held
  void Reject(const TierKey& k, const char* why);

  DiskTierOptions opts_;
  std::string path_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  LruIndex index_;  // files on disk
  struct Job {
    TierKey key;
    std::vector<uint8_t> bytes;
  };
  std::deque<Job> queue_;
  std::unordered_map<TierKey, const std::vector<uint8_t>*, TierKeyHash> queued_;
  int64_t queued_bytes_ = 0;
  bool writing_ = false, stop_ = false;
  BlockTierStats stats_;
  std::thread writer_;
};

}  // namespace mimo
