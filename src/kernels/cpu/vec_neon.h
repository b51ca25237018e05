// VecNeon: the vector ops of vec_avx2.h (which lists the set) at 4 fp32 lanes (AArch64 Advanced
// SIMD, which every ARMv8-A core has): the third instantiation of the width-templated kernel
// bodies (linear_tiles.h, linear_prefill.h, linear_small_batch.h, elementwise_ops.h,
// roofline_probe.h). `+ - * /` on F are GCC vector operators
// (float32x4_t is a GCC vector type), so only what has no operator is spelled here.
// NEON has no masked loads: partial vectors go through a zero-padded copy (as VecAvx2's bf16/e4m3
// tails do) and the element-wise ops finish a row in scalar code (kMaskedTails false).
// Include from *_neon.cc only (see vec_avx2.h: inline functions take the unit's flags).
#pragma once

#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "vec_neon.h belongs to the AArch64 NEON units (*_neon.cc) only"
#endif

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

namespace mimo::neon {

struct VecNeon {
  using F = float32x4_t;
  static constexpr int kLanes = 4;
  // No masked loads: the element-wise ops finish a row's last partial vector in scalar code; the
  // Linear tiles zero-pad theirs (LoadN).
  static constexpr bool kMaskedTails = false;
  // No byte compare into a mask: every e4m3 vector takes the NaN patch (LoadE4m3).
  static constexpr bool kE4m3LineNanTest = false;
  // LoadE4m3Plain and ScaleForE4m3Plain exist (the decode GEMV's plain tiles, linear_tiles.h).
  static constexpr bool kE4m3Plain = true;

  static F Zero() { return vdupq_n_f32(0.0f); }
  static F Set1(float v) { return vdupq_n_f32(v); }
  static F Load(const float* p) { return vld1q_f32(p); }
  static F LoadAligned(const float* p) { return vld1q_f32(p); }
  static void Store(float* p, F v) { vst1q_f32(p, v); }
  static void StoreAligned(float* p, F v) { vst1q_f32(p, v); }

  // The n < 4 floats at p, lanes >= n +0; nothing past p + n is read (or written).
  static F LoadN(const float* p, int64_t n) {
    float buf[4] = {};
    std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(float));
    return vld1q_f32(buf);
  }
  static void StoreN(float* p, F v, int64_t n) {
    float buf[4];
    vst1q_f32(buf, v);
    std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(float));
  }

  static F Fmadd(F a, F b, F c) { return vfmaq_f32(c, a, b); }             // a * b + c
  static F Fnmadd(F a, F b, F c) { return vfmsq_f32(c, a, b); }            // c - a * b
  static F Fmsub(F a, F b, F c) { return vfmaq_f32(vnegq_f32(c), a, b); }  // a * b - c
  // FMINNM/FMAXNM: a NaN first operand gives the second, as x86's minps/maxps do (the Exp clamp).
  static F Min(F a, F b) { return vminnmq_f32(a, b); }
  static F Max(F a, F b) { return vmaxnmq_f32(a, b); }
  // VecAvx2's order at 4 lanes: halves (lanes 0 + 2, 1 + 3), then the last two.
  static float ReduceAdd(F v) {
    const float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
  }
  // out[l] lane k = in[k] lane l: 32-bit transposes of row pairs, then 64-bit ones.
  static void Transpose(const F (&in)[4], F (&out)[4]) {
    const F t0 = vtrn1q_f32(in[0], in[1]), t1 = vtrn2q_f32(in[0], in[1]);
    const F t2 = vtrn1q_f32(in[2], in[3]), t3 = vtrn2q_f32(in[2], in[3]);
    auto d = [](F v) { return vreinterpretq_f64_f32(v); };
    out[0] = vreinterpretq_f32_f64(vtrn1q_f64(d(t0), d(t2)));
    out[1] = vreinterpretq_f32_f64(vtrn1q_f64(d(t1), d(t3)));
    out[2] = vreinterpretq_f32_f64(vtrn2q_f64(d(t0), d(t2)));
    out[3] = vreinterpretq_f32_f64(vtrn2q_f64(d(t1), d(t3)));
  }
  // An empty asm that claims to change v: the load stays one register, not one per use.
  static void KeepInRegister(F& v) { asm("" : "+w"(v)); }
  static F RoundNearest(F v) { return vrndnq_f32(v); }  // ties to even
  // p * 2^n for integral n in [-127, 127], the power built as exponent bits (n = -127: 0), as
  // VecAvx2 does.
  static F MulPow2(F p, F n) {
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
    return p * vreinterpretq_f32_s32(e);
  }

  // 4 stored elements as fp32; e4m3 in units of 2^-8.
  static F LoadBf16(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
  static F LoadF16(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  // The 4 e4m3 codes at p (exactly 4 bytes read) sign-extended to 16 bits.
  static int16x4_t LoadE4m3Wide(const uint8_t* p) {
    uint32_t w;
    std::memcpy(&w, p, sizeof(w));
    return vget_low_s16(vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(w))));
  }
  // The exact e4m3 -> f16 remap of e4m3_avx2.h: the f16 with the code's sign, exponent field
  // (bias 15 instead of 7) and mantissa is 2^-8 x its value, subnormals included (FCVTL converts
  // f16 subnormals exactly, whatever FPCR.FZ); NaN codes (S.1111.111) become an f16 NaN.
  static F LoadE4m3(const uint8_t* p) {
    const int16x4_t sx = LoadE4m3Wide(p);
    const int16x4_t h = vand_s16(vshl_n_s16(sx, 7), vdup_n_s16(static_cast<int16_t>(0xbfff)));
    const uint16x4_t nan =
        vceq_s16(vorr_s16(sx, vdup_n_s16(static_cast<int16_t>(0xff80))), vdup_n_s16(-1));
    const uint16x4_t bits = vbsl_u16(nan, vdup_n_u16(0x7e00), vreinterpret_u16_s16(h));
    return vcvt_f32_f16(vreinterpret_f16_u16(bits));
  }
  // The 4 int8 at p (exactly 4 bytes read), converted exactly.
  static F LoadI8(const int8_t* p) {
    int32_t w;
    std::memcpy(&w, p, sizeof(w));
    const int16x4_t h = vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w))));
    return vcvtq_f32_s32(vmovl_s16(h));
  }
  // 4 codes without subnormal or NaN codes as fp32 2^-120 x their e4m3 values (VecAvx2's
  // LoadE4m3Plain at 4 lanes: sign-extend, shift left by 20, clear bits 27-30).
  static F LoadE4m3Plain(const uint8_t* p) {
    const int32x4_t d = vmovl_s16(LoadE4m3Wide(p));
    return vreinterpretq_f32_s32(
        vandq_s32(vshlq_n_s32(d, 20), vdupq_n_s32(static_cast<int32_t>(0x87f00000u))));
  }
  // xs[c] = x[c] * 2^112 for c < n; false (xs partly written) if some |x[c]| >= 2^15 or is not a
  // number, where the product could overflow (2^15 x 2^112 < 2^128) and the plain path is off.
  static bool ScaleForE4m3Plain(const float* x, int64_t n, float* xs) {
    const F k = Set1(0x1p112f), limit = Set1(0x1p15f);
    uint32x4_t ok = vdupq_n_u32(~0u);
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
      const F v = vld1q_f32(x + c);
      ok = vandq_u32(ok, vcltq_f32(vabsq_f32(v), limit));  // false for NaN
      vst1q_f32(xs + c, v * k);
    }
    if (c < n) {
      const F v = LoadN(x + c, n - c);  // lanes past n are +0: never bad
      ok = vandq_u32(ok, vcltq_f32(vabsq_f32(v), limit));
      StoreN(xs + c, v * k, n - c);
    }
    return vminvq_u32(ok) != 0;
  }
  // The same for the n < 4 elements at p through a zero-padded copy: lanes >= n are +0.
  template <auto kLoad, class T>
  static F LoadPadded(const T* p, int64_t n) {
    T buf[8] = {};  // 8: the bf16/f16 loads read 4 elements, e4m3 4 bytes
    for (int64_t k = 0; k < n; ++k) buf[k] = p[k];
    return kLoad(buf);
  }
  static F LoadBf16N(const uint16_t* p, int64_t n) { return LoadPadded<&LoadBf16>(p, n); }
  static F LoadF16N(const uint16_t* p, int64_t n) { return LoadPadded<&LoadF16>(p, n); }
  static F LoadE4m3N(const uint8_t* p, int64_t n) { return LoadPadded<&LoadE4m3>(p, n); }
  static F LoadI8N(const int8_t* p, int64_t n) { return LoadPadded<&LoadI8>(p, n); }

  // Lanes of x that are NaN keep x, the others take y (ExpShifted: Exp's clamp would hide a NaN).
  static F KeepNan(F x, F y) { return vbslq_f32(vceqq_f32(x, x), y, x); }

  // 64-bit integer lanes (the read probe).
  using I = uint64x2_t;
  static I AddU64(I a, I b) { return vaddq_u64(a, b); }
  static uint64_t ReduceAddU64(I v) { return vaddvq_u64(v); }

  static void PrefetchL2(const void* p) { asm volatile("prfm pldl2keep, [%0]" : : "r"(p)); }
};

}  // namespace mimo::neon
