// What the KV cache owns for a speculator: the MTP draft sequences and the DraftState of a
// sequence are freed with it (whatever ended it: finished, cancelled, preempted), and the
// drafter's FeatureCache of prompt blocks is bounded, evicts the least recently used block, and
// tells the scheduler how many leading tokens it can restore.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache.h"

namespace mimo {
namespace {

LayerConfig Layer(bool swa, bool mtp) {
  LayerConfig l;
  l.attention = swa ? AttentionKind::kSlidingWindow : AttentionKind::kFull;
  l.num_attention_heads = 2;
  l.num_key_value_heads = 1;
  l.head_dim = 8;
  l.v_head_dim = 8;
  l.sliding_window = swa ? 16 : 0;
  l.mtp = mtp;
  return l;
}

// One full layer and one MTP layer (a pool of its own, two draft sequences per sequence).
std::unique_ptr<KvCache> MakeCache() {
  ModelConfig c;
  c.layers = {Layer(false, false), Layer(true, true)};
  c.num_hidden_layers = 1;
  PagedKvOptions o;
  o.block_size = 4;
  o.max_sequences = 2;
  o.max_context = 64;
  o.max_chunk_tokens = 16;
  o.mtp_sequences_per_sequence = 2;
  o.mtp_chunk_tokens = 8;
  auto kv = KvCache::Create(c, o);
  EXPECT_TRUE(kv.ok()) << kv.status().message();
  return kv.ok() ? std::move(kv).value() : nullptr;
}

struct CountedState final : DraftState {
  explicit CountedState(int* alive) : alive(alive) { ++*alive; }
  ~CountedState() override { --*alive; }
  int64_t bytes() const override { return 1000; }
  int* alive;
};

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 7 * i + salt;
  return t;
}

TEST(KvCacheDraftState, OwnedDraftSequencesAndStateGoWithTheSequence) {
  auto kv = MakeCache();
  ASSERT_NE(kv, nullptr);
  const int mtp_group = kv->manager().num_groups() - 1;
  const int mtp_free = kv->manager().num_free_blocks(mtp_group);
  int alive = 0;
  for (int seq : {1, 2}) {
    ASSERT_TRUE(kv->StartSequence(seq).ok());
    ASSERT_TRUE(kv->AddDraftSequence(100 + seq, 0, seq).ok());
    ASSERT_TRUE(kv->ReserveSlots(100 + seq, 6));
    kv->SetDraftState(seq, std::make_unique<CountedState>(&alive));
  }
  ASSERT_TRUE(kv->AddDraftSequence(200, 0).ok());  // no owner: freed only by itself
  ASSERT_TRUE(kv->ReserveSlots(200, 3));
  EXPECT_EQ(alive, 2);
  EXPECT_EQ(kv->draft_state_bytes(), 2000);
  EXPECT_NE(kv->draft_state(1), nullptr);
  EXPECT_EQ(kv->draft_state(3), nullptr);
  EXPECT_LT(kv->manager().num_free_blocks(mtp_group), mtp_free);

  kv->FreeSequence(1);
  EXPECT_FALSE(kv->HasSequence(1));
  EXPECT_FALSE(kv->HasSequence(101));
  EXPECT_TRUE(kv->HasSequence(102));
  EXPECT_TRUE(kv->HasSequence(200));
  EXPECT_EQ(kv->draft_state(1), nullptr);
  EXPECT_EQ(alive, 1);
  EXPECT_EQ(kv->draft_state_bytes(), 1000);

  kv->FreeSequence(2);
  kv->FreeSequence(200);
  EXPECT_EQ(alive, 0);
  EXPECT_EQ(kv->draft_state_bytes(), 0);
  EXPECT_EQ(kv->manager().num_free_blocks(mtp_group), mtp_free);
  kv->FreeSequence(2);  // again: nothing left
}

TEST(KvCacheDraftState, FeatureCacheIsBoundedAndLeastRecentlyUsedGoesFirst) {
  auto kv = MakeCache();
  ASSERT_NE(kv, nullptr);
  const std::vector<int32_t> prompt = Tokens(14, 3);  // 3 full blocks of 4, 2 tokens over
  EXPECT_EQ(kv->feature_cache(), nullptr);
  EXPECT_EQ(kv->FeatureCachedPrefix(prompt), 0);
  // 2 floats per token: a block is 4 * 2 * 4 = 32 bytes; 100 bytes hold 3 blocks.
  kv->EnableFeatureCache(100, 2);
  FeatureCache* fc = kv->feature_cache();
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->capacity_blocks(), 3u);
  EXPECT_EQ(fc->capacity_bytes(), 96);
  const std::vector<uint64_t> h = HashFullBlocks(prompt, 4, 0);
  ASSERT_EQ(h.size(), 3u);
  fc->Insert(h[0], std::vector<float>(8, 1.0f));
  EXPECT_EQ(kv->FeatureCachedPrefix(prompt), 4);
  fc->Insert(h[2], std::vector<float>(8, 3.0f));
  EXPECT_EQ(kv->FeatureCachedPrefix(prompt), 4) << "a gap stops the prefix";
  fc->Insert(h[1], std::vector<float>(8, 2.0f));
  EXPECT_EQ(kv->FeatureCachedPrefix(prompt), 12);
  EXPECT_EQ(fc->bytes(), 96);
  // The lookup pinned the blocks it counted, for the drafter to restore them in this step: a
  // block inserted meanwhile overshoots the bound instead of evicting them.
  fc->Insert(uint64_t{777}, std::vector<float>(8, 7.0f));
  EXPECT_EQ(fc->size(), 4u);
  EXPECT_TRUE(fc->Contains(h[0]) && fc->Contains(h[1]) && fc->Contains(h[2]));
  fc->Unpin();  // what the drafter does once it restored them
  // A fourth block evicts the least recently used: h[0] once h[1] and h[2] were used after it
  // (and 777 before it went).
  ASSERT_NE(fc->Find(h[1]), nullptr);
  ASSERT_NE(fc->Find(h[2]), nullptr);
  fc->Insert(uint64_t{12345}, std::vector<float>(8, 4.0f));
  EXPECT_EQ(fc->size(), 3u);
  EXPECT_FALSE(fc->Contains(h[0]));
  EXPECT_EQ(kv->FeatureCachedPrefix(prompt), 0);
  // The same hash keeps its first rows (the same tokens, the same features).
  fc->Insert(h[1], std::vector<float>(8, 9.0f));
  EXPECT_EQ((*fc->Find(h[1]))[0], 2.0f);
  EXPECT_FALSE(fc->Contains(777));
  // A budget under one block: no cache at all.
  kv->EnableFeatureCache(31, 2);
  EXPECT_EQ(kv->feature_cache(), nullptr);
}

}  // namespace
// A stand-in for the prefix cache's tiers below the feature cache.
class FakeFeatureTiers final : public FeatureTiers {
 public:
  std::map<uint64_t, std::vector<float>> held, checkpointed, evicted;
  bool ContainsFeatures(uint64_t key) const override { return held.count(key) != 0; }
  bool LoadFeatures(uint64_t key, int64_t floats, std::vector<float>* rows) override {
    auto it = held.find(key);
    if (it == held.end() || static_cast<int64_t>(it->second.size()) != floats) return false;
    *rows = it->second;
    return true;
  }
  void OnFeaturesEvicted(uint64_t key, std::vector<float> rows) override {
    evicted[key] = std::move(rows);
  }
  void CheckpointFeatures(uint64_t key, const std::vector<float>& rows) override {
    checkpointed[key] = rows;
  }
};

// With a drafter window, the blocks that count are the consecutive ones from the block holding
// position size - window; blocks a tier holds are loaded back, under keys mixed with the layout.
TEST(KvCacheDraftState, FeatureCachePrefixReadsTheWindowAndTheTiersBelow) {
  auto kv = MakeCache();
  ASSERT_NE(kv, nullptr);
  const std::vector<int32_t> prompt = Tokens(22, 5);  // 5 full blocks of 4, 2 tokens over
  kv->EnableFeatureCache(1000, 2, /*window=*/8, /*layout=*/42);
  FeatureCache* fc = kv->feature_cache();
  ASSERT_NE(fc, nullptr);
  FakeFeatureTiers tiers;
  fc->SetTiers(&tiers, 42);
  const std::vector<uint64_t> h = HashFullBlocks(prompt, 4, 0);
  ASSERT_EQ(h.size(), 5u);
  // Position 22 - 8 = 14 is in block 3: blocks 0..2 do not matter.
  fc->Insert(h[3], std::vector<float>(8, 3.0f));
  EXPECT_EQ(kv->FeatureCachedPrefix(prompt), 16);
  tiers.held[fc->TierKeyOf(h[4])] = std::vector<float>(8, 4.0f);
  EXPECT_EQ(kv->FeatureCachedPrefix(prompt), 20);
  ASSERT_TRUE(fc->Contains(h[4]));
  EXPECT_EQ((*fc->Find(h[4]))[0], 4.0f);
  // Another layout's key is another block; a tier copy of the wrong size is not taken.
  EXPECT_NE(fc->TierKeyOf(h[4]), FeatureCache(1000, 4, 2).TierKeyOf(h[4]));
  const std::vector<int32_t> longer = Tokens(30, 5);  // the same first 5 blocks, then 2 more
  const std::vector<uint64_t> hl = HashFullBlocks(longer, 4, 0);
  ASSERT_EQ(hl[4], h[4]);
  tiers.held[fc->TierKeyOf(hl[5])] = std::vector<float>(6, 5.0f);
  fc->Unpin();
  EXPECT_EQ(kv->FeatureCachedPrefix(longer), 0) << "block 5 (position 22) is the first needed";
  // Checkpoints go to the tiers; what the cache evicts does too.
  fc->Checkpoint(h[3]);
  EXPECT_EQ(tiers.checkpointed.count(fc->TierKeyOf(h[3])), 1u);
  fc->Checkpoint(h[0]);  // not held: nothing
  EXPECT_EQ(tiers.checkpointed.size(), 1u);
  fc->Unpin();
  for (uint64_t x = 1; x <= 40; ++x) fc->Insert(x, std::vector<float>(8, 0.0f));
  EXPECT_EQ(tiers.evicted.count(fc->TierKeyOf(h[3])), 1u);
  EXPECT_EQ(tiers.evicted[fc->TierKeyOf(h[3])][0], 3.0f);
}

}  // namespace mimo
