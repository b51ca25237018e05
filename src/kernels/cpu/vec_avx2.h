// VecAvx2: the vector ops, 8 fp32 lanes, in which the width-templated kernel bodies
// (linear_tiles.h, linear_prefill.h, linear_small_batch.h, elementwise_ops.h, roofline_probe.h)
// are written; VecAvx512 (vec_avx512.h) is the same set 16 lanes wide, and an ARM unit's NEON type
// the same set 4 lanes wide. `+ - * /` on F are GCC vector operators (what _mm256_add_ps and its
// siblings expand to), so only what has no operator is spelled here.
// Include from *_avx2.cc only: these inline functions are compiled with the including unit's
// flags, and if an AVX-512 unit compiled them too the linker could keep its copy for both.
//
// The op set (every vector type has these; the bodies use nothing else):
//   F, kLanes                  the fp32 vector and its lane count
//   Zero, Set1(v), Load(p), LoadAligned(p), Store(p, v), StoreAligned(p, v)
//   LoadN(p, n), StoreN(p, v, n)   the first n < kLanes lanes; lanes >= n +0; nothing past p + n
//                              read or written
//   Fmadd(a, b, c) = a b + c, Fnmadd = c - a b, Fmsub = a b - c (fused, one rounding), Min, Max,
//   RoundNearest (ties to even), MulPow2(p, n) = p 2^n, KeepNan(x, y) = x where x is NaN, else y
//   ReduceAdd(v)               the lanes' sum as a halving tree: lane i + lane i + n/2 while n > 1
//                              (LaneReduce, linear_prefill.h, repeats that order across vectors,
//                              so the order is part of the op)
//   Transpose(in, out)         out[l] lane k = in[k] lane l for a kLanes x kLanes block
//   KeepInRegister(v)          keeps a loaded vector in a register rather than letting the
//                              compiler fold the load into every use (an optimization barrier; may
//                              do nothing)
//   LoadBf16, LoadF16, LoadE4m3, LoadI8 (+N forms)   kLanes stored elements as fp32 (e4m3: 2^-8 x
//                              value; int8: the integer)
//   kMaskedTails, kE4m3LineNanTest (LoadE4m3NoNan, E4m3LineNanMask), kE4m3Plain (LoadE4m3Plain,
//   ScaleForE4m3Plain)         what the width offers, with the ops each flag promises
//   I, AddU64, ReduceAddU64    64-bit integer lanes (the read probe); PrefetchL2(p)
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__) || defined(__AVX512F__)
#error "vec_avx2.h belongs to the AVX2 units (-mavx2 -mfma -mf16c) only"
#endif

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/e4m3_avx2.h"

namespace mimo::avx2 {

struct VecAvx2 {
  using F = __m256;
  static constexpr int kLanes = 8;
  // AVX2 masks 32-bit lanes only (vmaskmovps), so the element-wise ops finish a row's last
  // partial vector in scalar code; the Linear tiles zero-pad theirs (LoadN).
  static constexpr bool kMaskedTails = false;
  // No 64-byte compare into a mask: every e4m3 vector takes the NaN patch (LoadE4m3).
  static constexpr bool kE4m3LineNanTest = false;
  // LoadE4m3Plain and ScaleForE4m3Plain exist (the decode GEMV's plain tiles, linear_tiles.h).
  static constexpr bool kE4m3Plain = true;

  static F Zero() { return _mm256_setzero_ps(); }
  static F Set1(float v) { return _mm256_set1_ps(v); }
  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static F LoadAligned(const float* p) { return _mm256_load_ps(p); }
  static void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void StoreAligned(float* p, F v) { _mm256_store_ps(p, v); }

  // Lanes [0, n) set, n in [1, 8].
  static __m256i TailMask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  // The n < 8 floats at p, lanes >= n +0; nothing past p + n is read (or written).
  static F LoadN(const float* p, int64_t n) { return _mm256_maskload_ps(p, TailMask(n)); }
  static void StoreN(float* p, F v, int64_t n) { _mm256_maskstore_ps(p, TailMask(n), v); }

  static F Fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }    // a * b + c
  static F Fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b
  static F Fmsub(F a, F b, F c) { return _mm256_fmsub_ps(a, b, c); }    // a * b - c
  static F KeepNan(F x, F y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }
  static F Min(F a, F b) { return _mm256_min_ps(a, b); }
  static F Max(F a, F b) { return _mm256_max_ps(a, b); }
  // Lanes 0-3 + 4-7, then pairs, then the last two.
  static float ReduceAdd(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // Unpacks within 128-bit halves, then shuffles, then the halves exchanged.
  static void Transpose(const F (&in)[8], F (&out)[8]) {
    F t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(in[2 * i], in[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(in[2 * i], in[2 * i + 1]);
    }
    // u[4h + m], 128-bit half q: column 4q + m of rows 4h .. 4h + 3.
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
      u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
      u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
      u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
    }
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      out[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
      out[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    }
  }
  // Nothing: with 16 registers the AVX2 tiles leave GCC's load folding as it is.
  static void KeepInRegister(F&) {}
  static F RoundNearest(F v) {
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // p * 2^n for integral n in [-127, 127], the power built as exponent bits (n = -127: 0).
  static F MulPow2(F p, F n) {
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return p * _mm256_castsi256_ps(e);
  }

  // 8 stored elements as fp32; e4m3 in units of 2^-8 (e4m3_avx2.h).
  static F LoadBf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static F LoadF16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static F LoadE4m3(const uint8_t* p) { return E4M3x8ToUnits(p); }
  static F LoadI8(const int8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // 8 codes without subnormal or NaN codes as fp32 2^-120 x their e4m3 values (VecAvx512's
  // LoadE4m3Plain at 8 lanes: sign-extend, shift left by 20, clear bits 27-30), three integer ops
  // instead of the f16 remap's six and its NaN blend.
  static F LoadE4m3Plain(const uint8_t* p) {
    const __m256i d = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(d, 20),
                                                _mm256_set1_epi32(static_cast<int>(0x87f00000u))));
  }
  // xs[c] = x[c] * 2^112 for c < n; false (xs partly written) if some |x[c]| >= 2^15 or is not a
  // number, where the product could overflow (2^15 x 2^112 < 2^128) and the plain path is off.
  static bool ScaleForE4m3Plain(const float* x, int64_t n, float* xs) {
    const __m256 k = _mm256_set1_ps(0x1p112f), limit = _mm256_set1_ps(0x1p15f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 bad = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
      const __m256 v = _mm256_loadu_ps(x + c);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), limit, _CMP_NLT_UQ));
      _mm256_storeu_ps(xs + c, _mm256_mul_ps(v, k));
    }
    if (c < n) {
      const __m256 v = LoadN(x + c, n - c);  // lanes past n are +0: never bad
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), limit, _CMP_NLT_UQ));
      StoreN(xs + c, _mm256_mul_ps(v, k), n - c);
    }
    return _mm256_movemask_ps(bad) == 0;
  }
  // The same for the n < 8 elements at p through a zero-padded copy: lanes >= n are +0.
  template <auto kLoad, class T>
  static F LoadPadded(const T* p, int64_t n) {
    T buf[8] = {};
    for (int64_t k = 0; k < n; ++k) buf[k] = p[k];
    return kLoad(buf);
  }
  static F LoadBf16N(const uint16_t* p, int64_t n) { return LoadPadded<&LoadBf16>(p, n); }
  static F LoadF16N(const uint16_t* p, int64_t n) { return LoadPadded<&LoadF16>(p, n); }
  static F LoadE4m3N(const uint8_t* p, int64_t n) { return LoadPadded<&LoadE4m3>(p, n); }
  static F LoadI8N(const int8_t* p, int64_t n) { return LoadPadded<&LoadI8>(p, n); }

  // 64-bit integer lanes (the read probe).
  using I = __m256i;
  static I AddU64(I a, I b) { return _mm256_add_epi64(a, b); }
  static uint64_t ReduceAddU64(I v) {
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), v);
    return out[0] + out[1] + out[2] + out[3];
  }

  static void PrefetchL2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
};

}  // namespace mimo::avx2
