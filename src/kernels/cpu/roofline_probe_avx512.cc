// The machine-limit probes of `mimo bench` at AVX-512 width (roofline_probe.h): 64-byte loads,
// and the instruction the prefill tiles issue (_mm512_fmadd_ps) with 16 independent
// accumulators, enough to cover 2 FMA ports x 4-cycle latency; plus the vdpbf16ps probe.
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_*; GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/roofline_probe.h"
#include "kernels/cpu/vec_avx512.h"

namespace mimo::avx512 {

uint64_t ReadProbe(const void* p, size_t bytes) { return cpu::ReadProbe<VecAvx512>(p, bytes); }

double FmaProbe(int64_t iters, float* sink) { return cpu::FmaProbe<VecAvx512, 16>(iters, sink); }

// FmaProbe for vdpbf16ps (AVX512_BF16), the instruction of the opt-in bf16 prompt tile: 32
// multiplies and 32 adds per instruction. Only after ProbeBf16 passed.
__attribute__((target("avx512bf16"))) double Bf16DotProbe(int64_t iters, float* sink) {
  constexpr int kAcc = 16;
  __m512 acc[kAcc];
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
#pragma GCC unroll 16
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
  }
#pragma GCC unroll 16
  for (int k = 1; k < kAcc; ++k) acc[0] = _mm512_add_ps(acc[0], acc[k]);
  *sink += _mm512_reduce_add_ps(acc[0]);
  return 2.0 * 32 * kAcc * static_cast<double>(iters);
}

// The same for vpdpbusd (AVX512_VNNI), the instruction of the int8 mode's tiles: 64 multiplies
// and 64 adds per instruction (int8 operations, counted as the GEMMs count theirs). Only after
// ProbeVnni passed.
__attribute__((target("avx512vnni"))) double Int8DotProbe(int64_t iters, float* sink) {
  constexpr int kAcc = 16;
  __m512i acc[kAcc];
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
#pragma GCC unroll 16
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_epi32(k);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
  }
#pragma GCC unroll 16
  for (int k = 1; k < kAcc; ++k) acc[0] = _mm512_add_epi32(acc[0], acc[k]);
  *sink += static_cast<float>(_mm512_reduce_add_epi32(acc[0]));
  return 2.0 * 64 * kAcc * static_cast<double>(iters);
}

}  // namespace mimo::avx512
