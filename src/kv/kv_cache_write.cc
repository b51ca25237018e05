// Cache-write kernel: quantize (f32 / bf16 / fp8 e4m3 with per-head scales) and scatter.
#include "kv/kv_cache_write.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace mimo {

namespace {

template <typename Store>
void Scatter(const PagedKvLayout& L, void* dst_base, const float* src, int width,
             const int64_t* slots, int num_tokens, bool is_v, const float* scale, Store store) {
  for (int t = 0; t < num_tokens; ++t) {
    const int64_t slot = slots[t];
    MIMO_CHECK(slot >= 0 && slot < L.num_slots(), "KV slot %lld out of range [0, %lld)",
               static_cast<long long>(slot), static_cast<long long>(L.num_slots()));
    for (int h = 0; h < L.num_kv_heads; ++h) {
      const int64_t di = is_v ? L.VIndex(slot, h) : L.KIndex(slot, h);
      const float* row = src + (int64_t{t} * L.num_kv_heads + h) * width;
      const float s = scale ? scale[h] : 1.0f;
      for (int d = 0; d < width; ++d) store(dst_base, di + d, row[d], s);
    }
  }
}

}  // namespace

void WriteKvCache(const KvCacheWriteTarget& dst, const float* k, const float* v,
                  const int64_t* slots, int num_tokens) {
  const PagedKvLayout& L = dst.layout;
  auto write_both = [&](auto store) {
    Scatter(L, dst.k, k, L.head_dim, slots, num_tokens, false, dst.k_scale, store);
    Scatter(L, dst.v, v, L.v_head_dim, slots, num_tokens, true, dst.v_scale, store);
  };
  switch (L.dtype) {
    case DType::kF32:
      write_both([](void* b, int64_t i, float x, float) { static_cast<float*>(b)[i] = x; });
      break;
    case DType::kBF16:
      write_both(
          [](void* b, int64_t i, float x, float) { static_cast<uint16_t*>(b)[i] = F32ToBF16(x); });
      break;
    case DType::kF8E4M3:
      MIMO_CHECK(dst.k_scale && dst.v_scale, "fp8 KV cache without scales");
      write_both([](void* b, int64_t i, float x, float s) {
        static_cast<uint8_t*>(b)[i] = EncodeF8E4M3(x / s);
      });
      break;
    default:
      MIMO_ABORT("KV cache dtype %s not supported", std::string(DTypeName(L.dtype)).c_str());
  }
}

}  // namespace mimo
