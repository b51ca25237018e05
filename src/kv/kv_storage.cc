// Per-layer K/V pools and fp8 scale selection.
#include "kv/kv_storage.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"

namespace mimo {

KvLayerStorage::KvLayerStorage(const PagedKvLayout& layout, const KvStorageOptions& options)
    : layout_(layout), options_(options) {
  MIMO_CHECK(
      layout.dtype == DType::kF32 || layout.dtype == DType::kBF16 || layout.dtype == DType::kF8E4M3,
      "KV cache dtype %s", std::string(DTypeName(layout.dtype)).c_str());
  k_.Reset(layout.dtype,
           {layout.num_blocks, layout.block_size, layout.num_kv_heads, layout.head_dim});
  v_.Reset(layout.dtype,
           {layout.num_blocks, layout.block_size, layout.num_kv_heads, layout.v_head_dim});
  k_scale_.assign(layout.num_kv_heads, 1.0f);
  v_scale_.assign(layout.num_kv_heads, 1.0f);
  if (options.fp8_scale_mode == Fp8ScaleMode::kConfigured) {
    MIMO_CHECK(options.fp8_scale > 0, "fp8 scale %g", options.fp8_scale);
    k_scale_.assign(layout.num_kv_heads, options.fp8_scale);
    v_scale_.assign(layout.num_kv_heads, options.fp8_scale);
    scales_set_ = true;
  }
}

void KvLayerStorage::ChooseFp8Scales(const float* k, const float* v, int num_tokens) {
  const int H = layout_.num_kv_heads;
  auto amax_per_head = [&](const float* x, int width, std::vector<float>* out) {
    out->assign(H, 0.0f);
    for (int t = 0; t < num_tokens; ++t)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < width; ++d)
          (*out)[h] = std::max((*out)[h], std::fabs(x[(int64_t{t} * H + h) * width + d]));
    if (options_.fp8_scale_mode == Fp8ScaleMode::kPerTensorFirstWrite) {
      float m = *std::max_element(out->begin(), out->end());
      out->assign(H, m);
    }
    for (float& s : *out) s = std::max(s * options_.fp8_headroom, 1e-6f) / 448.0f;
  };
  amax_per_head(k, layout_.head_dim, &k_scale_);
  amax_per_head(v, layout_.v_head_dim, &v_scale_);
}

void KvLayerStorage::Write(const float* k, const float* v, const int64_t* slots, int num_tokens) {
  if (num_tokens <= 0) return;
  if (layout_.dtype == DType::kF8E4M3 && !scales_set_) {
    ChooseFp8Scales(k, v, num_tokens);
    scales_set_ = true;
  }
  KvCacheWriteTarget dst;
  dst.layout = layout_;
  dst.k = k_.data();
  dst.v = v_.data();
  dst.k_scale = k_scale_.data();
  dst.v_scale = v_scale_.data();
  WriteKvCache(dst, k, v, slots, num_tokens);
}

bool KvLayerStorage::PresetFp8Scales(const std::vector<float>& k, const std::vector<float>& v) {
  if (scales_fixed() || layout_.dtype != DType::kF8E4M3) return false;
  if (k.size() != k_scale_.size() || v.size() != v_scale_.size()) return false;
  for (const std::vector<float>* x : {&k, &v}) {
    for (float f : *x) {
      if (!(f > 0) || !std::isfinite(f)) return false;
    }
  }
  k_scale_ = k;
  v_scale_ = v;
  scales_set_ = true;
  return true;
}

int64_t KvLayerStorage::block_bytes() const {
  return (layout_.k_bytes() + layout_.v_bytes()) / layout_.num_blocks;
}

void KvLayerStorage::ReadBlock(int block, uint8_t* out) const {
  MIMO_CHECK(block >= 0 && block < layout_.num_blocks, "block %d of %d", block,
             layout_.num_blocks);
  const int64_t kb = layout_.k_bytes() / layout_.num_blocks;
  const int64_t vb = layout_.v_bytes() / layout_.num_blocks;
  std::memcpy(out, static_cast<const uint8_t*>(k_.data()) + block * kb, kb);
  std::memcpy(out + kb, static_cast<const uint8_t*>(v_.data()) + block * vb, vb);
}

void KvLayerStorage::WriteBlock(int block, const uint8_t* in) {
  MIMO_CHECK(block >= 0 && block < layout_.num_blocks, "block %d of %d", block,
             layout_.num_blocks);
  const int64_t kb = layout_.k_bytes() / layout_.num_blocks;
  const int64_t vb = layout_.v_bytes() / layout_.num_blocks;
  std::memcpy(static_cast<uint8_t*>(k_.data()) + block * kb, in, kb);
  std::memcpy(static_cast<uint8_t*>(v_.data()) + block * vb, in + kb, vb);
}

PagedKvView KvLayerStorage::view() const {
  PagedKvView view;
  view.layout = layout_;
  view.k = k_.data();
  view.v = v_.data();
  if (layout_.dtype == DType::kF8E4M3) {
    view.k_scale = k_scale_.data();
    view.v_scale = v_scale_.data();
  }
  return view;
}

}  // namespace mimo
