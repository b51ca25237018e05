// The machine-limit probes of `mimo bench` at NEON width (roofline_probe.h): 16-byte loads, and
// FMLA (the instruction of the Linear tiles) with 16 independent accumulators: enough to cover
// 4 FMA pipes x 4-cycle latency (Neoverse V1/V2), half the 32 vector registers.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/roofline_probe.h"
#include "kernels/cpu/vec_neon.h"

namespace mimo::neon {

uint64_t ReadProbe(const void* p, size_t bytes) { return cpu::ReadProbe<VecNeon>(p, bytes); }

double FmaProbe(int64_t iters, float* sink) { return cpu::FmaProbe<VecNeon, 16>(iters, sink); }

}  // namespace mimo::neon
