// VecAvx512: the vector ops of vec_avx2.h 16 fp32 lanes wide (AVX-512 F/BW/VL/DQ), plus the
// per-cache-line e4m3 NaN test only this width has. Partial vectors are masked loads and stores.
// Include from *_avx512.cc only (see vec_avx2.h: inline functions take the unit's flags).
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || \
    !defined(__AVX512DQ__)
#error "vec_avx512.h belongs to the AVX-512 units (-mavx512f -mavx512bw -mavx512vl -mavx512dq)"
#endif

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/e4m3_avx512.h"

namespace mimo::avx512 {

struct VecAvx512 {
  using F = __m512;
  static constexpr int kLanes = 16;
  // A row's last partial vector runs as one more masked vector step.
  static constexpr bool kMaskedTails = true;
  // One NaN-code test per 64-byte line of e4m3 (E4m3LineNanMask), then LoadE4m3NoNan.
  static constexpr bool kE4m3LineNanTest = true;
  // LoadE4m3Plain and ScaleForE4m3Plain exist (the decode GEMV's plain tiles, linear_tiles.h).
  static constexpr bool kE4m3Plain = true;

  static F Zero() { return _mm512_setzero_ps(); }
  static F Set1(float v) { return _mm512_set1_ps(v); }
  static F Load(const float* p) { return _mm512_loadu_ps(p); }
  static F LoadAligned(const float* p) { return _mm512_load_ps(p); }
  static void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void StoreAligned(float* p, F v) { _mm512_store_ps(p, v); }

  // Lanes [0, n) set, n in [0, 16].
  static __mmask16 TailMask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
  // The n < 16 floats at p, lanes >= n +0; nothing past p + n is read (or written).
  static F LoadN(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(TailMask(n), p); }
  static void StoreN(float* p, F v, int64_t n) { _mm512_mask_storeu_ps(p, TailMask(n), v); }

  static F Fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }    // a * b + c
  static F Fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
  static F Fmsub(F a, F b, F c) { return _mm512_fmsub_ps(a, b, c); }    // a * b - c
  static F Min(F a, F b) { return _mm512_min_ps(a, b); }
  static F Max(F a, F b) { return _mm512_max_ps(a, b); }
  static float ReduceAdd(F v) { return _mm512_reduce_add_ps(v); }
  static F RoundNearest(F v) {
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // p * 2^n for integral n (vscalefps; n = -127 gives a subnormal, not 0 as AVX2's does).
  static F MulPow2(F p, F n) { return _mm512_scalef_ps(p, n); }

  // 16 stored elements as fp32; e4m3 in units of 2^-8 (e4m3_avx512.h). The N forms read only
  // the first n (masked); lanes >= n are +0.
  static F WidenBf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static F LoadBf16(const uint16_t* p) {
    return WidenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F LoadBf16N(const uint16_t* p, int64_t n) {
    return WidenBf16(_mm256_maskz_loadu_epi16(TailMask(n), p));
  }
  static F LoadF16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F LoadF16N(const uint16_t* p, int64_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(TailMask(n), p));
  }
  static F LoadE4m3(const uint8_t* p) {
    return E4M3x16ToUnits(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F LoadE4m3N(const uint8_t* p, int64_t n) {
    return E4M3x16ToUnits(_mm_maskz_loadu_epi8(TailMask(n), p));
  }
  // LoadE4m3 for bytes known to hold no NaN code (skips the NaN patch).
  static F LoadE4m3NoNan(const uint8_t* p) {
    return _mm512_cvtph_ps(E4M3ToF16Bits(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // 16 codes without subnormal or NaN codes as fp32 2^-120 x their e4m3 values, in three integer
  // ops: sign-extended and shifted left by 20, a code holds its sign in bit 31 (copies in bits
  // 27-30, cleared), its exponent field in bits 23-26 and its mantissa in bits 20-22, i.e. the
  // fp32 with the same sign, exponent field and mantissa (zero codes: +-0).
  static F LoadE4m3Plain(const uint8_t* p) {
    const __m512i d = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(d, 20),
                                                _mm512_set1_epi32(static_cast<int>(0x87f00000u))));
  }
  // xs[c] = x[c] * 2^112 for c < n; false (xs partly written) if some |x[c]| >= 2^15 or is not a
  // number, where the product could overflow (2^15 x 2^112 < 2^128) and the plain path is off.
  static bool ScaleForE4m3Plain(const float* x, int64_t n, float* xs) {
    const __m512 k = _mm512_set1_ps(0x1p112f), limit = _mm512_set1_ps(0x1p15f);
    __mmask16 bad = 0;
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
      const __m512 v = _mm512_loadu_ps(x + c);
      bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(v), limit, _CMP_NLT_UQ);
      _mm512_storeu_ps(xs + c, _mm512_mul_ps(v, k));
    }
    if (c < n) {
      const __m512 v = _mm512_maskz_loadu_ps(TailMask(n - c), x + c);
      bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(v), limit, _CMP_NLT_UQ);
      _mm512_mask_storeu_ps(xs + c, TailMask(n - c), _mm512_mul_ps(v, k));
    }
    return bad == 0;
  }
  // Bit k set if byte k of the 64 at p is an e4m3 NaN code (S.1111.111).
  static __mmask64 E4m3LineNanMask(const uint8_t* p) {
    const __m512i v =
        _mm512_or_si512(_mm512_loadu_si512(p), _mm512_set1_epi8(static_cast<char>(0x80)));
    return _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(static_cast<char>(0xff)));
  }

  // 64-bit integer lanes (the read probe).
  using I = __m512i;
  static I AddU64(I a, I b) { return _mm512_add_epi64(a, b); }
  static uint64_t ReduceAddU64(I v) { return static_cast<uint64_t>(_mm512_reduce_add_epi64(v)); }

  static void PrefetchL2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
};

}  // namespace mimo::avx512
