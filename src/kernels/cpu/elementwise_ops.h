// The element-wise kernels that are the same code at every vector width, written once over a
// vector-op type V (VecAvx2 in vec_avx2.h, VecAvx512 in vec_avx512.h): the vector exp, RmsNorm,
// RoPE rotation, SiluMul and row conversion. elementwise_avx2.cc and elementwise_avx512.cc
// instantiate them under their own -m flags (FillElementwise); the ops whose shape differs per
// width (AVX-512's masked dot/axpy rows, the fused attend_keys) stay in those units; the
// scalar-tail dot/axpy/exp rows of AVX2 and NEON are here, at the end.
// A row's last partial vector follows V::kMaskedTails: AVX-512 runs it as one masked vector
// step, AVX2 in scalar code, each exactly as its own copy of these kernels did, so outputs did
// not change when the copies became this file.
// Every function is a template over V: plain inline code here would be compiled by both units
// with different flags, and the linker would keep one copy for both.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace mimo::cpu {

// exp(x) for x in [-88.37, 88.37] (clamped): 2^n * p(r), r = x - n ln2 (Cody-Waite split), a
// degree-6 polynomial; ~2 ulp. The 2^n step is V's (MulPow2).
template <class V>
inline typename V::F Exp(typename V::F x) {
  using F = typename V::F;
  x = V::Min(V::Max(x, V::Set1(-88.3762626647949f)), V::Set1(88.3762626647949f));
  const F n = V::RoundNearest(x * V::Set1(1.44269504088896341f));
  F r = V::Fnmadd(n, V::Set1(0.693359375f), x);
  r = V::Fnmadd(n, V::Set1(-2.12194440e-4f), r);
  F p = V::Set1(1.9875691500e-4f);
  p = V::Fmadd(p, r, V::Set1(1.3981999507e-3f));
  p = V::Fmadd(p, r, V::Set1(8.3334519073e-3f));
  p = V::Fmadd(p, r, V::Set1(4.1665795894e-2f));
  p = V::Fmadd(p, r, V::Set1(1.6666665459e-1f));
  p = V::Fmadd(p, r, V::Set1(5.0000001201e-1f));
  p = V::Fmadd(p, r * r, r + V::Set1(1.0f));
  return V::MulPow2(p, n);
}

// kLanes elements of an F32|BF16|F16 row from element i, as fp32; LoadRowN the first n < kLanes
// (lanes >= n +0), LoadRowScalar element i alone.
template <class V>
inline typename V::F LoadRow(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return V::LoadBf16(static_cast<const uint16_t*>(p) + i);
    case DType::kF16:
      return V::LoadF16(static_cast<const uint16_t*>(p) + i);
    default:
      return V::Load(static_cast<const float*>(p) + i);
  }
}
template <class V>
inline typename V::F LoadRowN(const void* p, DType dtype, int64_t i, int64_t n) {
  switch (dtype) {
    case DType::kBF16:
      return V::LoadBf16N(static_cast<const uint16_t*>(p) + i, n);
    case DType::kF16:
      return V::LoadF16N(static_cast<const uint16_t*>(p) + i, n);
    default:
      return V::LoadN(static_cast<const float*>(p) + i, n);
  }
}
template <class V>
inline float LoadRowScalar(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return BF16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// The sum of squares in two accumulators (2 x kLanes columns per step), the norm in double.
template <class V>
void RmsNorm(const float* x, int64_t T, int64_t dim, const TensorView& weight, float eps,
             float* out) {
  using F = typename V::F;
  constexpr int64_t kLanes = V::kLanes;
  const void* wp = weight.data;  // [dim]
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * dim;
    float* ot = out + t * dim;
    F a0 = V::Zero(), a1 = V::Zero();
    int64_t i = 0;
    for (; i + 2 * kLanes <= dim; i += 2 * kLanes) {
      const F v0 = V::Load(xt + i), v1 = V::Load(xt + i + kLanes);
      a0 = V::Fmadd(v0, v0, a0);
      a1 = V::Fmadd(v1, v1, a1);
    }
    for (; i + kLanes <= dim; i += kLanes) {
      const F v = V::Load(xt + i);
      a0 = V::Fmadd(v, v, a0);
    }
    if constexpr (V::kMaskedTails) {
      if (i < dim) {
        const F v = V::LoadN(xt + i, dim - i);
        a0 = V::Fmadd(v, v, a0);
      }
    }
    double ss = V::ReduceAdd(a0 + a1);
    if constexpr (!V::kMaskedTails) {
      for (; i < dim; ++i) ss += static_cast<double>(xt[i]) * xt[i];
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    const F iv = V::Set1(inv);
    for (i = 0; i + kLanes <= dim; i += kLanes) {
      const F v = V::Load(xt + i) * iv;
      V::Store(ot + i, v * LoadRow<V>(wp, weight.dtype, i));
    }
    if constexpr (V::kMaskedTails) {
      if (const int64_t n = dim - i; n > 0) {
        const F v = V::LoadN(xt + i, n) * iv;
        V::StoreN(ot + i, v * LoadRowN<V>(wp, weight.dtype, i, n), n);
      }
    } else {
      for (; i < dim; ++i) ot[i] = (xt[i] * inv) * LoadRowScalar<V>(wp, weight.dtype, i);
    }
  }
}

template <class V>
void RopeRotate(float* x, int64_t T, int num_heads, int head_dim, int rotary_dim, const float* cos,
                const float* sin) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes;
  const int half = rotary_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    const float* ct = cos + t * half;  // [half]
    const float* st = sin + t * half;  // [half]
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;  // [head_dim]
      int i = 0;
      for (; i + kLanes <= half; i += kLanes) {
        const F a = V::Load(v + i), b = V::Load(v + i + half);
        const F c = V::Load(ct + i), s = V::Load(st + i);
        V::Store(v + i, V::Fmsub(a, c, b * s));
        V::Store(v + i + half, V::Fmadd(a, s, b * c));
      }
      if constexpr (V::kMaskedTails) {
        if (const int n = half - i; n > 0) {
          const F a = V::LoadN(v + i, n), b = V::LoadN(v + i + half, n);
          const F c = V::LoadN(ct + i, n), s = V::LoadN(st + i, n);
          V::StoreN(v + i, V::Fmsub(a, c, b * s), n);
          V::StoreN(v + i + half, V::Fmadd(a, s, b * c), n);
        }
      } else {
        for (; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * ct[i] - b * st[i];
          v[i + half] = b * ct[i] + a * st[i];
        }
      }
    }
  }
}

template <class V>
void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  using F = typename V::F;
  const F one = V::Set1(1.0f);
  auto silu_mul = [&](F g, F u) { return g / (one + Exp<V>(V::Zero() - g)) * u; };
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    V::Store(out + i, silu_mul(V::Load(gate + i), V::Load(up + i)));
  }
  if constexpr (V::kMaskedTails) {
    if (i < n)
      V::StoreN(out + i, silu_mul(V::LoadN(gate + i, n - i), V::LoadN(up + i, n - i)), n - i);
  } else {
    for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

template <class V>
void ConvertRow(const void* src, DType dtype, int64_t n, float* dst) {
  MIMO_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
             "ConvertRow: unsupported dtype %d", static_cast<int>(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::Store(dst + i, LoadRow<V>(src, dtype, i));
  if constexpr (V::kMaskedTails) {
    if (i < n) V::StoreN(dst + i, LoadRowN<V>(src, dtype, i, n - i), n - i);
  } else {
    for (; i < n; ++i) dst[i] = LoadRowScalar<V>(src, dtype, i);
  }
}

// The KernelTable entries above, at V's width.
template <class V>
void FillElementwise(KernelTable* t) {
  t->rms_norm = &RmsNorm<V>;
  t->rope_rotate = &RopeRotate<V>;
  t->silu_mul = &SiluMul<V>;
  t->convert_row = &ConvertRow<V>;
}

// The KernelTable entries a CPU unit writes itself (its attention kernels and probes differ per
// width: see elementwise_avx2.cc / elementwise_avx512.cc).
struct UnitKernels {
  Isa isa;
  decltype(KernelTable::linear_rows) linear_rows;
  decltype(KernelTable::dot_rows) dot_rows;
  decltype(KernelTable::axpy_rows) axpy_rows;
  decltype(KernelTable::exp_shifted) exp_shifted;
  decltype(KernelTable::attend_keys) attend_keys;
  decltype(KernelTable::read_probe) read_probe;
  decltype(KernelTable::fma_probe) fma_probe;
};

// A CPU unit's KernelTable: the entries above at V's width, then the unit's own.
template <class V>
void FillUnitTable(KernelTable* t, const UnitKernels& u) {
  FillElementwise<V>(t);
  t->isa = u.isa;
  t->linear_rows = u.linear_rows;
  t->dot_rows = u.dot_rows;
  t->axpy_rows = u.axpy_rows;
  t->exp_shifted = u.exp_shifted;
  t->attend_keys = u.attend_keys;
  t->read_probe = u.read_probe;
  t->fma_probe = u.fma_probe;
}

// The attention block rows of a width whose partial vectors run in scalar code (AVX2, NEON;
// !V::kMaskedTails). AVX-512's masked tails sum a row's last columns in another order, so
// elementwise_avx512.cc keeps its own, and its outputs its own bits.

// e[j] = exp(s[j] - m); a NaN score stays NaN (Exp's clamp would hide it).
template <class V>
void ExpShiftedScalarTail(const float* s, int64_t n, float m, float* e) {
  static_assert(!V::kMaskedTails);
  using F = typename V::F;
  const F mv = V::Set1(m);
  int64_t j = 0;
  for (; j + V::kLanes <= n; j += V::kLanes) {
    const F x = V::Load(s + j) - mv;
    V::Store(e + j, V::KeepNan(x, Exp<V>(x)));
  }
  for (; j < n; ++j) e[j] = std::exp(s[j] - m);
}

// scores[j] = scale * q . k[j]: 2 keys at a time, full vectors, a scalar column tail.
template <class V>
void DotRowsScalarTail(const float* q, const float* k, int64_t n, int64_t d, float scale,
                       float* scores) {
  static_assert(!V::kMaskedTails);
  using F = typename V::F;
  const int64_t dv = d / V::kLanes * V::kLanes;
  auto tail = [&](const float* kj) {
    float s = 0.0f;
    for (int64_t c = dv; c < d; ++c) s += q[c] * kj[c];
    return s;
  };
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const float* k0 = k + j * d;
    const float* k1 = k0 + d;
    F a0 = V::Zero(), a1 = a0;
    for (int64_t c = 0; c < dv; c += V::kLanes) {
      const F qv = V::Load(q + c);
      a0 = V::Fmadd(qv, V::Load(k0 + c), a0);
      a1 = V::Fmadd(qv, V::Load(k1 + c), a1);
    }
    scores[j] = (V::ReduceAdd(a0) + tail(k0)) * scale;
    scores[j + 1] = (V::ReduceAdd(a1) + tail(k1)) * scale;
  }
  for (; j < n; ++j) {
    F a = V::Zero();
    for (int64_t c = 0; c < dv; c += V::kLanes) {
      a = V::Fmadd(V::Load(q + c), V::Load(k + j * d + c), a);
    }
    scores[j] = (V::ReduceAdd(a) + tail(k + j * d)) * scale;
  }
}

// acc += sum_j e[j] * v[j]: full vectors of columns, the keys in order, a scalar column tail.
template <class V>
void AxpyRowsScalarTail(const float* e, const float* v, int64_t n, int64_t d, float* acc) {
  static_assert(!V::kMaskedTails);
  using F = typename V::F;
  int64_t c = 0;
  for (; c + V::kLanes <= d; c += V::kLanes) {
    F a = V::Load(acc + c);
    for (int64_t j = 0; j < n; ++j) a = V::Fmadd(V::Set1(e[j]), V::Load(v + j * d + c), a);
    V::Store(acc + c, a);
  }
  for (; c < d; ++c) {
    for (int64_t j = 0; j < n; ++j) acc[c] += e[j] * v[j * d + c];
  }
}

}  // namespace mimo::cpu
