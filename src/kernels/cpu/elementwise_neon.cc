// AArch64 NEON element-wise kernels: elementwise_ops.h at 4 lanes (RmsNorm, RoPE rotation,
// SiluMul, row conversion, exp) and the attention block primitives written here over VecNeon
// (exp of shifted scores, dot and axpy rows, fp8 rows), composed into attend_keys
// (attend_keys_composed.h); the NEON probe and the NEON KernelTable.
// attend_keys is the composed update, not a fused kernel like the x86 units': their fused
// shapes are tuned to x86 register files and shuffles (hadd, permute2f128) and nothing here is
// measured on ARM hardware yet.
#include <arm_neon.h>

#include <cmath>
#include <cstdint>

#include "kernels/attend_keys_composed.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_ops.h"
#include "kernels/cpu/vec_neon.h"

namespace mimo::neon {
namespace {

using V = VecNeon;  // this unit's vector width
using F = V::F;

void ExpShifted(const float* s, int64_t n, float m, float* e) {
  cpu::ExpShiftedScalarTail<V>(s, n, m, e);
}
void DotRows(const float* q, const float* k, int64_t n, int64_t d, float scale, float* scores) {
  cpu::DotRowsScalarTail<V>(q, k, n, d, scale, scores);
}
void AxpyRows(const float* e, const float* v, int64_t n, int64_t d, float* acc) {
  cpu::AxpyRowsScalarTail<V>(e, v, n, d, acc);
}

// dst[i] = decode(e4m3 src[i]) * scale: the exact remap (2^-8 x the value, NaN codes -> NaN)
// times 256 x scale (the same rounding as decode x scale); the tail through a zero-padded copy.
void Fp8Row(const uint8_t* src, int64_t n, float scale, float* dst) {
  const F s = V::Set1(256.0f * scale);
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::Store(dst + i, V::LoadE4m3(src + i) * s);
  if (i < n) V::StoreN(dst + i, V::LoadE4m3N(src + i, n - i) * s, n - i);
}

constexpr auto AttendKeysNeon =
    &AttendKeysComposed<&cpu::ConvertRow<V>, &DotRows, &ExpShifted, &AxpyRows, &Fp8Row>;

}  // namespace

bool ProbeInstructions() {
  volatile float in[4] = {1, 2, 3, 4};
  volatile uint16_t half[4] = {0x3c00, 0x4000, 0, 0};  // f16 1.0, 2.0
  float a[4], out[4], h[4];
  uint16_t hb[4];
  for (int i = 0; i < 4; ++i) a[i] = in[i];
  for (int i = 0; i < 4; ++i) hb[i] = half[i];
  const float32x4_t v = vld1q_f32(a);
  vst1q_f32(out, vfmaq_f32(v, v, v));                            // FMLA
  vst1q_f32(h, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(hb))));  // FCVTL
  return out[1] == 6.0f && h[1] == 2.0f;
}

void FillTable(KernelTable* t) {
  cpu::FillUnitTable<V>(t, {Isa::kNeon, &LinearRows, &DotRows, &AxpyRows, &ExpShifted,
                            AttendKeysNeon, &ReadProbe, &FmaProbe});
}

}  // namespace mimo::neon
