// The machine-limit probes of `mimo bench` at AVX-512 width: a streaming read with 64-byte loads
// into 8 independent accumulators (no software prefetch: on the Xeon hosts it measured lower),
// and the fp32 FMA throughput of the instruction the prefill tiles issue (_mm512_fmadd_ps) with
// 16 independent accumulators, enough to cover 2 FMA ports x 4-cycle latency.
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_*; GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace mimo::avx512 {

uint64_t ReadProbe(const void* p, size_t bytes) {
  const __m512i* q = static_cast<const __m512i*>(p);
  __m512i a[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) a[k] = _mm512_setzero_si512();
  for (size_t i = 0, n = bytes / 512; i < n; ++i, q += 8) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) a[k] = _mm512_add_epi64(a[k], _mm512_load_si512(q + k));
  }
#pragma GCC unroll 8
  for (int k = 1; k < 8; ++k) a[0] = _mm512_add_epi64(a[0], a[k]);
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(a[0]));
}

double FmaProbe(int64_t iters, float* sink) {
  constexpr int kAcc = 16;
  __m512 acc[kAcc];
  const __m512 m = _mm512_set1_ps(0.99999994f), b = _mm512_set1_ps(1e-7f);
#pragma GCC unroll 16
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_fmadd_ps(acc[k], m, b);
  }
#pragma GCC unroll 16
  for (int k = 1; k < kAcc; ++k) acc[0] = _mm512_add_ps(acc[0], acc[k]);
  *sink += _mm512_reduce_add_ps(acc[0]);
  return 2.0 * 16 * kAcc * static_cast<double>(iters);
}

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

}  // namespace mimo::avx512
