// The cache rows the fused attend_keys kernels read in place (elementwise_avx2.cc,
// elementwise_avx512.cc): their element types, row addresses, and the next call's rows that a
// call requests while it computes. Templates over the unit's vector type V, like everything the
// two units share (linear_tiles.h): inline code here would be compiled under both units' flags
// and the linker would keep one copy for both.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/dispatch.h"

namespace mimo::cpu {

// Cache element types attend_keys reads in place.
enum class Kv { kF32, kBF16, kFP8 };
template <Kv K>
inline constexpr int64_t kKvBytes = K == Kv::kF32    ? 4
                                    : K == Kv::kBF16 ? 2
                                                     : 1;

// Row j of rows `stride` elements apart from base.
template <class V, Kv K>
inline const void* KvRow(const void* base, int64_t j, int64_t stride) {
  return static_cast<const char*>(base) + j * stride * kKvBytes<K>;
}

// Requests the lines of `bytes` bytes at p into L1 (prefetcht0, AArch64 prfm pldl1keep) through
// asm: GCC drops prefetch-only loops.
template <class V>
inline void PrefetchBytes(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) {
#if defined(__aarch64__)
    asm volatile("prfm pldl1keep, %0" : : "Q"(*(static_cast<const char*>(p) + o)));
#else
    asm volatile("prefetcht0 %0" : : "m"(*(static_cast<const char*>(p) + o)));
#endif
  }
}

// What the group of keys [j0, j0 + 16) of a call requests ahead: rows j0 .. j0 + 15 of the
// caller's next call (the last group also whatever rows are left), so every row is asked for
// once; nothing unless `ahead` (the call's first chunk of states).
template <class V, Kv K>
struct AheadRows {
  int64_t n = 0;            // rows to request
  const void* k = nullptr;  // the first K row to request, or null
  const void* v = nullptr;  // the first V row, or null
  AheadRows(const AttendKeyRows& rows, bool ahead, int64_t j0) {
    n = !ahead ? 0 : j0 + 16 >= rows.n ? rows.n_next - j0 : std::min<int64_t>(16, rows.n_next - j0);
    if (n > 0 && rows.k_next != nullptr) k = KvRow<V, K>(rows.k_next, j0, rows.k_stride);
    if (n > 0 && rows.v_next != nullptr) v = KvRow<V, K>(rows.v_next, j0, rows.v_stride);
  }
};

}  // namespace mimo::cpu
