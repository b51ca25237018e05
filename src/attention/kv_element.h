// Decoding of cached K/V elements to fp32, one inline function per cache dtype, so backends
// can template their inner loops on the storage type (one dtype switch per Run, none per element).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace mimo {

// Storage type tags: KvF32 (exact), KvBF16, KvFp8 (e4m3, value = decode(byte) * scale).
struct KvF32 {
  using Storage = float;
  static constexpr DType kDType = DType::kF32;
  static float Load(const Storage* p, int64_t i, float /*scale*/) { return p[i]; }
};
struct KvBF16 {
  using Storage = uint16_t;
  static constexpr DType kDType = DType::kBF16;
  static float Load(const Storage* p, int64_t i, float /*scale*/) { return BF16ToF32(p[i]); }
};
struct KvFp8 {
  using Storage = uint8_t;
  static constexpr DType kDType = DType::kF8E4M3;
  static float Load(const Storage* p, int64_t i, float scale) { return F8E4M3ToF32(p[i]) * scale; }
};

// Calls fn(Tag{}) for the cache dtype; returns false for a dtype no cache uses.
template <typename Fn>
bool DispatchKvDType(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32:
      fn(KvF32{});
      return true;
    case DType::kBF16:
      fn(KvBF16{});
      return true;
    case DType::kF8E4M3:
      fn(KvFp8{});
      return true;
    default:
      return false;
  }
}

// Copies n elements starting at element `index` to fp32.
template <typename Tag>
inline void LoadKvRow(const void* base, int64_t index, int n, float scale, float* out) {
  const auto* p = static_cast<const typename Tag::Storage*>(base);
  for (int d = 0; d < n; ++d) out[d] = Tag::Load(p, index + d, scale);
}

}  // namespace mimo
