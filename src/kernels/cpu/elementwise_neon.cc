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
  const F mv = V::Set1(m);
  int64_t j = 0;
  for (; j + V::kLanes <= n; j += V::kLanes) {
    const F x = V::Load(s + j) - mv;
    V::Store(e + j, V::KeepNan(x, cpu::Exp<V>(x)));  // Exp's clamp would hide a NaN
  }
  for (; j < n; ++j) e[j] = std::exp(s[j] - m);
}

// scores[j] = scale * q . k[j]: 2 keys at a time, 4-column vectors, a scalar column tail.
void DotRows(const float* q, const float* k, int64_t n, int64_t d, float scale, float* scores) {
  const int64_t dv = d / V::kLanes * V::kLanes;
  auto tail = [&](const float* kj) {
    float s = 0.0f;
    for (int64_t c = dv; c < d; ++c) s += q[c] * kj[c];
    return s;
  };
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const float* k0 = k + j * d;
    const float* k1 = k0 + d;
    F a0 = V::Zero(), a1 = a0;
    for (int64_t c = 0; c < dv; c += V::kLanes) {
      const F qv = V::Load(q + c);
      a0 = V::Fmadd(qv, V::Load(k0 + c), a0);
      a1 = V::Fmadd(qv, V::Load(k1 + c), a1);
    }
    scores[j] = (V::ReduceAdd(a0) + tail(k0)) * scale;
    scores[j + 1] = (V::ReduceAdd(a1) + tail(k1)) * scale;
  }
  for (; j < n; ++j) {
    F a = V::Zero();
    for (int64_t c = 0; c < dv; c += V::kLanes) {
      a = V::Fmadd(V::Load(q + c), V::Load(k + j * d + c), a);
    }
    scores[j] = (V::ReduceAdd(a) + tail(k + j * d)) * scale;
  }
}

// acc += sum_j e[j] * v[j]: 4 columns at a time, the keys in order.
void AxpyRows(const float* e, const float* v, int64_t n, int64_t d, float* acc) {
  int64_t c = 0;
  for (; c + V::kLanes <= d; c += V::kLanes) {
    F a = V::Load(acc + c);
    for (int64_t j = 0; j < n; ++j) a = V::Fmadd(V::Set1(e[j]), V::Load(v + j * d + c), a);
    V::Store(acc + c, a);
  }
  for (; c < d; ++c) {
    for (int64_t j = 0; j < n; ++j) acc[c] += e[j] * v[j * d + c];
  }
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
