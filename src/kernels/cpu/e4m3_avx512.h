// e4m3 -> fp32 for the AVX-512 translation units (include from *_avx512.cc only). Shared by the
// Linear FP8 weights and the fp8 KV cache rows. The remap is the AVX2 one (e4m3_avx2.h): the
// f16 with the same sign, exponent field and mantissa is exactly 2^-8 times the e4m3 value.
#pragma once

#include <immintrin.h>

namespace mimo::avx512 {

// Sign-extended b shifted left by 7 holds b in bits 14..7 and its sign in bit 15 as well;
// clearing bit 14 leaves exactly the f16 bit pattern. Valid for every code but NaN.
inline __m256i E4M3ToF16Bits(__m128i b) {
  return _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
                          _mm256_set1_epi16(static_cast<short>(0xbfff)));
}

// The 16 codes of b as fp32: 2^-8 * their e4m3 values; NaN codes (b | 0x80 == 0xff) -> NaN.
inline __m512 E4M3x16ToUnits(__m128i b) {
  const __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_or_si128(b, _mm_set1_epi8(static_cast<char>(0x80))),
                                            _mm_set1_epi8(static_cast<char>(0xff)));
  return _mm512_cvtph_ps(_mm256_mask_mov_epi16(E4M3ToF16Bits(b), nan, _mm256_set1_epi16(0x7e00)));
}

}  // namespace mimo::avx512
