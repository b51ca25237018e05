// Checkpoint fingerprint (see checkpoint_fingerprint.h).
#include "io/checkpoint_fingerprint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace mimo {
namespace {

// FNV-1a over 64-bit lanes is enough here: the fingerprint tells checkpoints apart, it does not
// defend against an adversary.
struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void Add(const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  void AddU64(uint64_t v) { Add(&v, sizeof(v)); }
};

Status AddFileRange(Fnv& f, std::FILE* fp, int64_t offset, int64_t n, const std::string& path) {
  std::vector<char> buf(static_cast<size_t>(std::max<int64_t>(n, 0)));
  if (n <= 0) return Status::Ok();
  if (std::fseek(fp, offset, SEEK_SET) != 0 || std::fread(buf.data(), 1, buf.size(), fp) != buf.size()) {
    return InvalidArgument("checkpoint fingerprint: cannot read %s", path.c_str());
  }
  f.Add(buf.data(), buf.size());
  return Status::Ok();
}

}  // namespace

StatusOr<uint64_t> CheckpointFingerprint(const std::string& dir) {
  std::vector<std::string> shards;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return InvalidArgument("checkpoint fingerprint: cannot read %s", dir.c_str());
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) {
      shards.push_back(name);
    }
  }
  ::closedir(d);
  std::sort(shards.begin(), shards.end());
  Fnv f;
  std::vector<std::string> files = {"config.json"};
  files.insert(files.end(), shards.begin(), shards.end());
  constexpr int64_t kMiB = 1 << 20;
  for (const std::string& name : files) {
    const std::string path = dir + "/" + name;
    std::FILE* fp = std::fopen(path.c_str(), "rb");
    if (fp == nullptr) {
      return InvalidArgument("checkpoint fingerprint: cannot open %s", path.c_str());
    }
    struct stat st;
    if (::fstat(fileno(fp), &st) != 0) {
      std::fclose(fp);
      return InvalidArgument("checkpoint fingerprint: cannot stat %s", path.c_str());
    }
    const int64_t size = st.st_size;
    f.Add(name.data(), name.size());
    f.AddU64(static_cast<uint64_t>(size));
    Status s = Status::Ok();
    if (name == "config.json" || size <= 4 * kMiB) {
      s = AddFileRange(f, fp, 0, size, path);
    } else {
      // The safetensors header (8-byte length + JSON) is in the first MiB for any real shard.
      s = AddFileRange(f, fp, 0, kMiB, path);
      if (s.ok()) s = AddFileRange(f, fp, size - kMiB, kMiB, path);
    }
    std::fclose(fp);
    if (!s.ok()) return s;
  }
  return f.h;
}

}  // namespace mimo
