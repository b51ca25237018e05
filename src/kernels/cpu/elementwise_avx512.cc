// AVX-512 element-wise kernels (RmsNorm, RoPE rotation, SiluMul, row conversion), the AVX-512
// probe, and the AVX-512 KernelTable. Tails use masked loads/stores.
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_*; GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mimo::avx512 {
namespace {

inline __mmask16 TailMask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// 16 (or the first popcount(m)) elements of an F32|BF16|F16 row as fp32; masked lanes are 0.
inline __m512 Load16(const void* p, DType dtype, int64_t i, __mmask16 m) {
  switch (dtype) {
    case DType::kBF16: {
      const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case DType::kF16:
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i));
    default:
      return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  }
}

// exp(x), x clamped to [-88.37, 88.37]: 2^n * p(r) with a Cody-Waite reduction; ~2 ulp.
inline __m512 Exp(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.3762626647949f)),
                    _mm512_set1_ps(88.3762626647949f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

void RmsNorm(const float* x, int64_t T, int64_t dim, const TensorView& weight, float eps,
             float* out) {
  const void* wp = weight.data;  // [dim]
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * dim;
    float* ot = out + t * dim;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= dim; i += 32) {
      const __m512 v0 = _mm512_loadu_ps(xt + i), v1 = _mm512_loadu_ps(xt + i + 16);
      a0 = _mm512_fmadd_ps(v0, v0, a0);
      a1 = _mm512_fmadd_ps(v1, v1, a1);
    }
    for (; i < dim; i += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(dim - i >= 16 ? 0xffff : TailMask(dim - i), xt + i);
      a0 = _mm512_fmadd_ps(v, v, a0);
    }
    const double ss = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    const __m512 iv = _mm512_set1_ps(inv);
    for (i = 0; i < dim; i += 16) {
      const __mmask16 m = dim - i >= 16 ? 0xffff : TailMask(dim - i);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xt + i), iv);
      _mm512_mask_storeu_ps(ot + i, m, _mm512_mul_ps(v, Load16(wp, weight.dtype, i, m)));
    }
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
      for (int i = 0; i < half; i += 16) {
        const __mmask16 m = half - i >= 16 ? 0xffff : TailMask(half - i);
        const __m512 a = _mm512_maskz_loadu_ps(m, v + i),
                     b = _mm512_maskz_loadu_ps(m, v + i + half);
        const __m512 c = _mm512_maskz_loadu_ps(m, ct + i), s = _mm512_maskz_loadu_ps(m, st + i);
        _mm512_mask_storeu_ps(v + i, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
        _mm512_mask_storeu_ps(v + i + half, m, _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
      }
    }
  }
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void ConvertRow(const void* src, DType dtype, int64_t n, float* dst) {
  MIMO_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
             "ConvertRow: unsupported dtype %d", static_cast<int>(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : TailMask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, Load16(src, dtype, i, m));
  }
}

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
    _mm512_mask_storeu_ps(e + j, k, _mm512_mask_mov_ps(Exp(x), nan, x));
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
  t->isa = Isa::kAvx512;
  t->linear_rows = &LinearRows;
  t->rms_norm = &RmsNorm;
  t->rope_rotate = &RopeRotate;
  t->silu_mul = &SiluMul;
  t->convert_row = &ConvertRow;
  t->dot_rows = &DotRows;
  t->axpy_rows = &AxpyRows;
  t->exp_shifted = &ExpShifted;
  t->read_probe = &ReadProbe;
  t->fma_probe = &FmaProbe;
}

}  // namespace mimo::avx512
