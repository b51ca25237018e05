// AVX-512 element-wise kernels: elementwise_ops.h at 16 lanes (RmsNorm, RoPE rotation, SiluMul,
// row conversion, exp) and this width's attention kernels (exp of shifted scores, dot and axpy
// rows, the fused attend_keys); the AVX-512 probe and the AVX-512 KernelTable. Tails use masked
// loads/stores.
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_*; GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cpu/attend_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_ops.h"
#include "kernels/cpu/vec_avx512.h"

namespace mimo::avx512 {
namespace {

using V = VecAvx512;  // this unit's vector width
constexpr auto TailMask = &V::TailMask;

// scores[j] = scale * q . k[j]: 4 keys at a time, one accumulator each, masked tail columns.
void DotRows(const float* q, const float* k, int64_t n, int64_t d, float scale, float* scores) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* kj = k + j * d;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 m = d - c >= 16 ? 0xffff : TailMask(d - c);
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + c);
      a0 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, kj + c), a0);
      a1 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, kj + d + c), a1);
      a2 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, kj + 2 * d + c), a2);
      a3 = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, kj + 3 * d + c), a3);
    }
    scores[j] = _mm512_reduce_add_ps(a0) * scale;
    scores[j + 1] = _mm512_reduce_add_ps(a1) * scale;
    scores[j + 2] = _mm512_reduce_add_ps(a2) * scale;
    scores[j + 3] = _mm512_reduce_add_ps(a3) * scale;
  }
  for (; j < n; ++j) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 m = d - c >= 16 ? 0xffff : TailMask(d - c);
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + c), _mm512_maskz_loadu_ps(m, k + j * d + c),
                          a);
    }
    scores[j] = _mm512_reduce_add_ps(a) * scale;
  }
}

// acc += sum_j e[j] * v[j]: 16 columns at a time, the keys in order.
void AxpyRows(const float* e, const float* v, int64_t n, int64_t d, float* acc) {
  for (int64_t c = 0; c < d; c += 16) {
    const __mmask16 m = d - c >= 16 ? 0xffff : TailMask(d - c);
    __m512 a = _mm512_maskz_loadu_ps(m, acc + c);
    for (int64_t j = 0; j < n; ++j) {
      a = _mm512_fmadd_ps(_mm512_set1_ps(e[j]), _mm512_maskz_loadu_ps(m, v + j * d + c), a);
    }
    _mm512_mask_storeu_ps(acc + c, m, a);
  }
}

void ExpShifted(const float* s, int64_t n, float m, float* e) {
  const __m512 mv = _mm512_set1_ps(m);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? 0xffff : TailMask(n - j);
    const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);  // Exp's clamp would hide it
    _mm512_mask_storeu_ps(e + j, k, _mm512_mask_mov_ps(cpu::Exp<V>(x), nan, x));
  }
}

// ---- attend_keys: the fused online-softmax update (see KernelTable::attend_keys) ----
// Per group of up to 16 keys and per quad of states: scores by a 4-state x 4-key register tile
// over the head dim, reduced across lanes by a shuffle tree that leaves the 16 scores of a state
// in one vector (45 shuffles and adds where 16 separate horizontal sums take about 130), the
// softmax update on that vector, then the value sums as a 4-state x 64-column register tile.

// a[i] holds key i's 16 partial sums; the result's quarter i holds key i's 4 partial sums.
inline __m512 ReduceQuad(const __m512 a[4]) {
  const __m512 x01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], 0x44), _mm512_shuffle_f32x4(a[0], a[1], 0xEE));
  const __m512 x23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], 0x44), _mm512_shuffle_f32x4(a[2], a[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x01, x23, 0x88), _mm512_shuffle_f32x4(x01, x23, 0xDD));
}

// t[g] from ReduceQuad of keys 4g..4g+3 -> lane j = full sum of key j.
inline __m512 ReduceKeys(const __m512 t[4]) {
  const __m512 u01 = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 u23 = _mm512_add_ps(_mm512_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane 4i + r of w holds key 4r + i.
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(u01, u23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, w);
}

inline __mmask16 ColumnMask(int64_t remaining) {
  return remaining >= 16 ? 0xffff : remaining > 0 ? TailMask(remaining) : 0;
}

using cpu::AheadRows;
using cpu::kKvBytes;
using cpu::Kv;

// 16 (or the first popcount(m)) elements of a cache row as fp32. fp8: decode(e4m3) * scale,
// through the exact f16 remap (e4m3_avx512.h: 2^-8 * the e4m3 value; NaN codes -> NaN), so
// `scale256` is 256 * the head's scale (a power-of-two product: the same rounding as
// decode * scale).
template <Kv K>
inline __m512 LoadKv(const void* row, int64_t c, __mmask16 m, __m512 scale256) {
  if constexpr (K == Kv::kBF16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + c);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (K == Kv::kFP8) {
    return _mm512_mul_ps(
        E4M3x16ToUnits(_mm_maskz_loadu_epi8(m, static_cast<const uint8_t*>(row) + c)), scale256);
  } else {
    (void)scale256;
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + c);
  }
}

// NS states (q rows, stride dk) against keys [0, nn) of k (rows k_stride apart), nn <= 16:
// scores[s] lane j = scale * q[s] . k[j], lanes >= nn are -inf.
// k_ahead (may be null): rows to request ahead, 4 per key quad computed.
template <int NS, Kv K>
inline void ScoreGroup(const float* q, const void* k, int64_t k_stride, __m512 kscale, int64_t nn,
                       int64_t dk, float scale, const void* k_ahead, int64_t n_ahead,
                       __m512 scores[NS]) {
  __m512 t[NS][4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    if (4 * g >= nn) {
#pragma GCC unroll 4
      for (int s = 0; s < NS; ++s) t[s][g] = _mm512_setzero_ps();
      continue;
    }
    const void* kr[4];  // keys past nn repeat the last one; their lanes are masked below
    for (int i = 0; i < 4; ++i)
      kr[i] = cpu::KvRow<V, K>(k, std::min<int64_t>(4 * g + i, nn - 1), k_stride);
    for (int64_t i = 4 * g; k_ahead != nullptr && i < std::min<int64_t>(4 * g + 4, n_ahead); ++i) {
      cpu::PrefetchBytes<V>(cpu::KvRow<V, K>(k_ahead, i, k_stride), dk * kKvBytes<K>);
    }
    __m512 a[NS][4];
#pragma GCC unroll 4
    for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) a[s][i] = _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < dk; c += 16) {
      const __mmask16 m = ColumnMask(dk - c);
      __m512 kv[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) kv[i] = LoadKv<K>(kr[i], c, m, kscale);
#pragma GCC unroll 4
      for (int s = 0; s < NS; ++s) {
        const __m512 qv = _mm512_maskz_loadu_ps(m, q + s * dk + c);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) a[s][i] = _mm512_fmadd_ps(qv, kv[i], a[s][i]);
      }
    }
#pragma GCC unroll 4
    for (int s = 0; s < NS; ++s) t[s][g] = ReduceQuad(a[s]);
  }
  const __mmask16 valid = TailMask(nn);  // nn <= 16
  const __m512 sv = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(-INFINITY);
#pragma GCC unroll 4
  for (int s = 0; s < NS; ++s) {
    scores[s] = _mm512_mask_mov_ps(neg_inf, valid, _mm512_mul_ps(ReduceKeys(t[s]), sv));
  }
}

// acc[s][c] += sum over j < nn ascending of e[s][j] * v[j][c], 64 columns per pass.
// v_ahead (may be null): rows to request ahead, one per key in the first column pass.
template <int NS, Kv K>
inline void ValueSums(const float (*e)[16], const void* v, int64_t v_stride, __m512 vscale,
                      int64_t nn, int64_t dv, const void* v_ahead, int64_t n_ahead, float* acc) {
  for (int64_t c0 = 0; c0 < dv; c0 += 64) {
    __mmask16 m[4];
    for (int i = 0; i < 4; ++i) m[i] = ColumnMask(dv - c0 - 16 * i);
    __m512 a[NS][4];
#pragma GCC unroll 4
    for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) a[s][i] = _mm512_maskz_loadu_ps(m[i], acc + s * dv + c0 + 16 * i);
    }
    for (int64_t j = 0; j < nn; ++j) {
      if (c0 == 0 && v_ahead != nullptr && j < n_ahead) {
        cpu::PrefetchBytes<V>(cpu::KvRow<V, K>(v_ahead, j, v_stride), dv * kKvBytes<K>);
      }
      __m512 vr[4];
      const void* vj = cpu::KvRow<V, K>(v, j, v_stride);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) vr[i] = LoadKv<K>(vj, c0 + 16 * i, m[i], vscale);
#pragma GCC unroll 4
      for (int s = 0; s < NS; ++s) {
        const __m512 es = _mm512_set1_ps(e[s][j]);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) a[s][i] = _mm512_fmadd_ps(es, vr[i], a[s][i]);
      }
    }
#pragma GCC unroll 4
    for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) _mm512_mask_storeu_ps(acc + s * dv + c0 + 16 * i, m[i], a[s][i]);
    }
  }
}

// With `ahead` (the first quad of a call), the caller's next rows are requested: the group
// starting at j0 requests rows j0.. of the next call, so every row is asked for once.
template <int NS, Kv K>
void AttendQuad(const float* q, const AttendKeyRows& rows, bool ahead, int64_t dk, int64_t dv,
                float scale, float* m, float* l, float* acc) {
  const int64_t n = rows.n;
  const __m512 kscale = _mm512_set1_ps(256.0f * rows.k_scale);
  const __m512 vscale = _mm512_set1_ps(256.0f * rows.v_scale);
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t nn = std::min<int64_t>(16, n - j0);
    const AheadRows<V, K> next(rows, ahead, j0);
    __m512 sc[NS];
    ScoreGroup<NS, K>(q, cpu::KvRow<V, K>(rows.k, j0, rows.k_stride), rows.k_stride, kscale, nn, dk,
                      scale, next.k, next.n, sc);
    alignas(64) float e[NS][16];  // the weights exp(score - m); 0 past nn
    const __mmask16 valid = TailMask(nn);
    for (int s = 0; s < NS; ++s) {
      const float group_max = _mm512_reduce_max_ps(sc[s]);
      float* a = acc + s * dv;  // [dv]
      if (group_max > m[s]) {
        const float c = std::exp(m[s] - group_max);  // 0 when m was -inf
        l[s] *= c;
        const __m512 cv = _mm512_set1_ps(c);
        for (int64_t d = 0; d < dv; d += 16) {
          const __mmask16 dm = ColumnMask(dv - d);
          _mm512_mask_storeu_ps(a + d, dm, _mm512_mul_ps(_mm512_maskz_loadu_ps(dm, a + d), cv));
        }
        m[s] = group_max;
      }
      const __m512 x = _mm512_sub_ps(sc[s], _mm512_set1_ps(m[s]));
      const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);  // Exp's clamp would hide it
      const __m512 w = _mm512_maskz_mov_ps(valid, _mm512_mask_mov_ps(cpu::Exp<V>(x), nan, x));
      l[s] += _mm512_reduce_add_ps(w);
      _mm512_store_ps(e[s], w);
    }
    ValueSums<NS, K>(e, cpu::KvRow<V, K>(rows.v, j0, rows.v_stride), rows.v_stride, vscale, nn, dv,
                     next.v, next.n, acc);
  }
}

template <Kv K>
void AttendStates(const float* q, int num_states, const AttendKeyRows& rows, int64_t dk, int64_t dv,
                  float scale, float* m, float* l, float* acc) {
  for (int s = 0; s < num_states; s += 4) {
    const float* qs = q + s * dk;
    float* as = acc + s * dv;
    const bool ahead = s == 0;
    switch (std::min(4, num_states - s)) {
      case 4:
        AttendQuad<4, K>(qs, rows, ahead, dk, dv, scale, m + s, l + s, as);
        break;
      case 3:
        AttendQuad<3, K>(qs, rows, ahead, dk, dv, scale, m + s, l + s, as);
        break;
      case 2:
        AttendQuad<2, K>(qs, rows, ahead, dk, dv, scale, m + s, l + s, as);
        break;
      default:
        AttendQuad<1, K>(qs, rows, ahead, dk, dv, scale, m + s, l + s, as);
        break;
    }
  }
}

void AttendKeys(const float* q, int num_states, const AttendKeyRows& rows, int64_t dk, int64_t dv,
                float scale, float* m, float* l, float* acc) {
  switch (rows.dtype) {
    case DType::kBF16:
      return AttendStates<Kv::kBF16>(q, num_states, rows, dk, dv, scale, m, l, acc);
    case DType::kF8E4M3:
      return AttendStates<Kv::kFP8>(q, num_states, rows, dk, dv, scale, m, l, acc);
    case DType::kF32:
      return AttendStates<Kv::kF32>(q, num_states, rows, dk, dv, scale, m, l, acc);
    default:
      MIMO_ABORT("attend_keys: unsupported KV dtype %d", static_cast<int>(rows.dtype));
  }
}

}  // namespace

bool ProbeInstructions() {
  volatile float in[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  float a[16], out[16];
  for (int i = 0; i < 16; ++i) a[i] = in[i];
  const __m512 v = _mm512_loadu_ps(a);  // AVX-512F
  const __m512 f = _mm512_fmadd_ps(v, v, v);
  const __m256i w = _mm256_maskz_loadu_epi16(0x00ff, a);                          // BW + VL
  const __m512 d = _mm512_and_ps(f, _mm512_castsi512_ps(_mm512_set1_epi32(-1)));  // DQ
  const __mmask16 k = _mm512_cmp_ps_mask(d, f, _CMP_EQ_OQ);
  _mm512_storeu_ps(out, _mm512_maskz_mov_ps(k, d));
  return out[1] == 6.0f &&
         _mm256_extract_epi16(w, 0) == static_cast<int16_t>(F32ToBits(1.0f) & 0xffff);
}

void FillTable(KernelTable* t) {
  cpu::FillUnitTable<V>(t, {Isa::kAvx512, &LinearRows, &DotRows, &AxpyRows, &ExpShifted,
                            &AttendKeys, &ReadProbe, &FmaProbe});
}

}  // namespace mimo::avx512
