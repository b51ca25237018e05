// The cache-write kernel: new K/V rows of T tokens -> their slots in one layer's paged pools.
// K and V are written with their OWN row widths (head_dim vs v_head_dim); see PagedKvLayout.
#pragma once

#include <cstdint>

#include "attention/paged_kv_view.h"
#include "core/dtype.h"  // EncodeF8E4M3

namespace mimo {

struct KvCacheWriteTarget {
  PagedKvLayout layout;
  void* k = nullptr;               // [num_blocks, block_size, num_kv_heads, head_dim]
  void* v = nullptr;               // [num_blocks, block_size, num_kv_heads, v_head_dim]
  const float* k_scale = nullptr;  // [num_kv_heads], fp8 only: stored = e4m3(x / scale)
  const float* v_scale = nullptr;  // [num_kv_heads], fp8 only
};

// k [T, num_kv_heads, head_dim]; v [T, num_kv_heads, v_head_dim]; slots [T], each in
// [0, layout.num_slots()) (checked). f32 stores exactly, bf16 rounds to nearest even, fp8
// rounds to nearest even and saturates at +-448 * scale.
void WriteKvCache(const KvCacheWriteTarget& dst, const float* k, const float* v,
                  const int64_t* slots, int num_tokens);

}  // namespace mimo
