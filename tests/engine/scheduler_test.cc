// Scheduler on a real paged KV cache (config only, no weights): token budget and chunked prefill
// alongside decodes, the running-set bound, prefix-cache admission, preemption of the most
// recently admitted request with recomputation, and blocks all returned when requests end.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace mimo {
namespace {

constexpr int kBlock = 4;

ModelConfig Config() {
  ModelConfig c;
  LayerConfig full;
  full.attention = AttentionKind::kFull;
  full.num_attention_heads = 2;
  full.num_key_value_heads = 1;
  full.head_dim = 8;
  full.v_head_dim = 4;
  LayerConfig swa = full;
  swa.attention = AttentionKind::kSlidingWindow;
  swa.sliding_window = 8;
  c.layers = {full, swa};
  c.num_hidden_layers = 2;
  return c;
}

// A cache for max_seqs sequences (chunks up to `chunk` tokens) with `full_blocks` allocatable
// full-attention blocks.
std::unique_ptr<KvCache> MakeKv(int max_seqs, int chunk, int full_blocks) {
  PagedKvOptions o;
  o.block_size = kBlock;
  o.max_sequences = max_seqs;
  o.max_chunk_tokens = chunk;
  KvMemoryPlanOptions po;
  po.block_size = kBlock;
  po.max_sequences = max_seqs;
  po.max_chunk_tokens = chunk;
  auto probe = PlanKvMemory(Config(), po);
  EXPECT_TRUE(probe.ok());
  o.kv_cache_memory_bytes = probe->num_swa_blocks * probe->swa_bytes_per_block +
                            int64_t{full_blocks + 1} * probe->full_bytes_per_block;
  auto kv = KvCache::Create(Config(), o);
  EXPECT_TRUE(kv.ok()) << kv.status().message();
  EXPECT_EQ(kv.value()->memory_plan().num_full_blocks, full_blocks + 1);
  return std::move(kv).value();
}

std::unique_ptr<Request> MakeRequest(int seq, int prompt_len, int first_id = 100) {
  auto g = std::make_shared<GenerationRequest>();
  for (int i = 0; i < prompt_len; ++i) g->prompt_ids.push_back(first_id + i);
  auto r = std::make_unique<Request>();
  r->seq_id = seq;
  r->request_id = seq;
  r->params = g;
  r->max_tokens = 1000;
  return r;
}

// Runs the plan as the engine would: the KV cache plans the step (its slots committed), tokens
// are computed, sampled rows get a fake token.
void Complete(Scheduler& s, KvCache& kv, const SchedulePlan& plan) {
  if (plan.empty()) return;
  ASSERT_TRUE(kv.PlanStep(plan.ToStepBatch()).ok());
  s.OnStepDone(plan);
  for (const ScheduledChunk& c : plan.chunks) {
    if (!c.sample) continue;
    Request* r = s.Find(c.seq_id);
    const int32_t tok = 7 + static_cast<int32_t>(r->output.size());
    r->output.push_back(tok);
    kv.RecordTokenIds(c.seq_id, std::span<const int32_t>(&tok, 1));
  }
}

const ScheduledChunk* ChunkOf(const SchedulePlan& p, int seq) {
  for (const ScheduledChunk& c : p.chunks) {
    if (c.seq_id == seq) return &c;
  }
  return nullptr;
}

TEST(Scheduler, ChunkedPrefillSharesTheBudgetWithDecodes) {
  auto kv = MakeKv(4, 16, 64);
  Scheduler s(*kv, {4, 16});
  s.Add(MakeRequest(0, 5));
  SchedulePlan p = s.Schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].num_tokens, 5);
  EXPECT_TRUE(p.chunks[0].sample);
  Complete(s, *kv, p);
  s.Add(MakeRequest(1, 40, 500));
  // Request 1's 40-token prompt goes in chunks of 15 while request 0 decodes one token a step.
  const int want_chunks[] = {15, 15, 10};
  int pos = 0;
  for (int step = 0; step < 3; ++step) {
    p = s.Schedule();
    EXPECT_LE(p.num_tokens(), 16);
    const ScheduledChunk* a = ChunkOf(p, 0);
    const ScheduledChunk* b = ChunkOf(p, 1);
    ASSERT_TRUE(a && b) << "step " << step;
    EXPECT_EQ(a->num_tokens, 1);
    EXPECT_TRUE(a->sample);
    EXPECT_EQ(b->start_pos, pos);
    EXPECT_EQ(b->num_tokens, want_chunks[step]);
    EXPECT_EQ(b->sample, step == 2);  // only the chunk that reaches the prompt's end
    // The rows carry the right input ids.
    const StepBatch batch = p.ToStepBatch();
    EXPECT_EQ(batch.num_tokens, p.num_tokens());
    EXPECT_EQ(p.token_ids[batch.chunks[1].token_begin], 500 + pos);
    pos += b->num_tokens;
    Complete(s, *kv, p);
  }
  EXPECT_EQ(s.Find(1)->output.size(), 1u);
  EXPECT_EQ(s.Find(0)->output.size(), 4u);
}

TEST(Scheduler, MaxNumSeqsBoundsTheRunningSet) {
  auto kv = MakeKv(2, 64, 64);
  Scheduler s(*kv, {2, 64});
  for (int i = 0; i < 3; ++i) s.Add(MakeRequest(i, 3, 100 * (i + 1)));
  SchedulePlan p = s.Schedule();
  EXPECT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 1);
  Complete(s, *kv, p);
  s.Remove(0);
  p = s.Schedule();
  ASSERT_NE(ChunkOf(p, 2), nullptr);  // admitted once a slot is free
  EXPECT_EQ(ChunkOf(p, 2)->num_tokens, 3);
}

TEST(Scheduler, PrefixCacheHitSkipsTheSharedPrefix) {
  auto kv = MakeKv(2, 64, 64);
  Scheduler s(*kv, {2, 64});
  s.Add(MakeRequest(0, 22));  // ids 100..121
  Complete(s, *kv, s.Schedule());
  s.Add(MakeRequest(1, 30));  // ids 100..129: shares 22 tokens, 5 full blocks of 4
  const SchedulePlan p = s.Schedule();
  const ScheduledChunk* b = ChunkOf(p, 1);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->start_pos, 20);  // 5 blocks reused exactly
  EXPECT_EQ(b->num_tokens, 10);
  EXPECT_EQ(s.Find(1)->num_cached_tokens, 20);
  EXPECT_EQ(s.stats().prefix_cache_queries, 22 + 30);
  EXPECT_EQ(s.stats().prefix_cache_hits, 20);
}

TEST(Scheduler, PreemptsTheMostRecentlyAdmittedAndRecomputesIt) {
  // 10 full blocks: two sequences of 16 prompt tokens (4 blocks each) fit, but not their growth.
  auto kv = MakeKv(2, 32, 10);
  Scheduler s(*kv, {2, 32});
  s.Add(MakeRequest(0, 16, 100));
  s.Add(MakeRequest(1, 16, 300));
  Complete(s, *kv, s.Schedule());
  int preempted_at = -1;
  for (int step = 0; step < 12 && preempted_at < 0; ++step) {
    const SchedulePlan p = s.Schedule();
    if (s.stats().num_preemptions > 0) {
      preempted_at = step;
      EXPECT_NE(ChunkOf(p, 0), nullptr);  // the older request keeps running
      EXPECT_EQ(ChunkOf(p, 1), nullptr);
      EXPECT_EQ(s.Find(1)->status, RequestStatus::kPreempted);
      EXPECT_EQ(s.Find(1)->num_computed, 0);
    }
    Complete(s, *kv, p);
  }
  ASSERT_GE(preempted_at, 0) << "the cache never filled up";
  const int out1 = static_cast<int>(s.Find(1)->output.size());
  // Once request 0 ends, request 1 is readmitted and recomputes prompt + output from its cached
  // prefix; it then samples its next token with nothing lost.
  s.Remove(0);
  const SchedulePlan p = s.Schedule();
  const ScheduledChunk* c = ChunkOf(p, 1);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->start_pos + c->num_tokens, 16 + out1);
  EXPECT_TRUE(c->sample);
  EXPECT_EQ(s.Find(1)->output.size(), static_cast<size_t>(out1));
}

TEST(Scheduler, RemovingEveryRequestReturnsEveryBlock) {
  auto kv = MakeKv(3, 8, 40);
  auto free_blocks = [&] {
    std::vector<int> f;
    for (int g = 0; g < kv->manager().num_groups(); ++g) f.push_back(kv->manager().num_free_blocks(g));
    return f;
  };
  const std::vector<int> initial = free_blocks();
  Scheduler s(*kv, {3, 8});
  for (int i = 0; i < 3; ++i) s.Add(MakeRequest(i, 11 + i, 100 * (i + 1)));
  for (int step = 0; step < 6; ++step) Complete(s, *kv, s.Schedule());
  EXPECT_NE(free_blocks(), initial);
  for (int i = 0; i < 3; ++i) ASSERT_NE(s.Remove(i), nullptr);
  EXPECT_EQ(free_blocks(), initial);
  EXPECT_FALSE(s.has_work());
}

TEST(Scheduler, ARequestLargerThanTheCacheIsReportedUnschedulable) {
  auto kv = MakeKv(1, 64, 4);  // 16 full-layer tokens in all
  Scheduler s(*kv, {1, 64});
  s.Add(MakeRequest(0, 30));
  const SchedulePlan p = s.Schedule();
  EXPECT_TRUE(p.empty());
  ASSERT_EQ(p.unschedulable.size(), 1u);
  EXPECT_EQ(p.unschedulable[0], 0);
}

}  // namespace
}  // namespace mimo
