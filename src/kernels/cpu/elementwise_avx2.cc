// AVX2 element-wise kernels: elementwise_ops.h at 8 lanes (RmsNorm, RoPE rotation, SiluMul, row
// conversion, exp) and this width's attention helpers (exp of shifted scores, dot and axpy rows,
// fp8 rows for the composed attend_keys); the AVX2 probe and the AVX2 KernelTable.
#include <immintrin.h>

#include <cmath>

#include "core/check.h"
#include "kernels/attend_keys_composed.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_ops.h"
#include "kernels/cpu/vec_avx2.h"

namespace mimo::avx2 {
namespace {

using V = VecAvx2;  // this unit's vector width

void ExpShifted(const float* s, int64_t n, float m, float* e) {
  const __m256 mv = _mm256_set1_ps(m);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + j), mv);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);  // Exp's clamp would hide it
    _mm256_storeu_ps(e + j, _mm256_blendv_ps(cpu::Exp<V>(x), x, nan));
  }
  for (; j < n; ++j) e[j] = std::exp(s[j] - m);
}

// scores[j] = scale * q . k[j]: 2 keys at a time, 8-column vectors, a scalar column tail.
void DotRows(const float* q, const float* k, int64_t n, int64_t d, float scale, float* scores) {
  const int64_t dv = d & ~int64_t{7};
  auto tail = [&](const float* kj) {
    float s = 0.0f;
    for (int64_t c = dv; c < d; ++c) s += q[c] * kj[c];
    return s;
  };
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const float* k0 = k + j * d;
    const float* k1 = k0 + d;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int64_t c = 0; c < dv; c += 8) {
      const __m256 qv = _mm256_loadu_ps(q + c);
      a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + c), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + c), a1);
    }
    scores[j] = (V::ReduceAdd(a0) + tail(k0)) * scale;
    scores[j + 1] = (V::ReduceAdd(a1) + tail(k1)) * scale;
  }
  for (; j < n; ++j) {
    __m256 a = _mm256_setzero_ps();
    for (int64_t c = 0; c < dv; c += 8) {
      a = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(k + j * d + c), a);
    }
    scores[j] = (V::ReduceAdd(a) + tail(k + j * d)) * scale;
  }
}

// acc += sum_j e[j] * v[j]: 8 columns at a time, the keys in order.
void AxpyRows(const float* e, const float* v, int64_t n, int64_t d, float* acc) {
  int64_t c = 0;
  for (; c + 8 <= d; c += 8) {
    __m256 a = _mm256_loadu_ps(acc + c);
    for (int64_t j = 0; j < n; ++j) {
      a = _mm256_fmadd_ps(_mm256_set1_ps(e[j]), _mm256_loadu_ps(v + j * d + c), a);
    }
    _mm256_storeu_ps(acc + c, a);
  }
  for (; c < d; ++c) {
    for (int64_t j = 0; j < n; ++j) acc[c] += e[j] * v[j * d + c];
  }
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
  t->isa = Isa::kAvx2;
  t->linear_rows = &LinearRows;
  cpu::FillElementwise<V>(t);
  t->dot_rows = &DotRows;
  t->axpy_rows = &AxpyRows;
  t->exp_shifted = &ExpShifted;
  t->attend_keys =
      &AttendKeysComposed<&cpu::ConvertRow<V>, &DotRows, &ExpShifted, &AxpyRows, &Fp8Row>;
  t->read_probe = &ReadProbe;
  t->fma_probe = &FmaProbe;
}

}  // namespace mimo::avx2
