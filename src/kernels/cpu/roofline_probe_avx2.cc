// The machine-limit probes of `mimo bench` at AVX2 width: a streaming read with 32-byte loads into
// 8 independent accumulators, and the fp32 FMA throughput of _mm256_fmadd_ps (the AVX2 prefill
// tile's instruction) with 12 independent accumulators.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"

namespace mimo::avx2 {

uint64_t ReadProbe(const void* p, size_t bytes) {
  const __m256i* q = static_cast<const __m256i*>(p);
  __m256i a[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) a[k] = _mm256_setzero_si256();
  for (size_t i = 0, n = bytes / 256; i < n; ++i, q += 8) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) a[k] = _mm256_add_epi64(a[k], _mm256_load_si256(q + k));
  }
#pragma GCC unroll 8
  for (int k = 1; k < 8; ++k) a[0] = _mm256_add_epi64(a[0], a[k]);
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), a[0]);
  return out[0] + out[1] + out[2] + out[3];
}

double FmaProbe(int64_t iters, float* sink) {
  constexpr int kAcc = 12;
  __m256 acc[kAcc];
  const __m256 m = _mm256_set1_ps(0.99999994f), b = _mm256_set1_ps(1e-7f);
#pragma GCC unroll 16
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm256_set1_ps(static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, b);
  }
#pragma GCC unroll 16
  for (int k = 1; k < kAcc; ++k) acc[0] = _mm256_add_ps(acc[0], acc[k]);
  alignas(32) float out[8];
  _mm256_store_ps(out, acc[0]);
  for (float f : out) *sink += f;
  return 2.0 * 8 * kAcc * static_cast<double>(iters);
}

}  // namespace mimo::avx2
