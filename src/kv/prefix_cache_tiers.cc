// The prefix-cache tiers below the pools (see prefix_cache_tiers.h).
#include "kv/prefix_cache_tiers.h"

#include <algorithm>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "core/log.h"
#include "kv/block_pool.h"

namespace mimo {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

PrefixCacheTiers::PrefixCacheTiers(PagedKvAttention& storage, int block_size,
                                   std::vector<int> groups, std::vector<int> window_groups,
                                   const PrefixCacheTierOptions& opts)
    : storage_(storage),
      block_size_(block_size),
      groups_(std::move(groups)),
      window_groups_(std::move(window_groups)),
      opts_(opts) {
  if (opts.ram_bytes > 0) ram_ = std::make_unique<HostBlockTier>(opts.ram_bytes);
}

PrefixCacheTiers::~PrefixCacheTiers() {
  FlushWrites();  // what the last step cached; the disk tier's destructor writes its queue
}

std::optional<uint64_t> PrefixCacheTiers::DiskFingerprint() const {
  std::vector<uint64_t> words = {DiskBlockTier::kFormatVersion, opts_.checkpoint_fingerprint,
                                 static_cast<uint64_t>(block_size_)};
  for (int g : groups_) {
    std::optional<uint64_t> fp = storage_.GroupContentFingerprint(g);
    if (!fp.has_value()) return std::nullopt;  // fp8 scales not fixed yet
    words.push_back(static_cast<uint64_t>(g));
    words.push_back(*fp);
  }
  return HashWords(words);
}

uint64_t PrefixCacheTiers::ScalesFingerprint() const {
  std::vector<uint64_t> words = {DiskBlockTier::kFormatVersion, opts_.checkpoint_fingerprint,
                                 static_cast<uint64_t>(block_size_)};
  for (int g : groups_) {
    words.push_back(static_cast<uint64_t>(g));
    words.push_back(storage_.GroupLayoutFingerprint(g));
  }
  return HashWords(words);
}

std::string PrefixCacheTiers::ScalesFile() const {
  char name[64];
  std::snprintf(name, sizeof(name), "/fp8-scales-%016llx.bin",
                static_cast<unsigned long long>(ScalesFingerprint()));
  return opts_.dir + name;
}

// The file: "MIMOKVS1", the scales fingerprint, the group count, per group its id, its float
// count and the floats, then a checksum of everything before it.
void PrefixCacheTiers::AdoptRecordedScales() {
  std::FILE* f = std::fopen(ScalesFile().c_str(), "rb");
  if (f == nullptr) return;
  std::vector<uint8_t> bytes;
  uint8_t buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) bytes.insert(bytes.end(), buf, buf + n);
  std::fclose(f);
  auto bad = [&](const char* why) {
    MIMO_LOG_WARN("prefix cache: %s: %s; not adopted", ScalesFile().c_str(), why);
  };
  if (bytes.size() < 8 + 8 + 4 + 8 || std::memcmp(bytes.data(), "MIMOKVS1", 8) != 0) {
    return bad("not a scales file");
  }
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (Checksum64(bytes.data(), bytes.size() - 8) != sum) return bad("checksum mismatch");
  size_t at = 8;
  auto take = [&](void* out, size_t n) {
    if (at + n > bytes.size() - 8) return false;
    std::memcpy(out, bytes.data() + at, n);
    at += n;
    return true;
  };
  uint64_t fp = 0;
  uint32_t groups = 0;
  if (!take(&fp, 8) || fp != ScalesFingerprint() || !take(&groups, 4) ||
      groups != groups_.size()) {
    return bad("another checkpoint or layout");
  }
  std::vector<std::vector<float>> scales(groups_.size());
  for (size_t i = 0; i < groups_.size(); ++i) {
    uint32_t g = 0, n = 0;
    if (!take(&g, 4) || static_cast<int>(g) != groups_[i] || !take(&n, 4) || n > (1u << 24)) {
      return bad("malformed");
    }
    scales[i].resize(n);
    if (!take(scales[i].data(), n * sizeof(float))) return bad("truncated");
  }
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (!storage_.PresetGroupFp8Scales(groups_[i], scales[i])) return bad("scales do not fit");
  }
  MIMO_LOG_INFO("prefix cache: fp8 KV scales adopted from %s", ScalesFile().c_str());
}

void PrefixCacheTiers::RecordScales() const {
  std::vector<uint8_t> bytes(8);
  std::memcpy(bytes.data(), "MIMOKVS1", 8);
  auto put = [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  const uint64_t fp = ScalesFingerprint();
  const uint32_t groups = static_cast<uint32_t>(groups_.size());
  put(&fp, 8);
  put(&groups, 4);
  for (int g : groups_) {
    const std::vector<float> s = storage_.GroupFp8Scales(g);
    if (s.empty()) return;  // not fp8 (or not fixed): nothing to record
    const uint32_t id = static_cast<uint32_t>(g), n = static_cast<uint32_t>(s.size());
    put(&id, 4);
    put(&n, 4);
    put(s.data(), s.size() * sizeof(float));
  }
  const uint64_t sum = Checksum64(bytes.data(), bytes.size());
  put(&sum, 8);
  // Written whole under a temporary name and linked into place only if no process did first.
  const std::string file = ScalesFile();
  const std::string tmp = file + ".part-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) == 0 && ok) ::link(tmp.c_str(), file.c_str());
  ::unlink(tmp.c_str());
}

Status PrefixCacheTiers::OpenDisk() {
  if (opts_.dir.empty() || disk_ != nullptr || disk_failed_) return Status::Ok();
  std::optional<uint64_t> fp = DiskFingerprint();
  if (!fp.has_value()) {
    AdoptRecordedScales();
    fp = DiskFingerprint();
    if (!fp.has_value()) return Status::Ok();  // the first write fixes them
  }
  DiskTierOptions d;
  d.dir = opts_.dir;
  d.capacity_bytes = opts_.disk_bytes;
  d.fingerprint = *fp;
  StatusOr<std::unique_ptr<DiskBlockTier>> disk = DiskBlockTier::Open(d);
  if (!disk.ok()) {
    disk_failed_ = true;
    return disk.status();
  }
  disk_ = std::move(disk).value();
  RecordScales();
  MIMO_LOG_INFO("prefix cache: disk tier %s (%lld blocks, %.1f of %.1f MiB)",
                disk_->path().c_str(), static_cast<long long>(disk_->stats().blocks),
                disk_->stats().bytes / 1048576.0, opts_.disk_bytes / 1048576.0);
  return Status::Ok();
}

bool PrefixCacheTiers::Contains(int group, uint64_t hash) const {
  const TierKey k{group, hash};
  return (ram_ && ram_->Contains(k)) || (disk_ && disk_->Contains(k));
}

bool PrefixCacheTiers::Load(int group, uint64_t hash, int block) {
  const TierKey k{group, hash};
  const int64_t bytes = storage_.GroupBlockBytes(group);
  const int64_t tokens = group == groups_.front() ? block_size_ : 0;
  const double t0 = Now();
  if (ram_) {
    if (const std::vector<uint8_t>* b = ram_->Get(k)) {
      MIMO_CHECK(static_cast<int64_t>(b->size()) == bytes, "RAM tier block of %zu bytes, not %lld",
                 b->size(), static_cast<long long>(bytes));
      storage_.WriteGroupBlock(group, block, b->data());
      BlockTierStats& s = ram_->stats();
      ++s.loads;
      s.hit_tokens += tokens;
      s.load_seconds += Now() - t0;
      return true;
    }
  }
  if (disk_) {
    buffer_.resize(bytes);
    if (disk_->Read(k, buffer_.data(), bytes)) {  // checked before it reaches the pool
      storage_.WriteGroupBlock(group, block, buffer_.data());
      disk_->AddLoadStats(tokens, Now() - t0);
      return true;
    }
  }
  return false;
}

void PrefixCacheTiers::QueueDiskWrite(const TierKey& k, int block) {
  if (!disk_ || disk_->Contains(k)) return;
  std::vector<uint8_t> bytes(storage_.GroupBlockBytes(k.group));
  storage_.ReadGroupBlock(k.group, block, bytes.data());
  disk_->Write(k, std::move(bytes));
}

bool PrefixCacheTiers::IsWindowGroup(int group) const {
  return std::find(window_groups_.begin(), window_groups_.end(), group) != window_groups_.end();
}

void PrefixCacheTiers::OnEvict(int group, int block, uint64_t hash) {
  const TierKey k{group, hash};
  if (IsWindowGroup(group) && checkpoints_.erase(k) == 0) return;  // no hit resumes here
  // Cached during this step and reused before it was written: write it now.
  auto p = pending_.find(k);
  if (p != pending_.end()) {
    if (p->second == block) QueueDiskWrite(k, block);
    pending_.erase(p);
  }
  if (ram_ && !ram_->Contains(k)) {
    std::vector<uint8_t> bytes(storage_.GroupBlockBytes(group));
    storage_.ReadGroupBlock(group, block, bytes.data());
    ram_->Put(k, std::move(bytes));
  }
}

void PrefixCacheTiers::OnCached(int group, int block, uint64_t hash) {
  if (IsWindowGroup(group)) return;  // written at checkpoints only
  Checkpoint(group, block, hash);
}

void PrefixCacheTiers::Checkpoint(int group, int block, uint64_t hash) {
  if (IsWindowGroup(group)) checkpoints_.insert(TierKey{group, hash});
  if (opts_.dir.empty() || disk_failed_) return;
  pending_[TierKey{group, hash}] = block;
}

void PrefixCacheTiers::FlushWrites() {
  if (pending_.empty()) return;
  if (!disk_) {
    const Status st = OpenDisk();
    if (!st.ok()) MIMO_LOG_WARN("prefix cache: no disk tier: %s", st.message().c_str());
    if (!disk_) {
      if (disk_failed_) pending_.clear();
      return;  // fp8 scales not fixed yet: keep them pending
    }
  }
  for (const auto& [k, block] : pending_) QueueDiskWrite(k, block);
  pending_.clear();
}

bool PrefixCacheTiers::ContainsFeatures(uint64_t key) const {
  return Contains(kFeatureGroup, key);
}

namespace {

std::vector<uint8_t> FloatBytes(const std::vector<float>& rows) {
  std::vector<uint8_t> bytes(rows.size() * sizeof(float));
  std::memcpy(bytes.data(), rows.data(), bytes.size());
  return bytes;
}

}  // namespace

bool PrefixCacheTiers::LoadFeatures(uint64_t key, int64_t floats, std::vector<float>* rows) {
  const TierKey k{kFeatureGroup, key};
  const double t0 = Now();
  if (ram_) {
    if (const std::vector<uint8_t>* b = ram_->Get(k)) {
      if (static_cast<int64_t>(b->size()) != floats * static_cast<int64_t>(sizeof(float))) {
        return false;
      }
      rows->resize(floats);
      std::memcpy(rows->data(), b->data(), b->size());
      BlockTierStats& s = ram_->stats();
      ++s.loads;
      s.load_seconds += Now() - t0;
      return true;
    }
  }
  if (disk_ && disk_->Contains(k)) {
    rows->resize(floats);
    if (disk_->Read(k, reinterpret_cast<uint8_t*>(rows->data()),
                    floats * static_cast<int64_t>(sizeof(float)))) {
      disk_->AddLoadStats(0, Now() - t0);
      return true;
    }
  }
  return false;
}

void PrefixCacheTiers::OnFeaturesEvicted(uint64_t key, std::vector<float> rows) {
  if (feature_checkpoints_.erase(key) == 0 || !ram_) return;  // no hit resumes over it
  const TierKey k{kFeatureGroup, key};
  if (!ram_->Contains(k)) ram_->Put(k, FloatBytes(rows));
}

void PrefixCacheTiers::CheckpointFeatures(uint64_t key, const std::vector<float>& rows) {
  feature_checkpoints_.insert(key);
  if (opts_.dir.empty() || disk_failed_) return;
  if (!disk_) {
    const Status st = OpenDisk();
    if (!st.ok()) MIMO_LOG_WARN("prefix cache: no disk tier: %s", st.message().c_str());
    if (!disk_) return;
  }
  const TierKey k{kFeatureGroup, key};
  if (!disk_->Contains(k)) disk_->Write(k, FloatBytes(rows));
}

PrefixCacheTierStats PrefixCacheTiers::stats() const {
  PrefixCacheTierStats s;
  if (ram_) s.ram = ram_->stats();
  if (disk_) s.disk = disk_->stats();
  s.disk.capacity_bytes = opts_.dir.empty() ? 0 : opts_.disk_bytes;
  return s;
}

}  // namespace mimo
