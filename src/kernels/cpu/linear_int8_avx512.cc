// --precision int8 on AVX512_VNNI (linear_int8.h holds the mode's tiles and its definition): one
// vpdpbusd per 64 columns (two blocks) and row. vpdpbusd multiplies unsigned by signed bytes, so
// the weight codes w are read as u = w ^ 0x80 = w + 128 (one xor per 64 bytes, shared by the
// tile's tokens) against the activation codes q, and each lane's accumulator starts from -128 x
// the sum of its 4 activation codes (Extra, once per token): sum (w + 128) q - 128 sum q =
// sum w q, exactly (products fit int16, sums int32). Lanes 0-7 hold block 2c's dot product, 8-15
// block 2c + 1's: StepScale is a lane-pair permute of the group's 16 block scales.
// Per 64 weights and row: load + xor, vpdpbusd, convert, permute, FMA, where the exact int8 path
// spends 4 x (widen, convert, FMA) and the scale FMAs.
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_*; GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_avx512.h"
#define MIMO_INT8_TARGET __attribute__((target("avx512vnni")))
#include "kernels/cpu/linear_int8.h"

namespace mimo::avx512 {
namespace {

struct Int8Vnni {
  using I = __m512i;
  static constexpr int64_t kChunk = 64;
  static constexpr int64_t kGroup = 8;  // 8 steps x 2 blocks = the 16 lanes of a scale vector
  static constexpr int64_t kExtraBytes = 64;

  static __mmask16 Mask16(int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
  }
  static float QuantizeBlock(const float* x, int64_t n, int8_t* q) {
    const __mmask16 m0 = Mask16(n), m1 = Mask16(n > 16 ? n - 16 : 0);
    const __m512 a = _mm512_maskz_loadu_ps(m0, x), b = _mm512_maskz_loadu_ps(m1, x + 16);
    // QNaN, SNaN, +inf, -inf
    if ((_mm512_fpclass_ps_mask(a, 0x99) | _mm512_fpclass_ps_mask(b, 0x99)) != 0) {
      std::memset(q, 0, 32);
      return NAN;
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    const float s = amax > 0 ? amax / 127.0f : 1.0f;
    const __m512 sv = _mm512_set1_ps(s), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    auto codes = [&](__m512 v) {
      const __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v, sv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi)));
    };
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), codes(a));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), codes(b));
    return s;
  }
  MIMO_INT8_TARGET static void Extra(const int8_t* q, uint8_t* out) {
    const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                            _mm512_set1_epi8(static_cast<char>(0x80)),
                                            _mm512_loadu_si512(q));
    _mm512_storeu_si512(out, _mm512_sub_epi32(_mm512_setzero_si512(), sum));
  }
  static I LoadExtra(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I LoadCodes(const int8_t* q) { return _mm512_loadu_si512(q); }
  static I LoadWeights(const int8_t* p, int64_t n) {
    const __mmask64 m = n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
    return _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, p),
                            _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  MIMO_INT8_TARGET static I Dot(I w, I q, I init) { return _mm512_dpbusd_epi32(init, w, q); }
  static __m512 ToFloat(I v) { return _mm512_cvtepi32_ps(v); }
  // Lanes 0-7: block 2c's scale, 8-15: block 2c + 1's.
  static __m512 StepScale(const float* s, int c) {
    return _mm512_permutexvar_ps(_mm512_load_si512(kPairIndex[c].data()), _mm512_load_ps(s));
  }
  alignas(64) static constexpr std::array<std::array<int32_t, 16>, kGroup> kPairIndex = [] {
    std::array<std::array<int32_t, 16>, kGroup> t{};
    for (int k = 0; k < kGroup; ++k)
      for (int l = 0; l < 16; ++l) t[k][l] = 2 * k + (l >= 8);
    return t;
  }();
  static void Prefetch(const int8_t* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1);
  }

  // The grouped layout: a step is 4 columns of each of a group's 16 blocks; 3 tokens a tile, so
  // that a 4 x 3 tile's live vectors fit the 32 zmm registers (12 int32 accumulators, 12 fp32
  // totals, 4 weight vectors, the codes). At 4 tokens (37 live vectors) GCC spilled inside the
  // dot-product steps: 4 x 3 tiles run about 1.3x the GFLOP/s of 4 x 4 on a Zen 5 (PERFORMANCE).
  using W = __m512i;
  static constexpr int kGroupTokens = 3;
  static W LoadGroupWeights(const int8_t* p) { return _mm512_loadu_si512(p); }  // stored w + 128
  static I LoadGroupCodes(const int8_t* q) { return _mm512_loadu_si512(q); }
  static I QExtra(I q) { return q; }
  // The lane starts from -128 x the sum of its block's codes (see above).
  static int32_t BlockBias(const int8_t* codes) {
    // The sum of the 32 codes: vpsadbw sums c + 128 per 8 bytes; less 32 x 128.
    const __m256i u = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)),
                                       _mm256_set1_epi8(static_cast<char>(0x80)));
    const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const int64_t sum = _mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1) - 32 * 128;
    return static_cast<int32_t>(-128 * sum);
  }
  static I LoadBias(const int32_t* p) { return _mm512_loadu_si512(p); }
  MIMO_INT8_TARGET static I GroupDot(I acc, W w, I q, I) { return _mm512_dpbusd_epi32(acc, w, q); }
};

}  // namespace

MIMO_INT8_TARGET void LinearRowsInt8(const float* x, int64_t T, const MatrixWeight& w,
                                     int64_t row_begin, int64_t row_end, float* y) {
  cpu::LinearRowsInt8For<VecAvx512, Int8Vnni>(x, T, w, row_begin, row_end, y, &LinearRows);
}

MIMO_INT8_TARGET void QuantizeInt8Grouped(const float* x, int64_t t_begin, int64_t t_end,
                                          Int8GroupActivations* xa) {
  cpu::QuantizeInt8Grouped<Int8Vnni>(x, t_begin, t_end, xa);
}

MIMO_INT8_TARGET void LinearRowsInt8Grouped(const Int8GroupActivations& xa, const MatrixWeight& w,
                                            int64_t row_begin, int64_t row_end, float* y) {
  cpu::LinearRowsInt8GroupedFrom<VecAvx512, Int8Vnni>(xa, w, row_begin, row_end, y);
}

MIMO_INT8_TARGET bool ProbeVnni() {
  volatile int32_t in[2] = {200, -3};
  // Every lane: 4 x (200 x -3) + 7 = -2393.
  const __m512i a = _mm512_set1_epi8(static_cast<char>(in[0]));
  const __m512i b = _mm512_set1_epi8(static_cast<char>(in[1]));
  const __m512i r = _mm512_dpbusd_epi32(_mm512_set1_epi32(7), a, b);
  return _mm512_reduce_add_epi32(r) == 16 * -2393;
}

}  // namespace mimo::avx512
