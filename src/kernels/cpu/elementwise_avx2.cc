// AVX2 element-wise kernels: elementwise_ops.h at 8 lanes (RmsNorm, RoPE rotation, SiluMul, row
// conversion, exp) and this width's attention kernels (exp of shifted scores, dot and axpy rows,
// fp8 rows, the fused attend_keys); the AVX2 probe and the AVX2 KernelTable.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/attend_keys_composed.h"
#include "kernels/cpu/attend_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_ops.h"
#include "kernels/cpu/vec_avx2.h"

namespace mimo::avx2 {
namespace {

using V = VecAvx2;  // this unit's vector width

void ExpShifted(const float* s, int64_t n, float m, float* e) {
  cpu::ExpShiftedScalarTail<V>(s, n, m, e);
}
void DotRows(const float* q, const float* k, int64_t n, int64_t d, float scale, float* scores) {
  cpu::DotRowsScalarTail<V>(q, k, n, d, scale, scores);
}
void AxpyRows(const float* e, const float* v, int64_t n, int64_t d, float* acc) {
  cpu::AxpyRowsScalarTail<V>(e, v, n, d, acc);
}

// dst[i] = decode(e4m3 src[i]) * scale: the exact remap (e4m3_avx2.h, 2^-8 * the value, NaN
// codes -> NaN) times 256 * scale (the same rounding as decode * scale); the tail through a
// zero-padded copy.
void Fp8Row(const uint8_t* src, int64_t n, float scale, float* dst) {
  const __m256 s = _mm256_set1_ps(256.0f * scale);
  auto decode8 = [&](const uint8_t* p) { return _mm256_mul_ps(E4M3x8ToUnits(p), s); };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, decode8(src + i));
  if (i < n) {
    uint8_t buf[8] = {};
    float out[8];
    for (int64_t k = i; k < n; ++k) buf[k - i] = src[k];
    _mm256_storeu_ps(out, decode8(buf));
    for (int64_t k = i; k < n; ++k) dst[k] = out[k - i];
  }
}

// ---- attend_keys: the fused online-softmax update (see KernelTable::attend_keys) ----
// The AVX-512 unit's design at 8 lanes, rows read in place: per group of up to 16 keys and per
// chunk of up to NS states, the scores by an NS-state x KP-key register tile over the head dim,
// each pair of keys folded by one hadd as it finishes and 8 keys then summed across lanes by a
// shuffle tree that leaves a state's 8 scores in one vector; the softmax update on those
// vectors; the value sums as an NS-state x CV-vector register tile. fp8 rows are decoded by the
// exact f16 remap (2^-8 x the code's value) with the head's scale folded into q (K) and into
// the weights (V): one product per state instead of one per element. A shape this tiling does
// not cover (dk % 8, dv % 16, dk > kMaxDk) takes the composed update. The composed update
// (a group's rows converted to fp32 in L1, then 2-key dot products with a horizontal sum per
// key) ran at 16-17% of the FMA peak at 32k keys, this at 41-43% (docs/PERFORMANCE.md).

using cpu::AheadRows;
using cpu::kKvBytes;
using cpu::Kv;
constexpr int64_t kMaxDk = 256;  // q rows copied (fp8: scaled) to the stack

// 8 elements of a cache row from element c as fp32 (fp8: 2^-8 x the e4m3 value).
template <Kv K>
inline __m256 LoadKv(const void* row, int64_t c) {
  if constexpr (K == Kv::kBF16) {
    return V::LoadBf16(static_cast<const uint16_t*>(row) + c);
  } else if constexpr (K == Kv::kFP8) {
    return E4M3x8ToUnits(static_cast<const uint8_t*>(row) + c);
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(row) + c);
  }
}

// hadd(x, y) = [x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5, x6+x7, y4+y5, y6+y7]: for keys x, y the
// pair's 4 partial sums each. From the pairs of keys 0..7 -> lane i = key i's sum.
inline __m256 ReducePairs(__m256 p01, __m256 p23, __m256 p45, __m256 p67) {
  const __m256 lo = _mm256_hadd_ps(p01, p23), hi = _mm256_hadd_ps(p45, p67);  // [k0..3 | k0..3]
  return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}

// NS states (q rows, stride dk, 32-byte aligned, already scaled for fp8) against keys [0, nn)
// of k, nn <= 16: scores[s][h] lane i = scale * q[s] . k[8h + i], lanes past nn -inf. KP keys
// (1 or 2) per register tile; each pair of keys is folded to one vector of partials at once.
// k_ahead (may be null): the next call's rows [0, n_ahead) requested as the keys go.
template <int NS, int KP, Kv K>
[[gnu::always_inline]] inline void ScoreGroup(const float* q, const void* k, int64_t k_stride,
                                              int64_t nn, int64_t dk, float scale,
                                              const void* k_ahead, int64_t n_ahead,
                                              __m256 scores[NS][2]) {
  static_assert(KP == 1 || KP == 2);
  __m256 pairs[NS][8];               // keys 2p, 2p + 1 folded by hadd
  [[maybe_unused]] __m256 even[NS];  // KP == 1: the pair's first key
  if constexpr (KP == 1) {
#pragma GCC unroll 8
    for (int s = 0; s < NS; ++s) even[s] = _mm256_setzero_ps();
  }
  const int64_t kn = (nn + 7) / 8 * 8;  // keys past nn repeat the last one; masked below
  for (int64_t j = 0; j < kn; j += KP) {
    const void* kr[KP];
#pragma GCC unroll 2
    for (int i = 0; i < KP; ++i)
      kr[i] = cpu::KvRow<V, K>(k, std::min<int64_t>(j + i, nn - 1), k_stride);
    for (int64_t i = j; k_ahead != nullptr && i < std::min<int64_t>(j + KP, n_ahead); ++i) {
      cpu::PrefetchBytes<V>(cpu::KvRow<V, K>(k_ahead, i, k_stride), dk * kKvBytes<K>);
    }
    __m256 a[NS][KP];
#pragma GCC unroll 8
    for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 2
      for (int i = 0; i < KP; ++i) a[s][i] = _mm256_setzero_ps();
    }
    for (int64_t c = 0; c < dk; c += 8) {
      __m256 kv[KP];
#pragma GCC unroll 2
      for (int i = 0; i < KP; ++i) kv[i] = LoadKv<K>(kr[i], c);
#pragma GCC unroll 8
      for (int s = 0; s < NS; ++s) {
        __m256 qv = _mm256_load_ps(q + s * dk + c);
        if constexpr (KP > 1) asm("" : "+x"(qv));  // one load for the KP keys, not one each
#pragma GCC unroll 2
        for (int i = 0; i < KP; ++i) a[s][i] = _mm256_fmadd_ps(qv, kv[i], a[s][i]);
      }
    }
#pragma GCC unroll 8
    for (int s = 0; s < NS; ++s) {
      if constexpr (KP == 2) {
        pairs[s][j / 2] = _mm256_hadd_ps(a[s][0], a[s][1]);
      } else if (j % 2 == 0) {
        even[s] = a[s][0];
      } else {
        pairs[s][j / 2] = _mm256_hadd_ps(even[s], a[s][0]);
      }
    }
  }
  const __m256 sv = _mm256_set1_ps(scale), neg_inf = _mm256_set1_ps(-INFINITY);
  for (int h = 0; h < 2; ++h) {
    const __m256 valid = _mm256_castsi256_ps(V::TailMask(std::clamp<int64_t>(nn - 8 * h, 0, 8)));
#pragma GCC unroll 8
    for (int s = 0; s < NS; ++s) {
      const __m256* p = pairs[s] + 4 * h;
      scores[s][h] =
          8 * h < nn ? _mm256_blendv_ps(neg_inf, ReducePairs(p[0], p[1], p[2], p[3]) * sv, valid)
                     : neg_inf;
    }
  }
}

// acc[s][c] += sum over j < nn ascending of e[s][j] * v[j][c] (e already scaled for fp8), 8 CV
// columns per pass. v_ahead (may be null): rows to request ahead, one per key in the first pass.
template <int NS, int CV, Kv K>
[[gnu::always_inline]] inline void ValueSums(const float (*e)[16], const void* v, int64_t v_stride,
                                             int64_t nn, int64_t dv, const void* v_ahead,
                                             int64_t n_ahead, float* acc) {
  for (int64_t c0 = 0; c0 < dv; c0 += 8 * CV) {
    __m256 a[NS][CV];
#pragma GCC unroll 8
    for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 4
      for (int i = 0; i < CV; ++i) a[s][i] = _mm256_loadu_ps(acc + s * dv + c0 + 8 * i);
    }
    for (int64_t j = 0; j < nn; ++j) {
      if (c0 == 0 && v_ahead != nullptr && j < n_ahead) {
        cpu::PrefetchBytes<V>(cpu::KvRow<V, K>(v_ahead, j, v_stride), dv * kKvBytes<K>);
      }
      const void* vj = cpu::KvRow<V, K>(v, j, v_stride);
      __m256 vr[CV];
#pragma GCC unroll 4
      for (int i = 0; i < CV; ++i) vr[i] = LoadKv<K>(vj, c0 + 8 * i);
#pragma GCC unroll 8
      for (int s = 0; s < NS; ++s) {
        const __m256 es = _mm256_broadcast_ss(&e[s][j]);
#pragma GCC unroll 4
        for (int i = 0; i < CV; ++i) a[s][i] = _mm256_fmadd_ps(es, vr[i], a[s][i]);
      }
    }
#pragma GCC unroll 8
    for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 4
      for (int i = 0; i < CV; ++i) _mm256_storeu_ps(acc + s * dv + c0 + 8 * i, a[s][i]);
    }
  }
}

inline float ReduceMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// NS states over every key of the call. With `ahead` (the first chunk of a call) the group
// starting at j0 requests rows j0.. of the next call, so every row is asked for once.
template <int NS, int KP, int CV, Kv K>
void AttendChunk(const float* q, const AttendKeyRows& rows, bool ahead, int64_t dk, int64_t dv,
                 float scale, float* m, float* l, float* acc) {
  const int64_t n = rows.n;
  // q copied 32-byte aligned (fp8: scaled by the keys' 256 x k_scale once; the weights are
  // scaled by 256 x v_scale below).
  alignas(32) float qs[NS * kMaxDk];
  if (K == Kv::kFP8 || reinterpret_cast<uintptr_t>(q) % 32 != 0) {
    const __m256 ks = _mm256_set1_ps(K == Kv::kFP8 ? 256.0f * rows.k_scale : 1.0f);
    for (int64_t i = 0; i < NS * dk; i += 8) _mm256_store_ps(qs + i, _mm256_loadu_ps(q + i) * ks);
    q = qs;
  }
  const __m256 vscale = _mm256_set1_ps(K == Kv::kFP8 ? 256.0f * rows.v_scale : 1.0f);
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t nn = std::min<int64_t>(16, n - j0);
    const AheadRows<V, K> next(rows, ahead, j0);
    __m256 sc[NS][2];
    ScoreGroup<NS, KP, K>(q, cpu::KvRow<V, K>(rows.k, j0, rows.k_stride), rows.k_stride, nn, dk,
                          scale, next.k, next.n, sc);
    alignas(32) float e[NS][16];  // the weights exp(score - m) (fp8: x 256 v_scale); 0 past nn
    for (int s = 0; s < NS; ++s) {
      const float group_max = ReduceMax(_mm256_max_ps(sc[s][0], sc[s][1]));
      float* a = acc + s * dv;  // [dv]
      if (group_max > m[s]) {
        const float c = std::exp(m[s] - group_max);  // 0 when m was -inf
        l[s] *= c;
        const __m256 cv = _mm256_set1_ps(c);
        for (int64_t d = 0; d < dv; d += 8) _mm256_storeu_ps(a + d, _mm256_loadu_ps(a + d) * cv);
        m[s] = group_max;
      }
      __m256 sum = _mm256_setzero_ps();
      for (int h = 0; h < 2; ++h) {
        const __m256 x = sc[s][h] - _mm256_set1_ps(m[s]);
        const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);  // Exp's clamp would hide it
        const __m256 valid =
            _mm256_castsi256_ps(V::TailMask(std::clamp<int64_t>(nn - 8 * h, 0, 8)));
        const __m256 w = _mm256_and_ps(_mm256_blendv_ps(cpu::Exp<V>(x), x, nan), valid);
        sum = sum + w;
        _mm256_store_ps(e[s] + 8 * h, w * vscale);
      }
      l[s] += V::ReduceAdd(sum);
    }
    ValueSums<NS, CV, K>(e, cpu::KvRow<V, K>(rows.v, j0, rows.v_stride), rows.v_stride, nn, dv,
                         next.v, next.n, acc);
  }
}

// AttendChunk with NS = ns for any ns in [1, kMaxNs] (the chunk sizes as template arguments).
template <int kMaxNs, int KP, int CV, Kv K>
void AttendChunkOf(int ns, const float* q, const AttendKeyRows& rows, bool ahead, int64_t dk,
                   int64_t dv, float scale, float* m, float* l, float* acc) {
  if (ns == kMaxNs) return AttendChunk<kMaxNs, KP, CV, K>(q, rows, ahead, dk, dv, scale, m, l, acc);
  if constexpr (kMaxNs > 1) {
    AttendChunkOf<kMaxNs - 1, KP, CV, K>(ns, q, rows, ahead, dk, dv, scale, m, l, acc);
  }
}

template <int KP, int CV, Kv K, int kChunk>
void AttendStates(const float* q, int num_states, const AttendKeyRows& rows, int64_t dk, int64_t dv,
                  float scale, float* m, float* l, float* acc) {
  for (int s = 0; s < num_states; s += kChunk) {
    AttendChunkOf<kChunk, KP, CV, K>(std::min(kChunk, num_states - s), q + s * dk, rows, s == 0, dk,
                                     dv, scale, m + s, l + s, acc + s * dv);
  }
}

constexpr auto AttendKeysComposedAvx2 =
    &AttendKeysComposed<&cpu::ConvertRow<V>, &DotRows, &ExpShifted, &AxpyRows, &Fp8Row>;

void AttendKeys(const float* q, int num_states, const AttendKeyRows& rows, int64_t dk, int64_t dv,
                float scale, float* m, float* l, float* acc) {
  if (dk % 8 != 0 || dv % 16 != 0 || dk > kMaxDk) {
    return AttendKeysComposedAvx2(q, num_states, rows, dk, dv, scale, m, l, acc);
  }
  switch (rows.dtype) {
    case DType::kBF16:
      return AttendStates<2, 2, Kv::kBF16, 4>(q, num_states, rows, dk, dv, scale, m, l, acc);
    case DType::kF8E4M3:  // the decode dominates: one per 8 states
      return AttendStates<1, 1, Kv::kFP8, 8>(q, num_states, rows, dk, dv, scale, m, l, acc);
    case DType::kF32:
      return AttendStates<2, 2, Kv::kF32, 4>(q, num_states, rows, dk, dv, scale, m, l, acc);
    default:
      return AttendKeysComposedAvx2(q, num_states, rows, dk, dv, scale, m, l, acc);
  }
}

}  // namespace

bool ProbeInstructions() {
  volatile float in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  volatile uint16_t half[8] = {0x3c00, 0x4000, 0, 0, 0, 0, 0, 0};  // f16 1.0, 2.0
  float a[8], h[8];
  for (int i = 0; i < 8; ++i) a[i] = in[i];
  uint16_t hb[8];
  for (int i = 0; i < 8; ++i) hb[i] = half[i];
  const __m256 v = _mm256_loadu_ps(a);
  const __m256 f = _mm256_fmadd_ps(v, v, v);                                         // FMA
  const __m256i k = _mm256_add_epi32(_mm256_castps_si256(f), _mm256_set1_epi32(0));  // AVX2
  _mm256_storeu_ps(h, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hb))));
  float out[8];
  _mm256_storeu_ps(out, _mm256_castsi256_ps(k));
  return out[1] == 6.0f && h[1] == 2.0f;
}

void FillTable(KernelTable* t) {
  cpu::FillUnitTable<V>(t, {Isa::kAvx2, &LinearRows, &DotRows, &AxpyRows, &ExpShifted, &AttendKeys,
                            &ReadProbe, &FmaProbe});
}

}  // namespace mimo::avx2
