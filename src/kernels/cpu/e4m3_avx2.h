// e4m3 -> fp32 for the AVX2 translation units (compiled with -mavx2 -mfma -mf16c; include from
// *_avx2.cc only). Shared by the Linear FP8 weights and the fp8 KV cache rows.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace mimo::avx2 {

// e4m3 -> f16 bit remap: the f16 with the same sign, exponent field e (bias 15 instead of 7) and
// mantissa has exactly 2^-8 times the e4m3 value, subnormals included (vcvtph2ps handles f16
// subnormals exactly, no denormal-input penalty). The NaN codes (S.1111.111) become an f16 NaN.
// The 8 codes at p as fp32: 2^-8 * their e4m3 values.
inline __m256 E4M3x8ToUnits(const uint8_t* p) {
  // Sign-extended b shifted left by 7 holds b in bits 14..7 and its sign in bit 15 as well;
  // clearing bit 14 leaves the f16 bit pattern.
  const __m128i sx = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  __m128i h = _mm_and_si128(_mm_slli_epi16(sx, 7), _mm_set1_epi16(static_cast<short>(0xbfff)));
  // NaN codes (b & 0x7f == 0x7f) are exactly those with sx | 0xff80 == 0xffff.
  const __m128i nan = _mm_cmpeq_epi16(_mm_or_si128(sx, _mm_set1_epi16(static_cast<short>(0xff80))),
                                      _mm_set1_epi16(-1));
  h = _mm_blendv_epi8(h, _mm_set1_epi16(0x7e00), nan);
  return _mm256_cvtph_ps(h);
}

}  // namespace mimo::avx2
