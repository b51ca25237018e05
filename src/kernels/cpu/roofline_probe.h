// The machine-limit probes of `mimo bench` (KernelTable::read_probe / fma_probe) written once over
// a vector-op type V (vec_avx2.h); roofline_probe_avx2.cc and roofline_probe_avx512.cc
// instantiate them at their width and flags.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mimo::cpu {

// A streaming read of [p, p + bytes) (a multiple of 8 vectors is read; p vector-aligned) with
// the widest loads into 8 independent accumulators (no software prefetch: on the Xeon hosts it
// measured lower); the 64-bit lane sum depends on every byte.
template <class V>
uint64_t ReadProbe(const void* p, size_t bytes) {
  using I = typename V::I;
  const I* q = static_cast<const I*>(p);
  I a[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) a[k] = I{};
  for (size_t i = 0, n = bytes / (8 * sizeof(I)); i < n; ++i, q += 8) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) a[k] = V::AddU64(a[k], q[k]);
  }
#pragma GCC unroll 8
  for (int k = 1; k < 8; ++k) a[0] = V::AddU64(a[0], a[k]);
  return V::ReduceAddU64(a[0]);
}

// iters rounds of kAcc independent fp32 FMA chains (enough to cover the FMA ports' latency);
// returns the floating-point operations (2 per lane and FMA).
template <class V, int kAcc>
double FmaProbe(int64_t iters, float* sink) {
  typename V::F acc[kAcc];
  const typename V::F m = V::Set1(0.99999994f), b = V::Set1(1e-7f);
#pragma GCC unroll 16
  for (int k = 0; k < kAcc; ++k) acc[k] = V::Set1(static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAcc; ++k) acc[k] = V::Fmadd(acc[k], m, b);
  }
#pragma GCC unroll 16
  for (int k = 1; k < kAcc; ++k) acc[0] = acc[0] + acc[k];
  *sink += V::ReduceAdd(acc[0]);
  return 2.0 * V::kLanes * kAcc * static_cast<double>(iters);
}

}  // namespace mimo::cpu
