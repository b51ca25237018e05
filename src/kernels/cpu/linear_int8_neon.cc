// --precision int8 on AArch64 NEON (linear_int8.h holds the mode's tiles and its definition):
// 16 columns (half a block) a step, the baseline ARMv8-A instructions: SMULL/SMULL2 multiply the
// signed codes into int16 (a product at most 127 x 127), SADDLP adds adjacent pairs into int32
// and ADDP adds the pairs of pairs, so lane l holds the exact sum of products 4l..4l+3, as the
// x86 policies' lanes do. (SDOT, ARMv8.2's dot product, would do it in one instruction where the
// CPU has it: not used yet.) A step is half a block, so StepScale broadcasts block c / 2's scale.
#include <arm_neon.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_neon.h"
#define MIMO_INT8_TARGET
#include "kernels/cpu/linear_int8.h"

namespace mimo::neon {
namespace {

struct Int8Neon {
  using I = int8x16_t;
  static constexpr int64_t kChunk = 16;
  static constexpr int64_t kGroup = 8;  // 8 steps x half a block = the 4 lanes of a scale vector
  static constexpr int64_t kExtraBytes = 0;

  static float QuantizeBlock(const float* x, int64_t n, int8_t* q) {
    alignas(16) float b[32] = {};
    std::memcpy(b, x, static_cast<size_t>(n) * sizeof(float));
    float32x4_t v[8];
    float32x4_t amax = vdupq_n_f32(0.0f);
    uint32x4_t ok = vdupq_n_u32(~0u);
    for (int k = 0; k < 8; ++k) {
      v[k] = vld1q_f32(b + 4 * k);
      const float32x4_t a = vabsq_f32(v[k]);
      ok = vandq_u32(ok, vcleq_f32(a, vdupq_n_f32(3.402823466e38f)));  // false: NaN or infinite
      amax = vmaxq_f32(amax, a);
    }
    if (vminvq_u32(ok) == 0) {
      std::memset(q, 0, 32);
      return NAN;
    }
    const float am = vmaxvq_f32(amax);
    const float s = am > 0 ? am / 127.0f : 1.0f;
    const float32x4_t sv = vdupq_n_f32(s), lo = vdupq_n_f32(-127.0f), hi = vdupq_n_f32(127.0f);
    for (int k = 0; k < 8; k += 2) {
      int32x4_t c[2];
      for (int h = 0; h < 2; ++h) {
        const float32x4_t r = vrndnq_f32(vdivq_f32(v[k + h], sv));  // ties to even
        c[h] = vcvtq_s32_f32(vminq_f32(vmaxq_f32(r, lo), hi));
      }
      const int16x8_t w = vcombine_s16(vqmovn_s32(c[0]), vqmovn_s32(c[1]));
      vst1_s8(q + 4 * k, vqmovn_s16(w));
    }
    return s;
  }
  static void Extra(const int8_t*, uint8_t*) {}
  static I LoadExtra(const uint8_t*) { return vdupq_n_s8(0); }
  static I LoadCodes(const int8_t* q) { return vld1q_s8(q); }
  static I LoadWeights(const int8_t* p, int64_t n) {
    if (n >= 16) return vld1q_s8(p);
    int8_t buf[16] = {};
    std::memcpy(buf, p, static_cast<size_t>(n));
    return vld1q_s8(buf);
  }
  static int32x4_t Dot(I w, I q, I) {
    const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(q));
    const int16x8_t hi = vmull_high_s8(w, q);
    return vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi));
  }
  static float32x4_t ToFloat(int32x4_t v) { return vcvtq_f32_s32(v); }
  static float32x4_t StepScale(const float* s, int c) { return vdupq_n_f32(s[c / 2]); }
  static void Prefetch(const int8_t* p) { asm volatile("prfm pldl2keep, [%0]" : : "r"(p)); }

  // The grouped layout: a step is 4 columns of 4 blocks (a quarter group); 4 tokens a tile.
  using W = int8x16_t;
  static constexpr int kGroupTokens = 4;
  static W LoadGroupWeights(const int8_t* p) {  // stored w + 128: back to w
    return veorq_s8(vld1q_s8(p), vdupq_n_s8(static_cast<int8_t>(0x80)));
  }
  static I LoadGroupCodes(const int8_t* q) { return vld1q_s8(q); }
  static I QExtra(I q) { return q; }
  static int32_t BlockBias(const int8_t*) { return 0; }
  static int32x4_t LoadBias(const int32_t* p) { return vld1q_s32(p); }
  static int32x4_t GroupDot(int32x4_t acc, W w, I q, I) { return vaddq_s32(acc, Dot(w, q, q)); }
};

}  // namespace

void LinearRowsInt8(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                    int64_t row_end, float* y) {
  cpu::LinearRowsInt8For<VecNeon, Int8Neon>(x, T, w, row_begin, row_end, y, &LinearRows);
}

void QuantizeInt8Grouped(const float* x, int64_t t_begin, int64_t t_end, Int8GroupActivations* xa) {
  cpu::QuantizeInt8Grouped<Int8Neon>(x, t_begin, t_end, xa);
}

void LinearRowsInt8Grouped(const Int8GroupActivations& xa, const MatrixWeight& w, int64_t row_begin,
                           int64_t row_end, float* y) {
  cpu::LinearRowsInt8GroupedFrom<VecNeon, Int8Neon>(xa, w, row_begin, row_end, y);
}

}  // namespace mimo::neon
