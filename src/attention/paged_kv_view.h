// The paged K/V layout every attention backend and the cache-write kernel agree on, and the
// per-step description of which queries attend over which blocks. Plain data, no ownership.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace mimo {

// Geometry of one layer's paged K and V pools. K and V are SEPARATE pools with their own head
// dims (MiMo-V2: K 192, V 128); V is never padded to K's width, and every V index uses
// v_head_dim. Element (slot, head, d) of K is at KIndex(slot, head) + d, where
// slot = block * block_size + offset_in_block.
struct PagedKvLayout {
  int num_blocks = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;           // K row width
  int v_head_dim = 0;         // V row width
  DType dtype = DType::kF32;  // kF32 | kBF16 | kF8E4M3

  int64_t num_slots() const { return int64_t{num_blocks} * block_size; }
  int64_t KIndex(int64_t slot, int head) const {
    return (slot * num_kv_heads + head) * int64_t{head_dim};
  }
  int64_t VIndex(int64_t slot, int head) const {
    return (slot * num_kv_heads + head) * int64_t{v_head_dim};
  }
  int64_t k_elements() const { return num_slots() * num_kv_heads * head_dim; }
  int64_t v_elements() const { return num_slots() * num_kv_heads * v_head_dim; }
  int64_t k_bytes() const { return k_elements() * static_cast<int64_t>(DTypeSize(dtype)); }
  int64_t v_bytes() const { return v_elements() * static_cast<int64_t>(DTypeSize(dtype)); }
};

// Read-only view of one layer's cache, as the attention backends see it.
// fp8: value = decode(byte) * scale[head]; the scales are ignored for f32/bf16 (may be null).
struct PagedKvView {
  PagedKvLayout layout;
  const void* k = nullptr;         // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v = nullptr;         // [num_blocks, block_size, num_kv_heads, v_head_dim]
  const float* k_scale = nullptr;  // [num_kv_heads] (fp8 only)
  const float* v_scale = nullptr;  // [num_kv_heads] (fp8 only)
};

// One sequence's queries in a step. Queries are rows [query_begin, query_begin + num_queries)
// of q/out, at absolute positions start_pos .. start_pos + num_queries - 1; the cache already
// holds this sequence's keys 0 .. start_pos + num_queries - 1 (the step's own K/V included).
// Its block table is entries [table_begin, table_begin + num_table_blocks) of the batch's
// block_tables: entry b maps logical block b (positions b*block_size ...) to a physical block;
// entries for blocks wholly outside every query's window may be the null block and are never
// read.
struct AttentionSequence {
  int query_begin = 0;
  int num_queries = 0;
  int start_pos = 0;
  int table_begin = 0;
  int num_table_blocks = 0;
};

// Plain data (copyable, sendable to another process): the block tables live in the batch.
struct AttentionBatch {
  std::vector<AttentionSequence> seqs;
  int num_tokens = 0;                 // rows of q/out
  std::vector<int32_t> block_tables;  // every sequence's table, concatenated

  const int32_t* table(const AttentionSequence& s) const {
    return block_tables.data() + s.table_begin;
  }
};

}  // namespace mimo
