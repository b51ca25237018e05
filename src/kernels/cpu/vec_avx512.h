// VecAvx512: the vector ops of vec_avx2.h (the op set is listed there) 16 fp32 lanes wide
// (AVX-512 F/BW/VL/DQ), plus the per-cache-line e4m3 NaN test only this width has, and the bf16
// pair ops of the bf16 GEMM (gemm_bf16.h). Partial vectors are masked loads and stores.
// Include from *_avx512.cc only (see vec_avx2.h: inline functions take the unit's flags).
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || \
    !defined(__AVX512DQ__)
#error "vec_avx512.h belongs to the AVX-512 units (-mavx512f -mavx512bw -mavx512vl -mavx512dq)"
#endif

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

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
  // out[k] = ReduceAdd(v[k]) for k < 16, bit for bit (fp32 addition commutes, and each sum pairs
  // the lanes as _mm512_reduce_add_ps does: l with l + 8, then m with m + 4, n with n + 2, then
  // 0 with 1), but each shuffle and add serves 2 to 16 vectors: 45 instructions, not 16 x 7.
  static void ReduceAdd16(const F (&v)[16], float* out) {
    F s1[8], s2[4], s3[2];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)  // [v(2j) lanes l + (l + 8), v(2j + 1) likewise]
      s1[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                            _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xee));
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)  // quarter k: v(4j + k) lanes m + (m + 4)
      s2[j] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * j], s1[2 * j + 1], 0x88),
                            _mm512_shuffle_f32x4(s1[2 * j], s1[2 * j + 1], 0xdd));
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j)  // quarter k: v(8j + k) n + (n + 2), then v(8j + 4 + k)'s
      s3[j] = _mm512_add_ps(_mm512_shuffle_ps(s2[2 * j], s2[2 * j + 1], 0x44),
                            _mm512_shuffle_ps(s2[2 * j], s2[2 * j + 1], 0xee));
    // quarter k, lane c: v(4c + k) lanes 0 + 1
    alignas(64) float t[16];
    _mm512_store_ps(t, _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], 0x88),
                                     _mm512_shuffle_ps(s3[0], s3[1], 0xdd)));
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) out[k] = t[4 * (k % 4) + k / 4];
  }
  // Unpacks within 128-bit lanes, 64-bit unpacks, then two rounds of 128-bit lane shuffles.
  static void Transpose(const F (&in)[16], F (&out)[16]) {
    F t[16], r[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(in[2 * i], in[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(in[2 * i], in[2 * i + 1]);
    }
    // r[4i + m], 128-bit lane q: column 4q + m of rows 4i .. 4i + 3.
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m512d t0 = _mm512_castps_pd(t[4 * i]), t1 = _mm512_castps_pd(t[4 * i + 1]);
      const __m512d t2 = _mm512_castps_pd(t[4 * i + 2]), t3 = _mm512_castps_pd(t[4 * i + 3]);
      r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
      r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
      r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
      r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const F a = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
      const F b = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xdd);
      const F c = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
      const F d = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xdd);
      out[m] = _mm512_shuffle_f32x4(a, c, 0x88);
      out[8 + m] = _mm512_shuffle_f32x4(a, c, 0xdd);
      out[4 + m] = _mm512_shuffle_f32x4(b, d, 0x88);
      out[12 + m] = _mm512_shuffle_f32x4(b, d, 0xdd);
    }
  }
  // An empty asm that claims to change v in a zmm register.
  static void KeepInRegister(F& v) { asm("" : "+v"(v)); }
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
  static F LoadI8(const int8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static F LoadI8N(const int8_t* p, int64_t n) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(TailMask(n), p)));
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

  // ---- bf16 pairs (gemm_bf16.h lists these ops): B = 16 lanes of two bf16 ----
  // DotBf16 and PackBf16 are AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16): only after ProbeBf16.
  using B = __m512i;
  static B LoadB(const void* p) { return _mm512_loadu_si512(p); }
  static B LoadBAligned(const void* p) { return _mm512_load_si512(p); }
  static void StoreB(void* p, B v) { _mm512_storeu_si512(p, v); }
  static void StoreBAligned(void* p, B v) { _mm512_store_si512(p, v); }
  static B Set1Pair(uint32_t pair) { return _mm512_set1_epi32(static_cast<int>(pair)); }
  static F AsF(B v) { return _mm512_castsi512_ps(v); }
  static B AsB(F v) { return _mm512_castps_si512(v); }
  static B LoadBf16PairsN(const uint16_t* p, int64_t n) {
    return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << n) - 1u), p);
  }
  static void KeepInRegister(B& v) { asm("" : "+v"(v)); }
  __attribute__((target("avx512bf16"))) static B PackBf16(F lo, F hi) {
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  }
  __attribute__((target("avx512bf16"))) static F DotBf16(F acc, B a, B b) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
  }
  // 32 e4m3 codes as the bf16 bit patterns of 2^-8 x their values: the bits
  // PackBf16(LoadE4m3, LoadE4m3) gives, in three 16-bit integer operations instead of the f16 and
  // fp32 conversions of both halves (this decode bounded the bf16 mode on FP8 weights: 22 tok/s at
  // batch 1 against the exact path's 28). A normal code s.eeee.mmm is 2^(e-15) x 1.mmm in these
  // units, the bf16 s | (e + 112) << 7 | mmm << 4, and as e < 16 the + 112 (0b1110000) is an OR:
  // sign-extended to 16 bits and shifted left by 4 the code holds s in bit 15 and eeee.mmm in
  // bits 10..4, so (w << 4) & 0x87f0 | 0x3800 is the pattern. Codes with e = 0 (zeros and
  // subnormals, m x 2^-17, normal in bf16) are looked up by m when a step has any (rare in
  // trained weights). A step holding a NaN code is left to the caller (TryDecode: false).
  struct E4m3Bf16 {
    B subnormal = SubnormalUnits();  // bf16 bits of m x 2^-17 at index m < 8

    static B SubnormalUnits() {
      static const B table = [] {
        alignas(64) uint16_t t[32] = {};
        for (int m = 0; m < 8; ++m) {
          const float f = std::ldexp(static_cast<float>(m), -17);  // exact in bf16
          uint32_t bits;
          std::memcpy(&bits, &f, sizeof(bits));
          t[m] = static_cast<uint16_t>(bits >> 16);
        }
        return _mm512_load_si512(t);
      }();
      return table;
    }
    bool TryDecode(const uint8_t* p, B* out) const {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i nan = _mm256_or_si256(b, _mm256_set1_epi8(static_cast<char>(0x80)));
      if (_mm256_cmpeq_epi8_mask(nan, _mm256_set1_epi8(static_cast<char>(0xff))) != 0) return false;
      const __m512i w = _mm512_cvtepi8_epi16(b);
      // (A & B) | C: imm 0xf0 & 0xcc | 0xaa.
      __m512i r = _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 4), _mm512_set1_epi16(0x87f0),
                                            _mm512_set1_epi16(0x3800), 0xea);
      const __mmask32 sub = _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x78));
      if (__builtin_expect(sub != 0, 0)) {
        // Index: w's low 5 bits, 00mmm where e = 0. Sign: A | (B & C), imm 0xf0 | 0xcc & 0xaa.
        const __m512i sign = _mm512_set1_epi16(static_cast<short>(0x8000));
        const __m512i v =
            _mm512_ternarylogic_epi32(_mm512_permutexvar_epi16(w, subnormal), w, sign, 0xf8);
        r = _mm512_mask_mov_epi16(r, sub, v);
      }
      *out = r;
      return true;
    }
  };

  // 64-bit integer lanes (the read probe).
  using I = __m512i;
  static I AddU64(I a, I b) { return _mm512_add_epi64(a, b); }
  static uint64_t ReduceAddU64(I v) { return static_cast<uint64_t>(_mm512_reduce_add_epi64(v)); }

  static void PrefetchL2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
};

}  // namespace mimo::avx512
