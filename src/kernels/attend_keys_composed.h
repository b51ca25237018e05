// KernelTable::attend_keys built from the three block primitives (dot_rows, exp_shifted,
// axpy_rows): the scalar reference uses it, and the AVX2 level for shapes its fused kernel does
// not tile; the AVX2 and AVX-512 levels have fused kernels, checked like it against float64
// sums (tests/kernels/elementwise_test.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/dispatch.h"

namespace mimo {

// Keys are taken in groups of this many; each group is one online-softmax update per state.
inline constexpr int64_t kAttendKeyGroup = 16;

// dst[i] = decode(e4m3 src[i]) * scale, exact decode, one rounding.   src, dst [n]
inline void Fp8RowScalar(const uint8_t* src, int64_t n, float scale, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(src[i]) * scale;
}

template <auto Convert, auto Dot, auto ExpShift, auto Axpy, auto Fp8Row = &Fp8RowScalar>
void AttendKeysComposed(const float* q, int num_states, const AttendKeyRows& rows, int64_t dk,
                        int64_t dv, float scale, float* m, float* l, float* acc) {
  const size_t elem = DTypeSize(rows.dtype);
  const int64_t n = rows.n;
  thread_local std::vector<float> kt, vt;  // one group's rows as fp32: [16, dk], [16, dv]
  kt.resize(static_cast<size_t>(kAttendKeyGroup * dk));
  vt.resize(static_cast<size_t>(kAttendKeyGroup * dv));
  float e[kAttendKeyGroup];  // scores, then weights, of one group of keys
  for (int64_t j0 = 0; j0 < n; j0 += kAttendKeyGroup) {
    const int64_t nn = std::min(kAttendKeyGroup, n - j0);
    for (int64_t j = 0; j < nn; ++j) {
      const char* kr = static_cast<const char*>(rows.k) + (j0 + j) * rows.k_stride * elem;
      const char* vr = static_cast<const char*>(rows.v) + (j0 + j) * rows.v_stride * elem;
      if (rows.dtype == DType::kF8E4M3) {
        Fp8Row(reinterpret_cast<const uint8_t*>(kr), dk, rows.k_scale, &kt[j * dk]);
        Fp8Row(reinterpret_cast<const uint8_t*>(vr), dv, rows.v_scale, &vt[j * dv]);
      } else {
        Convert(kr, rows.dtype, dk, &kt[j * dk]);
        Convert(vr, rows.dtype, dv, &vt[j * dv]);
      }
    }
    for (int s = 0; s < num_states; ++s) {
      float* a = acc + s * dv;  // [dv]
      Dot(q + s * dk, kt.data(), nn, dk, scale, e);
      float group_max = -INFINITY;
      for (int64_t j = 0; j < nn; ++j) group_max = std::max(group_max, e[j]);
      if (group_max > m[s]) {
        const float c = std::exp(m[s] - group_max);  // 0 when m was -inf
        l[s] *= c;
        for (int64_t d = 0; d < dv; ++d) a[d] *= c;
        m[s] = group_max;
      }
      ExpShift(e, nn, m[s], e);
      for (int64_t j = 0; j < nn; ++j) l[s] += e[j];
      Axpy(e, vt.data(), nn, dv, a);
    }
  }
}

}  // namespace mimo
