// --precision int8 on AVX2 (linear_int8.h holds the mode's tiles and its definition): one block
// (32 columns) a step. vpmaddubsw multiplies unsigned by signed bytes and adds pairs into int16,
// so the activation codes enter as |q| (Extra, once per token) and the weight codes as
// sign(q) x w (vpsignb): |q| sign(q) w = q w, a pair at most 2 x 127 x 127 < 2^15 (no
// saturation: codes are within [-127, 127]); vpmaddwd against ones adds the pairs into the
// int32 lanes, each the exact sum of 4 products. A step is one block, so StepScale broadcasts
// its scale. Per 32 weights and row: load, vpsignb, vpmaddubsw, vpmaddwd, convert, FMA, where the
// exact int8 path spends 4 x (widen, convert, FMA) and a scale FMA.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_avx2.h"
#define MIMO_INT8_TARGET
#include "kernels/cpu/linear_int8.h"

namespace mimo::avx2 {
namespace {

struct Int8Avx2 {
  using I = __m256i;
  static constexpr int64_t kChunk = 32;
  static constexpr int64_t kGroup = 8;  // 8 steps x 1 block = the 8 lanes of a scale vector
  static constexpr int64_t kExtraBytes = 32;

  static float QuantizeBlock(const float* x, int64_t n, int8_t* q) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) {
      const int64_t m = n - 8 * k;
      v[k] = m >= 8 ? _mm256_loadu_ps(x + 8 * k)
                    : VecAvx2::LoadN(x + 8 * k, m > 0 ? m : 0);
    }
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 big = _mm256_set1_ps(3.402823466e38f);
    __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      const __m256 a = _mm256_and_ps(v[k], abs_mask);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // NaN or infinite
      amax = _mm256_max_ps(amax, a);
    }
    if (_mm256_movemask_ps(bad) != 0) {
      std::memset(q, 0, 32);
      return NAN;
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float am = _mm_cvtss_f32(m4);
    const float s = am > 0 ? am / 127.0f : 1.0f;
    const __m256 sv = _mm256_set1_ps(s), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i i32[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 r = _mm256_round_ps(_mm256_div_ps(v[k], sv),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      i32[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    // packs work within 128-bit lanes: dwords come out as v0 lo, v1 lo, v2 lo, v3 lo | v0 hi, ...
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i32[0], i32[1]),
                                         _mm256_packs_epi32(i32[2], i32[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    return s;
  }
  static void Extra(const int8_t* q, uint8_t* out) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_abs_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))));
  }
  static I LoadExtra(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static I LoadCodes(const int8_t* q) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  }
  static I LoadWeights(const int8_t* p, int64_t n) {
    if (n >= 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    alignas(32) int8_t buf[32] = {};
    std::memcpy(buf, p, static_cast<size_t>(n));
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
  }
  static I Dot(I w, I q, I abs_q) {
    const __m256i pairs = _mm256_maddubs_epi16(abs_q, _mm256_sign_epi8(w, q));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
  static __m256 ToFloat(I v) { return _mm256_cvtepi32_ps(v); }
  static __m256 StepScale(const float* s, int c) { return _mm256_broadcast_ss(s + c); }
  static void Prefetch(const int8_t* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  }

  // The grouped layout: a step is 4 columns of 8 blocks (half a group); 2 tokens a tile (16
  // ymm registers: 8 accumulators, 4 weight vectors and the codes).
  using W = __m256i;
  static constexpr int kGroupTokens = 2;
  static W LoadGroupWeights(const int8_t* p) {  // stored w + 128: back to w
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  static I LoadGroupCodes(const int8_t* q) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  }
  static I QExtra(I q) { return _mm256_abs_epi8(q); }
  static int32_t BlockBias(const int8_t*) { return 0; }
  static I LoadBias(const int32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static I GroupDot(I acc, W w, I q, I abs_q) {
    const __m256i pairs = _mm256_maddubs_epi16(abs_q, _mm256_sign_epi8(w, q));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

}  // namespace

void LinearRowsInt8(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                    int64_t row_end, float* y) {
  cpu::LinearRowsInt8For<VecAvx2, Int8Avx2>(x, T, w, row_begin, row_end, y, &LinearRows);
}

void QuantizeInt8Grouped(const float* x, int64_t t_begin, int64_t t_end, Int8GroupActivations* xa) {
  cpu::QuantizeInt8Grouped<Int8Avx2>(x, t_begin, t_end, xa);
}

void LinearRowsInt8Grouped(const Int8GroupActivations& xa, const MatrixWeight& w, int64_t row_begin,
                           int64_t row_end, float* y) {
  cpu::LinearRowsInt8GroupedFrom<VecAvx2, Int8Avx2>(xa, w, row_begin, row_end, y);
}

}  // namespace mimo::avx2
