// The memory probe (/proc/meminfo, cgroup v2 memory.max / memory.current, cgroup v1
// memory.limit_in_bytes / memory.usage_in_bytes) and the --weights-memory decision.
#include "core/memory_info.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace mimo {
namespace {

constexpr int64_t kUnlimited = int64_t{1} << 60;  // v1 reports "no limit" as ~2^63 (page-rounded)

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t end = std::min(s.find(sep, pos), s.size());
    out.push_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<int64_t> ParseCount(std::string_view s) {
  s = Trim(s);
  if (s.empty() || s.size() > 20) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    if (v > (INT64_MAX - 9) / 10) return kUnlimited;  // beyond int64: no limit in practice
    v = v * 10 + (c - '0');
  }
  return v;
}

// "/a/b" -> "/a/b", "/a", "/" : the cgroup and its ancestors, innermost first.
std::vector<std::string> SelfAndAncestors(std::string path) {
  std::vector<std::string> out;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty()) path = "/";
  for (;;) {
    out.push_back(path);
    if (path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return out;
}

// `path` (from /proc/self/cgroup) relative to a mount whose root is `root`.
std::string RelativeTo(const std::string& path, const std::string& root) {
  if (root.empty() || root == "/") return path;
  if (path.compare(0, root.size(), root) == 0 &&
      (path.size() == root.size() || path[root.size()] == '/')) {
    const std::string rest = path.substr(root.size());
    return rest.empty() ? "/" : rest;
  }
  return path;
}

std::string Join(const std::string& mount, const std::string& rel) {
  return rel == "/" ? mount : mount + rel;
}

// Fills `best` from one hierarchy: the level with the least room wins.
void ProbeHierarchy(const FileReader& read, int version, const std::string& mount,
                    const std::string& root, const std::string& path, MemoryInfo* best) {
  if (mount.empty()) return;
  const char* limit_name = version == 2 ? "memory.max" : "memory.limit_in_bytes";
  const char* usage_name = version == 2 ? "memory.current" : "memory.usage_in_bytes";
  const char* inactive_key = version == 2 ? "inactive_file" : "total_inactive_file";
  for (const std::string& level : SelfAndAncestors(RelativeTo(path, root))) {
    const std::string dir = Join(mount, level);
    const auto limit_text = read(dir + "/" + limit_name);
    const auto usage_text = read(dir + "/" + usage_name);
    if (!limit_text || !usage_text) continue;
    const auto limit = ParseCgroupLimit(*limit_text);
    const auto usage = ParseCount(*usage_text);
    if (!limit || !usage) continue;
    int64_t used = *usage;
    if (const auto stat = read(dir + "/memory.stat")) {
      if (const auto inactive = ParseMemoryStat(*stat, inactive_key)) {
        used = std::max<int64_t>(0, used - *inactive);
      }
    }
    const int64_t room = std::max<int64_t>(0, *limit - used);
    if (best->cgroup_limit < 0 || room < best->cgroup_room()) {
      best->cgroup_limit = *limit;
      best->cgroup_usage = used;
      best->cgroup_file = dir + "/" + limit_name;
      best->cgroup_version = version;
    }
  }
}

std::string Gb(int64_t bytes) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(2);
  s << static_cast<double>(bytes) / 1e9 << " GB";
  return s.str();
}

std::string DescribeAvailable(const MemoryInfo& mem) {
  std::string s = Gb(mem.available()) + " available (" + mem.source();
  if (mem.cgroup_limit >= 0 && mem.available() == mem.cgroup_room()) {
    s += " " + Gb(mem.cgroup_limit) + " in " + mem.cgroup_file + ", " + Gb(mem.cgroup_usage) +
         " in use";
  }
  return s + ")";
}

}  // namespace

int64_t MemoryInfo::available() const {
  const int64_t room = cgroup_room();
  if (mem_available < 0) return room;
  if (room < 0) return mem_available;
  return std::min(mem_available, room);
}

const char* MemoryInfo::source() const {
  const int64_t room = cgroup_room();
  return room >= 0 && (mem_available < 0 || room <= mem_available) ? "cgroup memory limit"
                                                                   : "MemAvailable";
}

std::optional<int64_t> ParseMemAvailable(std::string_view meminfo) {
  for (std::string_view line : Split(meminfo, '\n')) {
    if (line.substr(0, 13) != "MemAvailable:") continue;
    std::string_view rest = Trim(line.substr(13));
    int64_t unit = 1;
    if (rest.size() > 2 && rest.substr(rest.size() - 2) == "kB") {
      unit = 1024;
      rest = Trim(rest.substr(0, rest.size() - 2));
    }
    const auto v = ParseCount(rest);
    if (!v) return std::nullopt;
    return *v * unit;
  }
  return std::nullopt;
}

std::optional<int64_t> ParseCgroupLimit(std::string_view text) {
  text = Trim(text);
  if (text == "max") return std::nullopt;
  const auto v = ParseCount(text);
  if (!v || *v >= kUnlimited) return std::nullopt;
  return v;
}

std::optional<int64_t> ParseMemoryStat(std::string_view stat, std::string_view key) {
  for (std::string_view line : Split(stat, '\n')) {
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.substr(0, sp) != key) continue;
    return ParseCount(line.substr(sp + 1));
  }
  return std::nullopt;
}

CgroupLocation ParseCgroupLocation(std::string_view mountinfo, std::string_view proc_self_cgroup) {
  CgroupLocation loc;
  // mountinfo: "id parent maj:min root mount_point options [optional...] - fstype source super".
  for (std::string_view line : Split(mountinfo, '\n')) {
    const size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    std::vector<std::string_view> f;
    for (std::string_view x : Split(line.substr(0, dash), ' ')) {
      if (!x.empty()) f.push_back(x);
    }
    std::vector<std::string_view> tail;
    for (std::string_view x : Split(line.substr(dash + 3), ' ')) {
      if (!x.empty()) tail.push_back(x);
    }
    if (f.size() < 5 || tail.size() < 3) continue;
    if (tail[0] == "cgroup2" && loc.v2_mount.empty()) {
      loc.v2_mount = std::string(f[4]);
      loc.v2_root = std::string(f[3]);
    } else if (tail[0] == "cgroup" && loc.v1_mount.empty()) {
      for (std::string_view opt : Split(tail[2], ',')) {
        if (opt == "memory") {
          loc.v1_mount = std::string(f[4]);
          loc.v1_root = std::string(f[3]);
        }
      }
    }
  }
  // /proc/self/cgroup: "hierarchy-id:controllers:path"; "0::path" is the v2 hierarchy.
  for (std::string_view line : Split(proc_self_cgroup, '\n')) {
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path(Trim(line.substr(c2 + 1)));
    if (line.substr(0, c1) == "0" && controllers.empty()) {
      loc.v2_path = path;
      continue;
    }
    for (std::string_view c : Split(controllers, ',')) {
      if (c == "memory") loc.v1_path = path;
    }
  }
  return loc;
}

MemoryInfo ProbeMemoryInfo(const FileReader& read) {
  MemoryInfo mem;
  if (const auto meminfo = read("/proc/meminfo")) {
    mem.mem_available = ParseMemAvailable(*meminfo).value_or(-1);
  }
  CgroupLocation loc = ParseCgroupLocation(read("/proc/self/mountinfo").value_or(""),
                                           read("/proc/self/cgroup").value_or(""));
  if (loc.v2_mount.empty() && loc.v1_mount.empty()) {  // no mountinfo: the usual places
    loc.v2_mount = "/sys/fs/cgroup";
    loc.v1_mount = "/sys/fs/cgroup/memory";
  }
  if (!loc.v2_path.empty()) ProbeHierarchy(read, 2, loc.v2_mount, loc.v2_root, loc.v2_path, &mem);
  if (!loc.v1_path.empty()) ProbeHierarchy(read, 1, loc.v1_mount, loc.v1_root, loc.v1_path, &mem);
  return mem;
}

MemoryInfo ProbeMemoryInfo() {
  return ProbeMemoryInfo([](const std::string& path) -> std::optional<std::string> {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::ostringstream s;
    s << in.rdbuf();
    if (in.bad()) return std::nullopt;
    return s.str();
  });
}

StatusOr<WeightsMemory> ParseWeightsMemory(std::string_view s) {
  for (int i = 0; i < static_cast<int>(WeightsMemory::kCount); ++i) {
    const auto m = static_cast<WeightsMemory>(i);
    if (s == WeightsMemoryName(m)) return m;
  }
  return InvalidArgument("--weights-memory must be copy, mmap or auto, got '%s'",
                         std::string(s).c_str());
}

const char* WeightsMemoryName(WeightsMemory m) {
  switch (m) {
    case WeightsMemory::kCopy:
      return "copy";
    case WeightsMemory::kMmap:
      return "mmap";
    case WeightsMemory::kAuto:
      return "auto";
    case WeightsMemory::kCount:
      break;
  }
  return "?";
}

int64_t WeightsMemoryMargin(int64_t weights_bytes) {
  return (int64_t{512} << 20) + weights_bytes / 50;
}

WeightsMemoryChoice ChooseWeightsMemory(WeightsMemory mode, int64_t weights_bytes, int64_t kv_bytes,
                                        const MemoryInfo& mem) {
  WeightsMemoryChoice c;
  c.available = mem.available();
  const int64_t margin = WeightsMemoryMargin(weights_bytes);
  c.needed = weights_bytes + kv_bytes + margin;
  if (mode == WeightsMemory::kMmap) {
    c.copy = false;
    return c;
  }
  if (c.available < 0 || c.needed <= c.available) return c;  // fits, or nothing known
  const std::string what = "weights " + Gb(weights_bytes) + " + KV cache " + Gb(kv_bytes);
  if (mode == WeightsMemory::kAuto) {
    c.copy = false;
    c.message = what + " + margin " + Gb(margin) + " exceed the " + DescribeAvailable(mem) +
                " by " + Gb(c.needed - c.available) +
                ": serving the weights from the page cache (--weights-memory mmap), expect "
                "slower decode";
    return c;
  }
  if (weights_bytes + kv_bytes > c.available) {
    c.refused = true;
    c.message = "--weights-memory copy: " + what + " exceed the " + DescribeAvailable(mem) +
                " by " + Gb(weights_bytes + kv_bytes - c.available) +
                ": the copy cannot fit; use --weights-memory mmap (or auto) to serve the weights "
                "from the page cache";
    return c;
  }
  c.message = what + " leave " + Gb(c.available - weights_bytes - kv_bytes) + " of the " +
              DescribeAvailable(mem) +
              " for everything else: copying as asked (--weights-memory copy; auto would serve "
              "the weights from the page cache)";
  return c;
}

}  // namespace mimo
