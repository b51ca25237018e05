// BlockPool: allocation, ref counts, LRU free-list order, prefix-hash map and eviction.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace mimo {
namespace {

TEST(BlockPool, NullBlockNeverAllocated) {
  BlockPool p(5, true);
  EXPECT_EQ(p.num_free_blocks(), 4);
  auto a = p.Allocate(4);
  ASSERT_TRUE(a.has_value());
  for (int b : *a) EXPECT_NE(b, BlockPool::kNullBlock);
  EXPECT_FALSE(p.Allocate(1).has_value());
  EXPECT_EQ(p.num_free_blocks(), 0);
}

TEST(BlockPool, AllocateIsAllOrNothing) {
  BlockPool p(4, true);
  EXPECT_FALSE(p.Allocate(4).has_value());
  EXPECT_EQ(p.num_free_blocks(), 3);
}

TEST(BlockPool, RefCountsAndFreeOrder) {
  BlockPool p(6, true);
  auto a = *p.Allocate(5);  // 1..5
  EXPECT_EQ(a, (std::vector<int>{1, 2, 3, 4, 5}));
  p.Touch(std::vector<int>{2});
  EXPECT_EQ(p.ref_count(2), 2);
  p.Free(std::vector<int>{4, 2, 1});
  EXPECT_EQ(p.ref_count(2), 1);
  EXPECT_EQ(p.FreeListForTest(), (std::vector<int>{4, 1}));  // in the order given
  p.Free(std::vector<int>{2});
  EXPECT_EQ(p.FreeListForTest(), (std::vector<int>{4, 1, 2}));
  auto b = *p.Allocate(2);  // least recently freed first
  EXPECT_EQ(b, (std::vector<int>{4, 1}));
}

TEST(BlockPool, CachedBlocksSurviveFreeUntilEvicted) {
  BlockPool p(4, true);
  auto a = *p.Allocate(3);
  p.CacheBlock(a[0], 111);
  p.CacheBlock(a[1], 222);
  EXPECT_EQ(p.Lookup(111), a[0]);
  p.Free(std::vector<int>{a[1], a[0], a[2]});  // evict a[1] first
  EXPECT_EQ(p.Lookup(111), a[0]);              // still cached while free
  EXPECT_EQ(p.Lookup(222), a[1]);
  // Reuse by a prefix hit takes it off the free list.
  p.Touch(std::vector<int>{a[0]});
  EXPECT_EQ(p.num_free_blocks(), 2);
  EXPECT_EQ(p.FreeListForTest(), (std::vector<int>{a[1], a[2]}));
  // Allocating evicts the LRU cached block and forgets its hash.
  auto b = *p.Allocate(1);
  EXPECT_EQ(b[0], a[1]);
  EXPECT_FALSE(p.Lookup(222).has_value());
  EXPECT_FALSE(p.is_cached(a[1]));
}

TEST(BlockPool, DuplicateHashKeepsFirstAndCachingOff) {
  BlockPool p(4, true);
  auto a = *p.Allocate(2);
  p.CacheBlock(a[0], 7);
  p.CacheBlock(a[1], 7);
  EXPECT_EQ(p.Lookup(7), a[0]);
  EXPECT_FALSE(p.is_cached(a[1]));
  BlockPool off(4, false);
  auto c = *off.Allocate(1);
  off.CacheBlock(c[0], 9);
  EXPECT_FALSE(off.Lookup(9).has_value());
}

TEST(BlockHash, ChainedAndContentSensitive) {
  std::vector<int32_t> t(48);
  for (int i = 0; i < 48; ++i) t[i] = i * 7 + 1;
  auto h = HashFullBlocks(t, 16, 0);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(HashFullBlocks(std::span<const int32_t>(t).first(40), 16, 0).size(), 2u);
  // Chained: changing block 0 changes every later hash; changing block 2 only the last.
  auto t2 = t;
  t2[3] = 999;
  auto h2 = HashFullBlocks(t2, 16, 0);
  EXPECT_NE(h2[0], h[0]);
  EXPECT_NE(h2[1], h[1]);
  EXPECT_NE(h2[2], h[2]);
  auto t3 = t;
  t3[40] = 999;
  auto h3 = HashFullBlocks(t3, 16, 0);
  EXPECT_EQ(h3[0], h[0]);
  EXPECT_EQ(h3[1], h[1]);
  EXPECT_NE(h3[2], h[2]);
  // The extra key separates caches.
  EXPECT_NE(HashFullBlocks(t, 16, 5)[0], h[0]);
  // Same tokens at a different block index (different parent) hash differently.
  std::vector<int32_t> rep(32, 4);
  auto hr = HashFullBlocks(rep, 16, 0);
  EXPECT_NE(hr[0], hr[1]);
}

}  // namespace
}  // namespace mimo
