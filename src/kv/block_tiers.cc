// Host-RAM and disk stores of prefix-cache blocks (see block_tiers.h).
#include "kv/block_tiers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/check.h"
#include "core/log.h"

namespace mimo {
namespace {

constexpr char kMagic[8] = {'M', 'I', 'M', 'O', 'K', 'V', 'B', '\0'};

// The file header, little-endian as the host writes it (x86-64 and AArch64 both are).
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t group;
  uint64_t fingerprint;
  uint64_t hash;
  uint64_t payload_bytes;
  uint64_t payload_checksum;
  uint64_t header_checksum;  // of the bytes above
  uint64_t reserved;
};
static_assert(sizeof(FileHeader) == DiskBlockTier::kHeaderBytes, "header is 64 bytes");

uint64_t HeaderChecksum(const FileHeader& h) {
  return Checksum64(reinterpret_cast<const uint8_t*>(&h), offsetof(FileHeader, header_checksum));
}

bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// "g<group>-<16 hex>.kvb" -> key.
bool ParseFileName(const char* name, TierKey* k) {
  unsigned group = 0;
  char hex[17] = {};
  int consumed = 0;
  if (std::sscanf(name, "g%u-%16[0-9a-f].kvb%n", &group, hex, &consumed) != 2) return false;
  if (name[consumed] != '\0' || std::strlen(hex) != 16) return false;
  k->group = static_cast<int>(group);
  k->hash = std::strtoull(hex, nullptr, 16);
  return true;
}

Status MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string p = path.substr(0, i);
    if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) {
      return InvalidArgument("prefix cache directory %s: cannot create %s: %s", path.c_str(),
                             p.c_str(), std::strerror(errno));
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument("prefix cache directory %s: not a directory", path.c_str());
  }
  if (::access(path.c_str(), R_OK | W_OK | X_OK) != 0) {
    return InvalidArgument("prefix cache directory %s: not writable: %s", path.c_str(),
                           std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

uint64_t Checksum64(const uint8_t* data, size_t n) {
  // Four independent multiply-rotate lanes over 8-byte words, then the tail, then a finalizer.
  uint64_t h[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull,
                   0x082efa98ec4e6c89ull};
  constexpr uint64_t kMul = 0x9fb21c651e98df25ull;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, data + i + 8 * l, 8);
      h[l] = (h[l] ^ w) * kMul;
      h[l] = (h[l] << 29) | (h[l] >> 35);
    }
  }
  uint64_t x = h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7) ^ n;
  for (; i < n; ++i) x = (x ^ data[i]) * kMul;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  return x;
}

// --- LruIndex

void LruIndex::Insert(const TierKey& k, int64_t bytes) {
  Erase(k);
  lru_.push_front(k);
  map_.emplace(k, Entry{bytes, lru_.begin()});
  bytes_ += bytes;
}

void LruIndex::Touch(const TierKey& k) {
  auto it = map_.find(k);
  if (it == map_.end()) return;
  lru_.splice(lru_.begin(), lru_, it->second.it);
}

void LruIndex::Erase(const TierKey& k) {
  auto it = map_.find(k);
  if (it == map_.end()) return;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.it);
  map_.erase(it);
}

// --- HostBlockTier

void HostBlockTier::Put(const TierKey& k, std::vector<uint8_t> bytes) {
  const int64_t n = static_cast<int64_t>(bytes.size());
  if (n > stats_.capacity_bytes || index_.Contains(k)) return;
  while (index_.bytes() + n > stats_.capacity_bytes) {
    const TierKey old = index_.Oldest();
    index_.Erase(old);
    data_.erase(old);
    ++stats_.evictions;
  }
  index_.Insert(k, n);
  data_[k] = std::move(bytes);
  ++stats_.stores;
  stats_.bytes = index_.bytes();
  stats_.blocks = index_.size();
}

const std::vector<uint8_t>* HostBlockTier::Get(const TierKey& k) {
  auto it = data_.find(k);
  if (it == data_.end()) return nullptr;
  index_.Touch(k);
  return &it->second;
}

// --- DiskBlockTier

DiskBlockTier::DiskBlockTier(const DiskTierOptions& opts) : opts_(opts) {
  char fp[17];
  std::snprintf(fp, sizeof(fp), "%016" PRIx64, opts.fingerprint);
  path_ = opts.dir + "/" + fp;
  stats_.capacity_bytes = opts.capacity_bytes;
}

StatusOr<std::unique_ptr<DiskBlockTier>> DiskBlockTier::Open(const DiskTierOptions& opts) {
  if (opts.dir.empty()) return InvalidArgument("prefix cache directory: empty path");
  if (opts.capacity_bytes <= 0) {
    return InvalidArgument("prefix cache directory %s: a disk bound of %" PRId64 " bytes",
                           opts.dir.c_str(), opts.capacity_bytes);
  }
  std::unique_ptr<DiskBlockTier> t(new DiskBlockTier(opts));
  MIMO_RETURN_IF_ERROR(MakeDirs(t->path_));
  MIMO_RETURN_IF_ERROR(t->Scan());
  t->writer_ = std::thread([p = t.get()] { p->WriterLoop(); });
  return t;
}

Status DiskBlockTier::Scan() {
  DIR* d = ::opendir(path_.c_str());
  if (d == nullptr) {
    return InvalidArgument("prefix cache directory %s: cannot read: %s", path_.c_str(),
                           std::strerror(errno));
  }
  struct Found {
    TierKey key;
    int64_t bytes;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  const time_t now = std::time(nullptr);
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const std::string full = path_ + "/" + name;
    struct stat st;
    if (::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (name.rfind(".part-", 0) == 0) {
      // Left by a writer that died (a live one renames it within milliseconds).
      if (now - st.st_mtime > 3600) ::unlink(full.c_str());
      continue;
    }
    TierKey k;
    if (!ParseFileName(name.c_str(), &k)) continue;
    found.push_back({k, static_cast<int64_t>(st.st_size),
                     int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec});
  }
  ::closedir(d);
  // Oldest first, so the newest end up most recently used.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::lock_guard<std::mutex> lock(mu_);
  for (const Found& f : found) index_.Insert(f.key, f.bytes);
  EvictToBound();
  return Status::Ok();
}

DiskBlockTier::~DiskBlockTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string DiskBlockTier::FileName(const TierKey& k) const {
  char name[64];
  std::snprintf(name, sizeof(name), "g%d-%016" PRIx64 ".kvb", k.group, k.hash);
  return name;
}

bool DiskBlockTier::Contains(const TierKey& k) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.Contains(k) || queued_.count(k) > 0;
}

void DiskBlockTier::Reject(const TierKey& k, const char* why) {
  const std::string file = path_ + "/" + FileName(k);
  MIMO_LOG_WARN("prefix cache: %s: %s; the file is removed and the block recomputed",
                file.c_str(), why);
  ::unlink(file.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  index_.Erase(k);
  ++stats_.rejected;
  stats_.bytes = index_.bytes();
  stats_.blocks = index_.size();
}

bool DiskBlockTier::Read(const TierKey& k, uint8_t* out, int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto q = queued_.find(k);
    if (q != queued_.end()) {  // not written yet: serve the queued copy
      if (static_cast<int64_t>(q->second->size()) != bytes) return false;
      std::memcpy(out, q->second->data(), bytes);
      return true;
    }
    if (!index_.Contains(k)) return false;
    index_.Touch(k);
  }
  const std::string file = path_ + "/" + FileName(k);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {  // removed by another process sharing the directory
    std::lock_guard<std::mutex> lock(mu_);
    index_.Erase(k);
    return false;
  }
  FileHeader h;
  struct stat st;
  const char* why = nullptr;
  if (::fstat(fd, &st) != 0 || st.st_size != kHeaderBytes + bytes) {
    why = "wrong size (truncated, or another layout)";
  } else if (!ReadAll(fd, reinterpret_cast<uint8_t*>(&h), sizeof(h))) {
    why = "unreadable header";
  } else if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    why = "not a mimo KV block file";
  } else if (h.header_checksum != HeaderChecksum(h)) {
    why = "header checksum mismatch";
  } else if (h.version != kFormatVersion) {
    why = "another format version";
  } else if (h.fingerprint != opts_.fingerprint) {
    why = "written for another checkpoint or KV layout (fingerprint mismatch)";
  } else if (static_cast<int>(h.group) != k.group || h.hash != k.hash ||
             static_cast<int64_t>(h.payload_bytes) != bytes) {
    why = "header names another block";
  } else if (!ReadAll(fd, out, static_cast<size_t>(bytes))) {
    why = "unreadable payload";
  } else if (Checksum64(out, static_cast<size_t>(bytes)) != h.payload_checksum) {
    why = "payload checksum mismatch";
  }
  ::close(fd);
  if (why != nullptr) {
    Reject(k, why);
    return false;
  }
  ::utimensat(AT_FDCWD, file.c_str(), nullptr, 0);  // recency survives a restart
  return true;
}

bool DiskBlockTier::Write(const TierKey& k, std::vector<uint8_t> bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  if (index_.Contains(k) || queued_.count(k) > 0) return true;
  const int64_t n = static_cast<int64_t>(bytes.size());
  if (n + kHeaderBytes > opts_.capacity_bytes) return false;
  if (queued_bytes_ + n > opts_.max_pending_bytes) {
    ++stats_.dropped;
    return false;
  }
  queue_.push_back(Job{k, std::move(bytes)});
  queued_[k] = &queue_.back().bytes;
  queued_bytes_ += n;
  lock.unlock();
  cv_.notify_one();
  return true;
}

void DiskBlockTier::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

bool DiskBlockTier::WriteFile(const TierKey& k, const std::vector<uint8_t>& bytes) {
  static std::atomic<uint64_t> counter{0};
  char part[64];
  std::snprintf(part, sizeof(part), "/.part-%d-%" PRIu64, static_cast<int>(::getpid()),
                counter.fetch_add(1));
  const std::string tmp = path_ + part;
  const std::string file = path_ + "/" + FileName(k);
  FileHeader h;
  std::memset(&h, 0, sizeof(h));
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kFormatVersion;
  h.group = static_cast<uint32_t>(k.group);
  h.fingerprint = opts_.fingerprint;
  h.hash = k.hash;
  h.payload_bytes = bytes.size();
  h.payload_checksum = Checksum64(bytes.data(), bytes.size());
  h.header_checksum = HeaderChecksum(h);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = WriteAll(fd, reinterpret_cast<const uint8_t*>(&h), sizeof(h)) &&
                  WriteAll(fd, bytes.data(), bytes.size());
  if (::close(fd) != 0 || !ok || ::rename(tmp.c_str(), file.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

void DiskBlockTier::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  bool warned = false;
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stop_ and nothing left to write
    Job& job = queue_.front();  // stays queued (and readable) while it is written
    writing_ = true;
    lock.unlock();
    const bool ok = WriteFile(job.key, job.bytes);
    if (!ok && !warned) {
      MIMO_LOG_WARN("prefix cache: cannot write blocks under %s: %s", path_.c_str(),
                    std::strerror(errno));
      warned = true;
    }
    lock.lock();
    if (ok) {
      index_.Insert(job.key, kHeaderBytes + static_cast<int64_t>(job.bytes.size()));
      ++stats_.stores;
      EvictToBound();
    }
    queued_.erase(job.key);
    queued_bytes_ -= static_cast<int64_t>(job.bytes.size());
    queue_.pop_front();
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void DiskBlockTier::EvictToBound() {
  while (index_.bytes() > opts_.capacity_bytes && index_.size() > 0) {
    const TierKey old = index_.Oldest();
    ::unlink((path_ + "/" + FileName(old)).c_str());
    index_.Erase(old);
    ++stats_.evictions;
  }
  stats_.bytes = index_.bytes();
  stats_.blocks = index_.size();
}

BlockTierStats DiskBlockTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DiskBlockTier::AddLoadStats(int64_t hit_tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.loads;
  stats_.hit_tokens += hit_tokens;
  stats_.load_seconds += seconds;
}

}  // namespace mimo
