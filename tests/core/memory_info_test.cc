// The memory probe on sample /proc and cgroup texts (v1, v2, a container's host path, limits on
// ancestors), and the --weights-memory decision.
#include "core/memory_info.h"

#include <gtest/gtest.h>

#include <map>

namespace mimo {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

const char* kMeminfo =
    "MemTotal:       24683520 kB\n"
    "MemFree:        21273600 kB\n"
    "MemAvailable:   23592960 kB\n"
    "Buffers:          123456 kB\n";

// A cgroup v1 machine with a hybrid v2 mount (no memory controller there), as on Docker hosts.
const char* kMountinfoV1 =
    "25 24 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    "30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "31 25 0:28 / /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory\n";
const char* kMountinfoV2 =
    "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

std::optional<std::string> Lookup(const std::map<std::string, std::string>& files,
                                  const std::string& path) {
  auto it = files.find(path);
  if (it == files.end()) return std::nullopt;
  return it->second;
}

TEST(MemoryInfo, ParsesMemAvailable) {
  EXPECT_EQ(ParseMemAvailable(kMeminfo).value_or(-1), int64_t{23592960} * 1024);
  EXPECT_FALSE(ParseMemAvailable("MemTotal: 5 kB\n").has_value());
  EXPECT_FALSE(ParseMemAvailable("MemAvailable: lots kB\n").has_value());
}

TEST(MemoryInfo, ParsesLimits) {
  EXPECT_EQ(ParseCgroupLimit("209715200\n").value_or(-1), 209715200);
  EXPECT_FALSE(ParseCgroupLimit("max\n").has_value());
  EXPECT_FALSE(ParseCgroupLimit("9223372036854771712\n").has_value());  // v1's "no limit"
  EXPECT_FALSE(ParseCgroupLimit("99999999999999999999999\n").has_value());
  EXPECT_FALSE(ParseCgroupLimit("").has_value());
  EXPECT_FALSE(ParseCgroupLimit("-1").has_value());
  const char* stat = "cache 100\ninactive_file 4096\ntotal_inactive_file 8192\n";
  EXPECT_EQ(ParseMemoryStat(stat, "inactive_file").value_or(-1), 4096);
  EXPECT_EQ(ParseMemoryStat(stat, "total_inactive_file").value_or(-1), 8192);
  EXPECT_FALSE(ParseMemoryStat(stat, "active_file").has_value());
}

TEST(MemoryInfo, LocatesCgroups) {
  const CgroupLocation v1 = ParseCgroupLocation(
      kMountinfoV1, "9:name=systemd:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/\n0::/\n");
  EXPECT_EQ(v1.v1_mount, "/sys/fs/cgroup/memory");
  EXPECT_EQ(v1.v1_path, "/process_api/abc");
  EXPECT_EQ(v1.v2_mount, "/sys/fs/cgroup/unified");
  EXPECT_EQ(v1.v2_path, "/");
  const CgroupLocation v2 = ParseCgroupLocation(kMountinfoV2, "0::/user.slice/run-1.scope\n");
  EXPECT_EQ(v2.v2_mount, "/sys/fs/cgroup");
  EXPECT_EQ(v2.v2_path, "/user.slice/run-1.scope");
  EXPECT_TRUE(v2.v1_mount.empty());
  // Several controllers on one v1 hierarchy.
  const CgroupLocation both = ParseCgroupLocation(
      "40 25 0:40 / /cg rw - cgroup cgroup rw,cpu,memory\n", "7:cpu,memory:/job\n");
  EXPECT_EQ(both.v1_mount, "/cg");
  EXPECT_EQ(both.v1_path, "/job");
}

TEST(MemoryInfo, CgroupV1LimitMinusUsageLessInactiveFiles) {
  std::map<std::string, std::string> f = {
      {"/proc/meminfo", kMeminfo},
      {"/proc/self/mountinfo", kMountinfoV1},
      {"/proc/self/cgroup", "4:memory:/mimo_test\n0::/\n"},
      {"/sys/fs/cgroup/memory/mimo_test/memory.limit_in_bytes", "209715200\n"},
      {"/sys/fs/cgroup/memory/mimo_test/memory.usage_in_bytes", "62914560\n"},
      {"/sys/fs/cgroup/memory/mimo_test/memory.stat",
       "inactive_file 1\ntotal_inactive_file 10485760\n"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"},
      {"/sys/fs/cgroup/memory/memory.usage_in_bytes", "2711900160\n"},
  };
  const MemoryInfo m = ProbeMemoryInfo([&](const std::string& p) { return Lookup(f, p); });
  EXPECT_EQ(m.cgroup_version, 1);
  EXPECT_EQ(m.cgroup_limit, 200 * kMiB);
  EXPECT_EQ(m.cgroup_usage, 50 * kMiB);
  EXPECT_EQ(m.available(), 150 * kMiB);
  EXPECT_STREQ(m.source(), "cgroup memory limit");
  EXPECT_EQ(m.cgroup_file, "/sys/fs/cgroup/memory/mimo_test/memory.limit_in_bytes");
}

TEST(MemoryInfo, CgroupV2TightestAncestorWins) {
  // The scope has no limit ("max"); its slice has 1 GiB with 900 MiB used; the root has no files.
  std::map<std::string, std::string> f = {
      {"/proc/meminfo", kMeminfo},
      {"/proc/self/mountinfo", kMountinfoV2},
      {"/proc/self/cgroup", "0::/work.slice/run-7.scope\n"},
      {"/sys/fs/cgroup/work.slice/run-7.scope/memory.max", "max\n"},
      {"/sys/fs/cgroup/work.slice/run-7.scope/memory.current", "104857600\n"},
      {"/sys/fs/cgroup/work.slice/memory.max", "1073741824\n"},
      {"/sys/fs/cgroup/work.slice/memory.current", "943718400\n"},
      {"/sys/fs/cgroup/work.slice/memory.stat", "anon 5\ninactive_file 0\n"},
  };
  const MemoryInfo m = ProbeMemoryInfo([&](const std::string& p) { return Lookup(f, p); });
  EXPECT_EQ(m.cgroup_version, 2);
  EXPECT_EQ(m.available(), 124 * kMiB);
  EXPECT_EQ(m.cgroup_file, "/sys/fs/cgroup/work.slice/memory.max");
}

TEST(MemoryInfo, ContainerSeesHostPathAndOwnRoot) {
  // Without a cgroup namespace the container reads the host's path, but its mount is its own
  // cgroup: the host path does not exist under the mount and the mount's root level applies.
  std::map<std::string, std::string> f = {
      {"/proc/meminfo", kMeminfo},
      {"/proc/self/mountinfo", kMountinfoV1},
      {"/proc/self/cgroup", "4:memory:/docker/0123abcd\n"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n"},
      {"/sys/fs/cgroup/memory/memory.usage_in_bytes", "134217728\n"},
  };
  const MemoryInfo m = ProbeMemoryInfo([&](const std::string& p) { return Lookup(f, p); });
  EXPECT_EQ(m.available(), 384 * kMiB);
  // Same with the mount's root naming the container's cgroup (bind-mounted subtree).
  f["/proc/self/mountinfo"] =
      "31 25 0:28 /docker/0123abcd /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
  const MemoryInfo n = ProbeMemoryInfo([&](const std::string& p) { return Lookup(f, p); });
  EXPECT_EQ(n.available(), 384 * kMiB);
}

TEST(MemoryInfo, MemAvailableBoundsWhenNoCgroupLimit) {
  std::map<std::string, std::string> f = {
      {"/proc/meminfo", "MemAvailable: 1024 kB\n"},
      {"/proc/self/mountinfo", kMountinfoV1},
      {"/proc/self/cgroup", "4:memory:/\n"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"},
      {"/sys/fs/cgroup/memory/memory.usage_in_bytes", "1\n"},
  };
  const MemoryInfo m = ProbeMemoryInfo([&](const std::string& p) { return Lookup(f, p); });
  EXPECT_EQ(m.cgroup_limit, -1);
  EXPECT_EQ(m.available(), 1024 * 1024);
  EXPECT_STREQ(m.source(), "MemAvailable");
  const MemoryInfo none = ProbeMemoryInfo([](const std::string&) { return std::nullopt; });
  EXPECT_EQ(none.available(), -1);
}

TEST(MemoryInfo, RealProbeRuns) {
  const MemoryInfo m = ProbeMemoryInfo();
  EXPECT_GT(m.available(), 0);  // Linux always has /proc/meminfo
}

TEST(WeightsMemory, Parses) {
  EXPECT_EQ(ParseWeightsMemory("copy").value(), WeightsMemory::kCopy);
  EXPECT_EQ(ParseWeightsMemory("mmap").value(), WeightsMemory::kMmap);
  EXPECT_EQ(ParseWeightsMemory("auto").value(), WeightsMemory::kAuto);
  EXPECT_FALSE(ParseWeightsMemory("huge").ok());
}

TEST(WeightsMemory, AutoCopiesOnlyWhatFitsWithMargin) {
  MemoryInfo mem;
  mem.mem_available = 4000 * kMiB;
  const int64_t w = 1000 * kMiB, kv = 100 * kMiB;
  WeightsMemoryChoice c = ChooseWeightsMemory(WeightsMemory::kAuto, w, kv, mem);
  EXPECT_TRUE(c.copy);
  EXPECT_TRUE(c.message.empty());
  // Weights + KV fit, the margin does not: auto serves from the page cache and says why.
  mem.mem_available = w + kv + 100 * kMiB;
  c = ChooseWeightsMemory(WeightsMemory::kAuto, w, kv, mem);
  EXPECT_FALSE(c.copy);
  EXPECT_FALSE(c.refused);
  EXPECT_NE(c.message.find("weights 1.05 GB + KV cache 0.10 GB"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("--weights-memory mmap"), std::string::npos) << c.message;
  // ... an explicit copy goes ahead, with a warning.
  c = ChooseWeightsMemory(WeightsMemory::kCopy, w, kv, mem);
  EXPECT_TRUE(c.copy);
  EXPECT_FALSE(c.refused);
  EXPECT_FALSE(c.message.empty());
  // Weights alone exceed a cgroup's room: auto -> mmap; copy is refused, naming the shortfall.
  mem.cgroup_limit = 800 * kMiB;
  mem.cgroup_usage = 0;
  mem.cgroup_version = 1;
  mem.cgroup_file = "/sys/fs/cgroup/memory/t/memory.limit_in_bytes";
  c = ChooseWeightsMemory(WeightsMemory::kAuto, w, kv, mem);
  EXPECT_FALSE(c.copy);
  EXPECT_NE(c.message.find("0.84 GB available (cgroup memory limit"), std::string::npos)
      << c.message;
  c = ChooseWeightsMemory(WeightsMemory::kCopy, w, kv, mem);
  EXPECT_TRUE(c.refused);
  EXPECT_NE(c.message.find("by 0.31 GB"), std::string::npos) << c.message;
  // mmap is never questioned; unknown availability keeps the old behaviour (copy).
  EXPECT_FALSE(ChooseWeightsMemory(WeightsMemory::kMmap, w, kv, MemoryInfo{}).copy);
  EXPECT_TRUE(ChooseWeightsMemory(WeightsMemory::kAuto, w, kv, MemoryInfo{}).copy);
}

}  // namespace
}  // namespace mimo
