// The prefix cache's RAM and disk stores: LRU within their byte bounds, blocks that survive a
// restart, and fault injection on the files (a flipped byte, a truncated file, a foreign
// fingerprint, a forged header, a writer killed mid-write, two writers on one directory): a bad
// file is never served, it is reported and removed.
#include "kv/block_tiers.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

namespace mimo {
namespace {

namespace fs = std::filesystem;

// Content derived from the key, so any block read back can be checked on its own.
std::vector<uint8_t> Content(const TierKey& k, size_t n) {
  std::vector<uint8_t> v(n);
  uint64_t x = k.hash * 0x9e3779b97f4a7c15ull + k.group;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

std::string TempDir(const char* name) {
  const fs::path p = fs::temp_directory_path() /
                     (std::string("mimo-tiers-") + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::unique_ptr<DiskBlockTier> OpenDisk(const std::string& dir, int64_t capacity,
                                        uint64_t fingerprint = 0xfeedull) {
  DiskTierOptions o;
  o.dir = dir;
  o.capacity_bytes = capacity;
  o.fingerprint = fingerprint;
  auto d = DiskBlockTier::Open(o);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return d.ok() ? std::move(d).value() : nullptr;
}

TEST(Checksum64, EveryFlippedBitChangesIt) {
  std::vector<uint8_t> v = Content({0, 7}, 301);  // lanes and a tail
  const uint64_t base = Checksum64(v.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      v[i] ^= static_cast<uint8_t>(1 << bit);
      ASSERT_NE(Checksum64(v.data(), v.size()), base) << "byte " << i << " bit " << bit;
      v[i] ^= static_cast<uint8_t>(1 << bit);
    }
  }
  EXPECT_NE(Checksum64(v.data(), v.size() - 1), base);  // a truncation too
}

TEST(HostBlockTier, KeepsTheMostRecentlyUsedWithinItsBound) {
  HostBlockTier ram(350);
  for (uint64_t h = 1; h <= 3; ++h) ram.Put({0, h}, Content({0, h}, 100));
  ASSERT_NE(ram.Get({0, 1}), nullptr);  // 1 is now the most recent: 2 goes first
  ram.Put({1, 4}, Content({1, 4}, 100));
  EXPECT_FALSE(ram.Contains({0, 2}));
  EXPECT_TRUE(ram.Contains({0, 1}));
  EXPECT_TRUE(ram.Contains({0, 3}));
  EXPECT_FALSE(ram.Contains({0, 4}));  // the group is part of the name
  ASSERT_NE(ram.Get({1, 4}), nullptr);
  EXPECT_EQ(*ram.Get({1, 4}), Content({1, 4}, 100));
  EXPECT_LE(ram.stats().bytes, 350);
  EXPECT_EQ(ram.stats().blocks, 3);
  EXPECT_EQ(ram.stats().evictions, 1);
  ram.Put({0, 9}, std::vector<uint8_t>(351));  // larger than the bound: not kept
  EXPECT_FALSE(ram.Contains({0, 9}));
  EXPECT_EQ(ram.stats().blocks, 3);
}

TEST(DiskBlockTier, BlocksSurviveARestart) {
  const std::string dir = TempDir("restart");
  {
    auto d = OpenDisk(dir, 1 << 20);
    ASSERT_NE(d, nullptr);
    for (uint64_t h = 1; h <= 5; ++h) ASSERT_TRUE(d->Write({int(h % 2), h}, Content({int(h % 2), h}, 1000)));
    // Queued blocks are served before they reach the disk.
    std::vector<uint8_t> out(1000);
    EXPECT_TRUE(d->Read({1, 5}, out.data(), 1000));
    EXPECT_EQ(out, Content({1, 5}, 1000));
  }  // the destructor writes what is queued
  auto d = OpenDisk(dir, 1 << 20);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->stats().blocks, 5);
  for (uint64_t h = 1; h <= 5; ++h) {
    const TierKey k{int(h % 2), h};
    ASSERT_TRUE(d->Contains(k));
    std::vector<uint8_t> out(1000);
    ASSERT_TRUE(d->Read(k, out.data(), 1000)) << h;
    EXPECT_EQ(out, Content(k, 1000));
  }
  EXPECT_FALSE(d->Contains({0, 1}));  // written as group 1
  // Another fingerprint (another checkpoint or layout) sees none of them.
  auto other = OpenDisk(dir, 1 << 20, 0xbeefull);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->stats().blocks, 0);
  fs::remove_all(dir);
}

TEST(DiskBlockTier, EvictsTheLeastRecentlyUsedFilesPastItsBound) {
  const std::string dir = TempDir("bound");
  const int64_t file = DiskBlockTier::kHeaderBytes + 1000;
  auto d = OpenDisk(dir, 3 * file);
  ASSERT_NE(d, nullptr);
  for (uint64_t h = 1; h <= 3; ++h) d->Write({0, h}, Content({0, h}, 1000));
  d->Flush();
  std::vector<uint8_t> out(1000);
  ASSERT_TRUE(d->Read({0, 1}, out.data(), 1000));  // 1 is recent now; 2 is the oldest
  d->Write({0, 4}, Content({0, 4}, 1000));
  d->Flush();
  EXPECT_TRUE(d->Contains({0, 1}));
  EXPECT_FALSE(d->Contains({0, 2}));
  EXPECT_TRUE(d->Contains({0, 4}));
  EXPECT_FALSE(fs::exists(d->path() + "/" + d->FileName({0, 2})));
  EXPECT_EQ(d->stats().evictions, 1);
  int64_t on_disk = 0;
  for (const auto& e : fs::directory_iterator(d->path())) on_disk += e.file_size();
  EXPECT_LE(on_disk, 3 * file);
  fs::remove_all(dir);
}

// Each kind of damage: the block is not served, the file is removed, the tier says why.
TEST(DiskBlockTier, ADamagedOrForeignFileIsSkippedAndRemoved) {
  const std::string dir = TempDir("damage");
  const TierKey k{1, 0x1234};
  const std::vector<uint8_t> want = Content(k, 4096);
  struct Damage {
    const char* name;
    std::function<void(const std::string& file, const std::string& foreign_file)> apply;
  };
  const Damage damages[] = {
      {"flipped payload byte",
       [](const std::string& f, const std::string&) {
         std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
         s.seekp(DiskBlockTier::kHeaderBytes + 1000);
         char c;
         s.seekg(DiskBlockTier::kHeaderBytes + 1000);
         s.get(c);
         s.seekp(DiskBlockTier::kHeaderBytes + 1000);
         s.put(static_cast<char>(c ^ 0x10));
       }},
      {"flipped header byte",
       [](const std::string& f, const std::string&) {
         std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
         s.seekp(13);
         s.put('\x7f');
       }},
      {"truncated", [](const std::string& f, const std::string&) { fs::resize_file(f, 2000); }},
      {"empty", [](const std::string& f, const std::string&) { fs::resize_file(f, 0); }},
      {"another fingerprint's file under this name",
       [](const std::string& f, const std::string& foreign) {
         fs::copy_file(foreign, f, fs::copy_options::overwrite_existing);
       }},
  };
  // A file for the same key written under another fingerprint (another checkpoint).
  std::string foreign_file;
  {
    auto other = OpenDisk(dir, 1 << 20, 0xabcdull);
    other->Write(k, want);
    other->Flush();
    foreign_file = other->path() + "/" + other->FileName(k);
  }
  for (const Damage& dmg : damages) {
    {
      auto d = OpenDisk(dir, 1 << 20);
      d->Write(k, want);
    }
    auto d = OpenDisk(dir, 1 << 20);
    const std::string file = d->path() + "/" + d->FileName(k);
    ASSERT_TRUE(fs::exists(file));
    dmg.apply(file, foreign_file);
    ASSERT_TRUE(d->Contains(k)) << dmg.name;  // the index does not know yet
    std::vector<uint8_t> out(want.size(), 0);
    EXPECT_FALSE(d->Read(k, out.data(), static_cast<int64_t>(out.size()))) << dmg.name;
    EXPECT_FALSE(d->Contains(k)) << dmg.name;
    EXPECT_FALSE(fs::exists(file)) << dmg.name;
    EXPECT_EQ(d->stats().rejected, 1) << dmg.name;
  }
  // A block asked for with another size (another layout) is not served either.
  {
    auto d = OpenDisk(dir, 1 << 20);
    d->Write(k, want);
    d->Flush();
    std::vector<uint8_t> out(want.size() + 64);
    EXPECT_FALSE(d->Read(k, out.data(), static_cast<int64_t>(out.size())));
  }
  fs::remove_all(dir);
}

// kill -9 of a process in the middle of writing blocks: whatever a restart indexes is whole and
// correct; the torn write is a .part file no reader opens.
TEST(DiskBlockTier, AWriterKilledMidWriteLeavesNothingReadAsValid) {
  const std::string dir = TempDir("kill");
  const size_t n = 64 * 1024;
  std::string path;
  {
    auto d = OpenDisk(dir, int64_t{1} << 30);
    path = d->path();
  }
  for (int round = 0; round < 3; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      DiskTierOptions o;
      o.dir = dir;
      o.capacity_bytes = int64_t{1} << 30;
      o.fingerprint = 0xfeedull;
      auto d = DiskBlockTier::Open(o);
      if (!d.ok()) ::_exit(3);
      for (uint64_t h = 1;; ++h) {
        const TierKey k{0, uint64_t(round) << 32 | h};
        (*d)->Write(k, Content(k, n));
        (*d)->Flush();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + 100 * round));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
  }
  // A torn file with a final name (a crash after rename is not possible; a disk that lost the
  // tail of a renamed file is): rejected by size.
  {
    const TierKey torn{0, 0x7777};
    std::vector<uint8_t> bytes = Content(torn, n);
    auto d = OpenDisk(dir, int64_t{1} << 30);
    d->Write(torn, bytes);
    d->Flush();
    fs::resize_file(d->path() + "/" + d->FileName(torn), DiskBlockTier::kHeaderBytes + n / 2);
  }
  auto d = OpenDisk(dir, int64_t{1} << 30);
  ASSERT_NE(d, nullptr);
  int valid = 0, part = 0;
  for (const auto& e : fs::directory_iterator(path)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".part-", 0) == 0) {
      ++part;
      continue;
    }
    unsigned g = 0;
    unsigned long long h = 0;
    ASSERT_EQ(std::sscanf(name.c_str(), "g%u-%16llx.kvb", &g, &h), 2) << name;
    const TierKey k{int(g), h};
    std::vector<uint8_t> out(n);
    if (d->Read(k, out.data(), n)) {
      EXPECT_EQ(out, Content(k, n)) << name;
      ++valid;
    } else {
      EXPECT_EQ(h, 0x7777u) << name << " was rejected";
    }
  }
  EXPECT_GT(valid, 0);
  EXPECT_EQ(d->stats().rejected, 1);  // the torn file only
  // .part files are never indexed: the index holds the valid files only.
  EXPECT_EQ(d->stats().blocks, valid);
  std::printf("killed writers left %d whole blocks and %d .part files\n", valid, part);
  fs::remove_all(dir);
}

// Two processes (here two tiers) writing the same and different blocks into one directory at
// once: every file either reads back whole and correct or does not exist.
TEST(DiskBlockTier, TwoWritersOnOneDirectoryDoNotCorruptEachOther) {
  const std::string dir = TempDir("shared");
  const size_t n = 64 * 1024;
  {
    auto a = OpenDisk(dir, int64_t{1} << 30);
    auto b = OpenDisk(dir, int64_t{1} << 30);
    std::thread ta([&] {
      for (uint64_t h = 0; h < 60; ++h) a->Write({0, h}, Content({0, h}, n));
      a->Flush();
    });
    std::thread tb([&] {
      for (uint64_t h = 30; h < 90; ++h) b->Write({0, h}, Content({0, h}, n));
      b->Flush();
    });
    ta.join();
    tb.join();
  }
  auto d = OpenDisk(dir, int64_t{1} << 30);
  EXPECT_EQ(d->stats().blocks, 90);
  for (uint64_t h = 0; h < 90; ++h) {
    std::vector<uint8_t> out(n);
    ASSERT_TRUE(d->Read({0, h}, out.data(), n)) << h;
    ASSERT_EQ(out, Content({0, h}, n)) << h;
  }
  EXPECT_EQ(d->stats().rejected, 0);
  fs::remove_all(dir);
}

TEST(DiskBlockTier, AnUnusableDirectoryIsAnErrorNamingIt) {
  DiskTierOptions o;
  o.dir = "/proc/mimo-no-such-dir";
  o.capacity_bytes = 1 << 20;
  auto d = DiskBlockTier::Open(o);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("/proc/mimo-no-such-dir"), std::string::npos)
      << d.status().message();
}

}  // namespace
}  // namespace mimo
