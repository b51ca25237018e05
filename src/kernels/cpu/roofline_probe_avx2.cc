// The machine-limit probes of `mimo bench` at AVX2 width (roofline_probe.h): 32-byte loads, and
// _mm256_fmadd_ps (the AVX2 prefill tile's instruction) with 12 independent accumulators.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/roofline_probe.h"
#include "kernels/cpu/vec_avx2.h"

namespace mimo::avx2 {

uint64_t ReadProbe(const void* p, size_t bytes) { return cpu::ReadProbe<VecAvx2>(p, bytes); }

double FmaProbe(int64_t iters, float* sink) { return cpu::FmaProbe<VecAvx2, 12>(iters, sink); }

}  // namespace mimo::avx2
