// Entry points of the per-ISA translation units (cpu/*_avx2.cc compiled with -mavx2 -mfma -mf16c,
// cpu/*_avx512.cc with -mavx512{f,bw,vl,dq}; on AArch64 cpu/*_neon.cc with -march=armv8-a): only
// the target architecture's units are compiled and declared. Nothing here may be called before
// the matching probe in kernels/cpu_features succeeded, except the probe itself (which runs under a SIGILL
// guard).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dispatch.h"

namespace mimo {
#if defined(__x86_64__) || defined(__i386__)
namespace avx2 {
// Executes a few AVX2/FMA/F16C instructions; returns true (or faults with SIGILL).
bool ProbeInstructions();
// Roofline probes (KernelTable::read_probe / fma_probe), roofline_probe_*.cc.
uint64_t ReadProbe(const void* p, size_t bytes);
double FmaProbe(int64_t iters, float* sink);
void FillTable(KernelTable* table);
void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y);
// KernelTable::linear_rows_int8 (vpmaddubsw; AVX2 itself is the probe).
void LinearRowsInt8(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                    int64_t row_end, float* y);
// ... and its halves (KernelTable::quantize_int8_grouped / linear_rows_int8_grouped).
void QuantizeInt8Grouped(const float* x, int64_t t_begin, int64_t t_end, Int8GroupActivations* xa);
void LinearRowsInt8Grouped(const Int8GroupActivations& xa, const MatrixWeight& w, int64_t row_begin,
                           int64_t row_end, float* y);
}  // namespace avx2

namespace avx512 {
bool ProbeInstructions();
// Executes vcvtne2ps2bf16 and vdpbf16ps (AVX512_BF16); returns true (or faults with SIGILL).
bool ProbeBf16();
// KernelTable::linear_rows_bf16 / bf16_dot_probe; only after ProbeBf16 passed.
void LinearRowsBf16(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                    int64_t row_end, float* y);
double Bf16DotProbe(int64_t iters, float* sink);
// KernelTable::int8_dot_probe (vpdpbusd); only after ProbeVnni passed.
double Int8DotProbe(int64_t iters, float* sink);
// Executes vpdpbusd (AVX512_VNNI); returns true (or faults with SIGILL).
bool ProbeVnni();
// KernelTable::linear_rows_int8; only after ProbeVnni passed.
void LinearRowsInt8(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                    int64_t row_end, float* y);
// ... and its halves (KernelTable::quantize_int8_grouped / linear_rows_int8_grouped).
void QuantizeInt8Grouped(const float* x, int64_t t_begin, int64_t t_end, Int8GroupActivations* xa);
void LinearRowsInt8Grouped(const Int8GroupActivations& xa, const MatrixWeight& w, int64_t row_begin,
                           int64_t row_end, float* y);
// Roofline probes (KernelTable::read_probe / fma_probe), roofline_probe_*.cc.
uint64_t ReadProbe(const void* p, size_t bytes);
double FmaProbe(int64_t iters, float* sink);
void FillTable(KernelTable* table);
void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y);
}  // namespace avx512
#endif

#if defined(__aarch64__)
namespace neon {
// Executes a few NEON instructions (FMLA, FCVTL); returns true (or faults with SIGILL).
bool ProbeInstructions();
// Roofline probes (KernelTable::read_probe / fma_probe), roofline_probe_neon.cc.
uint64_t ReadProbe(const void* p, size_t bytes);
double FmaProbe(int64_t iters, float* sink);
void FillTable(KernelTable* table);
void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y);
// KernelTable::linear_rows_int8 (SMULL + SADDLP; the NEON probe covers them).
void LinearRowsInt8(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                    int64_t row_end, float* y);
// ... and its halves (KernelTable::quantize_int8_grouped / linear_rows_int8_grouped).
void QuantizeInt8Grouped(const float* x, int64_t t_begin, int64_t t_end, Int8GroupActivations* xa);
void LinearRowsInt8Grouped(const Int8GroupActivations& xa, const MatrixWeight& w, int64_t row_begin,
                           int64_t row_end, float* y);
}  // namespace neon
#endif
}  // namespace mimo
