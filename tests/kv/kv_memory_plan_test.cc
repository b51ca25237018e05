// KV memory planning: per-token bytes of full layers, fixed SWA bytes per sequence (constant in
// the context length), budget split, and the real MiMo-V2-Flash geometry at 256k context.
#include "kv/kv_memory_plan.h"

#include <gtest/gtest.h>

namespace mimo {
namespace {

// MiMo-V2-Flash (spec §1): 48 layers, full at 0,5,11,17,23,29,35,41,47 with 4 kv heads, the
// other 39 sliding-window (128) with 8 kv heads; K 192 / V 128.
ModelConfig FlashConfig() {
  ModelConfig c;
  c.num_hidden_layers = 48;
  for (int i = 0; i < 48; ++i) {
    LayerConfig l;
    const bool full = i == 0 || (i + 1) % 6 == 0;
    l.attention = full ? AttentionKind::kFull : AttentionKind::kSlidingWindow;
    l.num_attention_heads = 64;
    l.num_key_value_heads = full ? 4 : 8;
    l.head_dim = 192;
    l.v_head_dim = 128;
    l.sliding_window = full ? 0 : 128;
    l.has_sinks = !full;
    c.layers.push_back(l);
  }
  return c;
}

TEST(KvMemoryPlan, FlashAt256kContext) {
  KvMemoryPlanOptions o;
  o.block_size = 16;
  o.kv_dtype = DType::kBF16;
  o.max_context = 262144;
  auto p = PlanKvMemory(FlashConfig(), o);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->num_full_layers, 9);
  EXPECT_EQ(p->num_swa_layers, 39);
  EXPECT_EQ(p->full_bytes_per_token, 9 * 4 * (192 + 128) * 2);  // 23040
  EXPECT_EQ(p->swa_bytes_per_token, 39 * 8 * (192 + 128) * 2);  // 199680
  EXPECT_EQ(p->swa_blocks_per_sequence, 128 / 16 + 1);          // window + one block
  EXPECT_EQ(p->swa_bytes_per_sequence, int64_t{9} * 16 * 199680);
  EXPECT_EQ(p->full_bytes_per_sequence, int64_t{262144} * 23040);
  EXPECT_EQ(p->unbounded_swa_bytes_per_sequence, int64_t{262144} * 199680);
  // SWA layers need only window-sized memory: < 0.1% of a context-sized SWA cache.
  EXPECT_LT(p->swa_bytes_per_sequence * 1000, p->unbounded_swa_bytes_per_sequence);
  EXPECT_EQ(p->tokens_that_fit, 262144);
  EXPECT_FALSE(FormatKvMemoryPlan(*p).empty());
}

TEST(KvMemoryPlan, SwaBytesConstantInContextLength) {
  for (int bs : {16, 64, 128}) {
    int64_t first = -1;
    for (int64_t ctx : {1024, 32768, 262144, 1048576}) {
      KvMemoryPlanOptions o;
      o.block_size = bs;
      o.max_context = ctx;
      auto p = PlanKvMemory(FlashConfig(), o);
      ASSERT_TRUE(p.ok());
      if (first < 0) first = p->swa_bytes_per_sequence;
      EXPECT_EQ(p->swa_bytes_per_sequence, first) << "bs " << bs << " ctx " << ctx;
      EXPECT_EQ(p->full_bytes_per_sequence, (ctx + bs - 1) / bs * bs * p->full_bytes_per_token);
    }
  }
}

TEST(KvMemoryPlan, ChunkAddsToSwaBound) {
  KvMemoryPlanOptions o;
  o.block_size = 16;
  o.max_chunk_tokens = 512;
  auto p = PlanKvMemory(FlashConfig(), o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->swa_blocks_per_sequence, (127 + 512 + 15) / 16 + 1);
}

TEST(KvMemoryPlan, BudgetSplit) {
  KvMemoryPlanOptions o;
  o.block_size = 64;
  o.kv_dtype = DType::kF8E4M3;
  o.max_sequences = 4;
  o.budget_bytes = int64_t{8} << 30;
  auto p = PlanKvMemory(FlashConfig(), o);
  ASSERT_TRUE(p.ok());
  const int64_t full_block = 9 * 4 * 320 * 64, swa_block = 39 * 8 * 320 * 64;
  const int64_t swa_blocks = 4 * ((127 + 1 + 63) / 64 + 1) + 1;
  EXPECT_EQ(p->num_swa_blocks, swa_blocks);
  EXPECT_EQ(p->num_full_blocks, (o.budget_bytes - swa_blocks * swa_block) / full_block);
  EXPECT_EQ(p->tokens_that_fit, (p->num_full_blocks - 1) * 64);
  EXPECT_LE(p->total_bytes, o.budget_bytes);
  // Too small a budget is an error naming the SWA need.
  o.budget_bytes = 1 << 20;
  auto small = PlanKvMemory(FlashConfig(), o);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kResourceExhausted);
}

TEST(KvMemoryPlan, BadOptions) {
  KvMemoryPlanOptions o;
  o.block_size = 0;
  EXPECT_FALSE(PlanKvMemory(FlashConfig(), o).ok());
  o.block_size = 16;
  o.kv_dtype = DType::kI32;
  EXPECT_FALSE(PlanKvMemory(FlashConfig(), o).ok());
}

// Issue 44: a window near 2^31 plus the chunk overflowed int into a negative block count (then
// a negative mmap size and an abort). The sum is taken in 64 bits and refused when the blocks do
// not fit an int; just below, the plan is positive and exact.
TEST(KvMemoryPlan, HugeSlidingWindowIsRefusedNotWrapped) {
  ModelConfig c = FlashConfig();
  for (LayerConfig& l : c.layers) {
    if (l.attention == AttentionKind::kSlidingWindow) l.sliding_window = INT32_MAX;
  }
  KvMemoryPlanOptions o;
  o.block_size = 1;
  o.max_chunk_tokens = 512;
  auto p = PlanKvMemory(c, o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("sliding window 2147483647 + chunk 512 tokens"),
            std::string::npos)
      << p.status().message();
  o.block_size = 16;
  p = PlanKvMemory(c, o);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->swa_blocks_per_sequence, (int64_t{INT32_MAX} - 1 + 512 + 15) / 16 + 1);
  EXPECT_GT(p->swa_bytes_per_sequence, 0);
}

}  // namespace
}  // namespace mimo
