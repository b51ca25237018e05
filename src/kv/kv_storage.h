// KvLayerStorage: one layer's K and V pools (separate tensors, each with its own head dim, never
// padded) plus the fp8 scales, and the write of a step's new K/V into them.
// Owns its memory; not thread-safe (engine thread; the write itself is serial per layer).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/paged_kv_view.h"
#include "core/tensor.h"
#include "kv/kv_cache_write.h"

namespace mimo {

// How fp8 scales are chosen (x ~= e4m3 * scale):
//   kPerHeadFirstWrite (default): on a layer's first write, per kv head and separately for K and
//     V, scale = max(amax * headroom, 1e-6) / 448 over that write's rows; then fixed. Later
//     values above headroom * first amax saturate. Headroom 16 costs no precision (e4m3 keeps
//     ~3 mantissa bits across 2^-6..448, so the first amax lands at 28 and values down to
//     ~1/1800 of it stay normal) and keeps a decode-first sequence, whose first write is a
//     single token, from saturating later.
//   kPerTensorFirstWrite: the same with one amax over all heads.
//   kConfigured: every scale = fp8_scale (e.g. from a calibration run).
enum class Fp8ScaleMode { kPerHeadFirstWrite, kPerTensorFirstWrite, kConfigured, kCount };

struct KvStorageOptions {
  DType dtype = DType::kF32;  // kF32 | kBF16 | kF8E4M3
  Fp8ScaleMode fp8_scale_mode = Fp8ScaleMode::kPerHeadFirstWrite;
  float fp8_headroom = 16.0f;
  float fp8_scale = 1.0f;  // kConfigured
};

class KvLayerStorage {
 public:
  KvLayerStorage(const PagedKvLayout& layout, const KvStorageOptions& options);
  KvLayerStorage(const KvLayerStorage&) = delete;
  KvLayerStorage& operator=(const KvLayerStorage&) = delete;
  KvLayerStorage(KvLayerStorage&&) = default;
  KvLayerStorage& operator=(KvLayerStorage&&) = default;

  // k [T, num_kv_heads, head_dim]; v [T, num_kv_heads, v_head_dim]; slots [T].
  void Write(const float* k, const float* v, const int64_t* slots, int num_tokens);

  PagedKvView view() const;

  // One block's K then V bytes, as stored (the prefix-cache tiers copy blocks out and back).
  int64_t block_bytes() const;
  void ReadBlock(int block, uint8_t* out) const;    // out [block_bytes()]
  void WriteBlock(int block, const uint8_t* in);    // in [block_bytes()]
  // fp8: whether the scales are fixed yet (first write or configured); always true otherwise.
  bool scales_fixed() const { return layout_.dtype != DType::kF8E4M3 || scales_set_; }
  // fp8: fixes the scales before the first write (a prefix cache directory's recorded ones);
  // false when they are fixed already or the sizes do not match the heads.
  bool PresetFp8Scales(const std::vector<float>& k, const std::vector<float>& v);
  const PagedKvLayout& layout() const { return layout_; }
  int64_t bytes() const { return layout_.k_bytes() + layout_.v_bytes(); }
  const std::vector<float>& k_scale() const { return k_scale_; }
  const std::vector<float>& v_scale() const { return v_scale_; }

 private:
  void ChooseFp8Scales(const float* k, const float* v, int num_tokens);

  PagedKvLayout layout_;
  KvStorageOptions options_;
  Tensor k_;                    // [num_blocks, block_size, num_kv_heads, head_dim]
  Tensor v_;                    // [num_blocks, block_size, num_kv_heads, v_head_dim]
  std::vector<float> k_scale_;  // [num_kv_heads] (fp8)
  std::vector<float> v_scale_;  // [num_kv_heads] (fp8)
  bool scales_set_ = false;
};

}  // namespace mimo
