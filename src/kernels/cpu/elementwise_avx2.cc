// AVX2 element-wise kernels (RmsNorm, RoPE rotation, SiluMul, row conversion), the AVX2 probe,
// and the AVX2 KernelTable.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/attend_keys_composed.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/e4m3_avx2.h"

namespace mimo::avx2 {
namespace {

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 elements of an F32|BF16|F16 row as fp32.
inline __m256 Load8(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16: {
      const __m128i h =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case DType::kF16:
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
    default:
      return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
}

inline float Load1(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return BF16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// exp(x) for x in [-88.37, 88.37] (clamped): 2^n * p(r), r = x - n ln2 (Cody-Waite split), a
// degree-6 polynomial; ~2 ulp.
inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)),
                    _mm256_set1_ps(88.3762626647949f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

void RmsNorm(const float* x, int64_t T, int64_t dim, const TensorView& weight, float eps,
             float* out) {
  const void* wp = weight.data;  // [dim]
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * dim;
    float* ot = out + t * dim;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= dim; i += 16) {
      const __m256 v0 = _mm256_loadu_ps(xt + i), v1 = _mm256_loadu_ps(xt + i + 8);
      a0 = _mm256_fmadd_ps(v0, v0, a0);
      a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    for (; i + 8 <= dim; i += 8) {
      const __m256 v = _mm256_loadu_ps(xt + i);
      a0 = _mm256_fmadd_ps(v, v, a0);
    }
    double ss = HorizontalSum(_mm256_add_ps(a0, a1));
    for (; i < dim; ++i) ss += static_cast<double>(xt[i]) * xt[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    const __m256 iv = _mm256_set1_ps(inv);
    i = 0;
    for (; i + 8 <= dim; i += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xt + i), iv);
      _mm256_storeu_ps(ot + i, _mm256_mul_ps(v, Load8(wp, weight.dtype, i)));
    }
    for (; i < dim; ++i) ot[i] = (xt[i] * inv) * Load1(wp, weight.dtype, i);
  }
}

void RopeRotate(float* x, int64_t T, int num_heads, int head_dim, int rotary_dim, const float* cos,
                const float* sin) {
  const int half = rotary_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    const float* ct = cos + t * half;  // [half]
    const float* st = sin + t * half;  // [half]
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + (t * num_heads + h) * head_dim;  // [head_dim]
      int i = 0;
      for (; i + 8 <= half; i += 8) {
        const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
        const __m256 c = _mm256_loadu_ps(ct + i), s = _mm256_loadu_ps(st + i);
        _mm256_storeu_ps(v + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
      }
      for (; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * ct[i] - b * st[i];
        v[i + half] = b * ct[i] + a * st[i];
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void ConvertRow(const void* src, DType dtype, int64_t n, float* dst) {
  MIMO_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
             "ConvertRow: unsupported dtype %d", static_cast<int>(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Load8(src, dtype, i));
  for (; i < n; ++i) dst[i] = Load1(src, dtype, i);
}

void ExpShifted(const float* s, int64_t n, float m, float* e) {
  const __m256 mv = _mm256_set1_ps(m);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + j), mv);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);  // Exp's clamp would hide it
    _mm256_storeu_ps(e + j, _mm256_blendv_ps(Exp(x), x, nan));
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
    scores[j] = (HorizontalSum(a0) + tail(k0)) * scale;
    scores[j + 1] = (HorizontalSum(a1) + tail(k1)) * scale;
  }
  for (; j < n; ++j) {
    __m256 a = _mm256_setzero_ps();
    for (int64_t c = 0; c < dv; c += 8) {
      a = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(k + j * d + c), a);
    }
    scores[j] = (HorizontalSum(a) + tail(k + j * d)) * scale;
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
  t->rms_norm = &RmsNorm;
  t->rope_rotate = &RopeRotate;
  t->silu_mul = &SiluMul;
  t->convert_row = &ConvertRow;
  t->dot_rows = &DotRows;
  t->axpy_rows = &AxpyRows;
  t->exp_shifted = &ExpShifted;
  t->attend_keys = &AttendKeysComposed<&ConvertRow, &DotRows, &ExpShifted, &AxpyRows, &Fp8Row>;
  t->read_probe = &ReadProbe;
  t->fma_probe = &FmaProbe;
}

}  // namespace mimo::avx2
