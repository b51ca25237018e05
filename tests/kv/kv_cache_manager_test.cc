// KvCacheManager: slot allocation per group, sliding-window release (bounded SWA blocks whatever
// the length, chunked prefill relative to the chunk's first query), "no room", rewind, and the
// prefix-cache rule across full and sliding-window groups with LRU eviction.
#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace mimo {
namespace {

KvCacheManagerConfig TwoGroups(int bs, int window, int full_blocks, int swa_blocks) {
  KvCacheManagerConfig c;
  c.block_size = bs;
  c.enable_prefix_caching = true;
  c.groups = {{AttentionKind::kFull, 0, full_blocks},
              {AttentionKind::kSlidingWindow, window, swa_blocks}};
  return c;
}

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 31 + salt) % 1000;
  return t;
}

// Runs `tokens` through the manager in chunks, committing ids.
void RunTokens(KvCacheManager& m, int seq, const std::vector<int32_t>& tokens, int chunk) {
  for (int p = m.num_tokens(seq); p < static_cast<int>(tokens.size()); p += chunk) {
    int n = std::min<int>(chunk, tokens.size() - p);
    ASSERT_TRUE(m.AllocateSlots(seq, n).has_value()) << "at " << p;
    m.CommitTokens(seq, n, std::span<const int32_t>(tokens).subspan(p, n));
  }
}

int Owned(const KvCacheManager& m, int seq, int g) { return m.group(g).NumOwnedBlocks(seq); }

TEST(KvCacheManager, SlidingWindowMemoryIsBoundedAndSlotsAreValid) {
  for (int bs : {16, 64, 128}) {
    const int W = 128;
    KvCacheManager m(TwoGroups(bs, W, 4096, 64));
    ASSERT_TRUE(m.AddSequence(1).ok());
    const int bound = (W - 1 + 1 + bs - 1) / bs + 1;  // decode: ceil(W / bs) + 1
    int max_swa = 0;
    for (int p = 0; p < 3000; ++p) {
      auto a = m.AllocateSlots(1, 1);
      ASSERT_TRUE(a.has_value());
      m.CommitTokens(1, 1);
      max_swa = std::max(max_swa, Owned(m, 1, 1));
      // Every key the query at p reads has a real block in the SWA table.
      const auto& t = m.BlockTable(1, 1);
      for (int j = std::max(0, p - W + 1); j <= p; j += 1) ASSERT_NE(t[j / bs], 0) << p << " " << j;
    }
    EXPECT_LE(max_swa, bound) << "bs " << bs;
    EXPECT_EQ(Owned(m, 1, 0), (3000 + bs - 1) / bs);  // full layers keep everything
  }
}

TEST(KvCacheManager, ChunkedPrefillWindowIsRelativeToFirstQuery) {
  const int bs = 16, W = 40;
  KvCacheManager m(TwoGroups(bs, W, 256, 256));
  ASSERT_TRUE(m.AddSequence(7).ok());
  ASSERT_TRUE(m.AllocateSlots(7, 100).has_value());
  m.CommitTokens(7, 100);
  // Next chunk of 50 starts at 100: its first query reads keys from 61, which is in block 3
  // (48..63), so blocks 0..2 are dead and block 3 must stay even though later queries skip it.
  auto a = m.AllocateSlots(7, 50);
  ASSERT_TRUE(a.has_value());
  const auto& t = m.BlockTable(7, 1);
  EXPECT_EQ(t[0], 0);
  EXPECT_EQ(t[2], 0);
  EXPECT_NE(t[3], 0);
  EXPECT_EQ(static_cast<int>(t.size()), (150 + bs - 1) / bs);
  std::vector<int64_t> slots(50);
  m.SlotMapping(7, 1, 100, 50, slots.data());  // all mapped (aborts otherwise)
  EXPECT_EQ(a->first_pos, 100);
  EXPECT_EQ(a->new_blocks[0].size(), a->new_blocks[1].size());
}

TEST(KvCacheManager, NoRoomLeavesStateUnchanged) {
  KvCacheManager m(TwoGroups(16, 32, 5, 64));  // 4 usable full blocks = 64 tokens
  ASSERT_TRUE(m.AddSequence(1).ok());
  ASSERT_TRUE(m.AllocateSlots(1, 60).has_value());
  m.CommitTokens(1, 60);
  EXPECT_FALSE(m.AllocateSlots(1, 5).has_value());
  EXPECT_EQ(m.num_tokens(1), 60);
  EXPECT_TRUE(m.AllocateSlots(1, 4).has_value());
  // Lookahead counts too.
  EXPECT_FALSE(m.AllocateSlots(1, 4, 1).has_value());
  m.FreeSequence(1);
  EXPECT_EQ(m.num_free_blocks(0), 4);
}

TEST(KvCacheManager, LookaheadAndRewind) {
  KvCacheManager m(TwoGroups(16, 32, 64, 64));
  ASSERT_TRUE(m.AddSequence(1).ok());
  auto toks = Tokens(40, 1);
  RunTokens(m, 1, toks, 20);
  // Speculative step: 1 new + 3 draft tokens, then only 1 accepted.
  ASSERT_TRUE(m.AllocateSlots(1, 4).has_value());
  m.CommitTokens(1, 4);
  ASSERT_TRUE(m.Rewind(1, 42).ok());
  EXPECT_EQ(m.num_tokens(1), 42);
  EXPECT_FALSE(m.Rewind(1, 43).ok());  // forward
  EXPECT_FALSE(m.Rewind(1, 30).ok());  // block 1 (16..31) is hashed: cannot be rewritten
  // Window release without hashes: W = 32, first query 80 released blocks 0..2 (keys < 48);
  // a query at 60 reads keys from 29 -> refused; at 79 (keys from 48) -> fine.
  KvCacheManager n(TwoGroups(16, 32, 64, 64));
  ASSERT_TRUE(n.AddSequence(1).ok());
  for (int p = 0; p < 80; p += 20) {
    ASSERT_TRUE(n.AllocateSlots(1, 20).has_value());
    n.CommitTokens(1, 20);
  }
  ASSERT_TRUE(n.AllocateSlots(1, 4).has_value());
  n.CommitTokens(1, 4);
  EXPECT_EQ(n.BlockTable(1, 1)[2], 0);
  EXPECT_FALSE(n.Rewind(1, 60).ok());
  EXPECT_TRUE(n.Rewind(1, 79).ok());
}

TEST(KvCacheManager, PrefixHitOnFullAndSlidingGroups) {
  const int bs = 16, W = 32;
  KvCacheManager m(TwoGroups(bs, W, 256, 256));
  auto a = Tokens(100, 3);
  ASSERT_EQ(*m.AddSequence(1, a), 0);  // nothing cached yet
  RunTokens(m, 1, a, 16);
  // While sequence 1 is alive: a prompt sharing 100 tokens + 50 more hits 6 full blocks (96).
  auto b = a;
  auto extra = Tokens(50, 9);
  b.insert(b.end(), extra.begin(), extra.end());
  EXPECT_EQ(m.ComputeCachedPrefix(b), 96);
  // A prompt equal to the first 96 tokens: at most len - 1 tokens hit -> 80.
  EXPECT_EQ(m.ComputeCachedPrefix(std::span<const int32_t>(a).first(96)), 80);
  // Diverging inside block 2 -> 32.
  auto c = a;
  c[40] = 999;
  EXPECT_EQ(m.ComputeCachedPrefix(c), 32);
  m.FreeSequence(1);
  // Freed blocks stay cached until evicted.
  EXPECT_EQ(m.ComputeCachedPrefix(b), 96);
  // A new sequence attaches the hit: its SWA table holds only the window blocks before 96
  // (positions 65..95 -> blocks 4 and 5); the full table holds blocks 0..5.
  ASSERT_EQ(*m.AddSequence(2, b), 96);
  EXPECT_EQ(m.num_tokens(2), 96);
  const auto& swa = m.BlockTable(2, 1);
  ASSERT_EQ(swa.size(), 6u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(swa[i], 0) << i;
  EXPECT_NE(swa[4], 0);
  EXPECT_NE(swa[5], 0);
  for (int32_t blk : m.BlockTable(2, 0)) EXPECT_NE(blk, 0);
  EXPECT_EQ(m.group(0).pool().ref_count(m.BlockTable(2, 0)[0]), 1);
}

TEST(KvCacheManager, EvictedWindowBlocksShortenTheHit) {
  const int bs = 16, W = 32;
  KvCacheManager m(TwoGroups(bs, W, 256, 17));  // 16 usable SWA blocks
  auto a = Tokens(100, 5);
  ASSERT_TRUE(m.AddSequence(1).ok());
  RunTokens(m, 1, a, 16);
  m.FreeSequence(1);  // SWA blocks of logical 6, 5, 4 go to the free-list tail in that order
  auto b = a;
  auto extra = Tokens(20, 11);
  b.insert(b.end(), extra.begin(), extra.end());
  ASSERT_EQ(m.ComputeCachedPrefix(b), 96);
  // Take every free SWA block but the last two (logical 5 and 4): the hit at 96 survives.
  ASSERT_TRUE(m.AddSequence(2).ok());
  const int free_swa = m.num_free_blocks(1);
  ASSERT_TRUE(m.AllocateSlots(2, (free_swa - 2) * bs).has_value());
  EXPECT_EQ(m.ComputeCachedPrefix(b), 96);
  // One more evicts logical block 5: 96 needs blocks 4 and 5; 80 needs 3 and 4 (3 was evicted
  // first); ... so the hit falls to 0 although every full-layer block is still cached.
  m.CommitTokens(2, (free_swa - 2) * bs);
  ASSERT_TRUE(m.AllocateSlots(2, bs).has_value());
  EXPECT_EQ(m.ComputeCachedPrefix(b), 0);
  // The same prompt on a full-only manager would hit 96: the shortening is the SWA rule.
  KvCacheManagerConfig full_only;
  full_only.block_size = bs;
  full_only.groups = {{AttentionKind::kFull, 0, 256}};
  KvCacheManager f(full_only);
  ASSERT_TRUE(f.AddSequence(1).ok());
  RunTokens(f, 1, a, 16);
  EXPECT_EQ(f.ComputeCachedPrefix(b), 96);
}

TEST(KvCacheManager, PrefixCachingOffNeverHits) {
  auto cfg = TwoGroups(16, 32, 64, 64);
  cfg.enable_prefix_caching = false;
  KvCacheManager m(cfg);
  auto a = Tokens(64, 2);
  ASSERT_TRUE(m.AddSequence(1).ok());
  RunTokens(m, 1, a, 16);
  EXPECT_EQ(m.ComputeCachedPrefix(a), 0);
}

}  // namespace
}  // namespace mimo
