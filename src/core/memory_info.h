// How much memory this process may still take (MemAvailable, and the memory cgroup's limit less
// its usage, cgroup v2 or v1), and the choice it feeds: copy the weights into anonymous memory or
// serve them from the file mapping (`--weights-memory copy|mmap|auto`).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace mimo {

// A snapshot of the memory available to the process. Plain data; -1 means unknown / no limit.
struct MemoryInfo {
  int64_t mem_available = -1;  // /proc/meminfo MemAvailable (the whole machine, or the container)
  // The cgroup level (the process's own or an ancestor) that leaves the least room: its limit,
  // its usage less the inactive file cache the kernel reclaims first, and its limit file.
  int64_t cgroup_limit = -1;
  int64_t cgroup_usage = -1;
  std::string cgroup_file;  // e.g. /sys/fs/cgroup/memory/x/memory.limit_in_bytes
  int cgroup_version = 0;   // 1 or 2 when a limit was found

  int64_t cgroup_room() const {
    return cgroup_limit < 0 ? -1 : std::max<int64_t>(0, cgroup_limit - cgroup_usage);
  }
  // min(MemAvailable, cgroup room) over what is known; -1 when neither is.
  int64_t available() const;
  // What bounds available(): "cgroup memory limit" or "MemAvailable".
  const char* source() const;
};

// Reads a file's whole text, nullopt when it cannot be read (tests pass sample texts).
using FileReader = std::function<std::optional<std::string>(const std::string& path)>;

// The pieces, exposed for tests. ParseMemAvailable: bytes of "MemAvailable: N kB".
std::optional<int64_t> ParseMemAvailable(std::string_view meminfo);
// "max" or a v1 "unlimited" value (>= 2^60) -> nullopt; a byte count otherwise; junk -> nullopt.
std::optional<int64_t> ParseCgroupLimit(std::string_view text);
// The value of `key` ("inactive_file", "total_inactive_file") in a memory.stat text.
std::optional<int64_t> ParseMemoryStat(std::string_view stat, std::string_view key);

// Where the memory controller is mounted (from /proc/self/mountinfo) and where this process sits
// in it (from /proc/self/cgroup); empty strings where absent.
struct CgroupLocation {
  std::string v2_mount, v2_root, v2_path;  // root: the mount's root within the hierarchy
  std::string v1_mount, v1_root, v1_path;  // the v1 hierarchy that has the memory controller
};
CgroupLocation ParseCgroupLocation(std::string_view mountinfo, std::string_view proc_self_cgroup);

// The probe over `read` (paths under /proc and /sys/fs/cgroup). Walks from the process's cgroup
// up to the mount's root, so a limit set on an ancestor (a container's, a systemd slice's) counts;
// levels whose files cannot be read (a host path seen from inside a container) are skipped.
MemoryInfo ProbeMemoryInfo(const FileReader& read);
MemoryInfo ProbeMemoryInfo();  // the real files

// --weights-memory: copy (into anonymous memory, 2 MiB pages: fastest decode), mmap (serve from
// the file mapping, i.e. the page cache: works when the weights exceed memory, slower) or auto.
enum class WeightsMemory { kCopy, kMmap, kAuto, kCount };
StatusOr<WeightsMemory> ParseWeightsMemory(std::string_view s);
const char* WeightsMemoryName(WeightsMemory m);

// The decision for weights of `weights_bytes` beside a KV cache of `kv_bytes`, given `mem`.
// auto copies only when weights + KV + margin fit (margin: 512 MiB + 2% of the weights, for the
// engine's other buffers and the page cache everything else needs), and never otherwise. An
// explicit copy is refused when weights + KV alone exceed what is available (the copy would be
// killed by the OOM killer part way), and goes ahead with a warning when only the margin is
// missing. Unknown availability: copy (the behaviour before the probe existed).
struct WeightsMemoryChoice {
  bool copy = true;
  bool refused = false;    // an explicit copy that cannot fit: the caller stops with `message`
  std::string message;     // empty when there is nothing to say (fits, or mmap asked for)
  int64_t needed = 0;      // weights + KV + margin
  int64_t available = -1;  // mem.available()
};
int64_t WeightsMemoryMargin(int64_t weights_bytes);
WeightsMemoryChoice ChooseWeightsMemory(WeightsMemory mode, int64_t weights_bytes, int64_t kv_bytes,
                                        const MemoryInfo& mem);

}  // namespace mimo
