// Scalar reference kernels: the test oracle for every optimized ISA, written for clarity (double
// accumulation, angles in double), and the "scalar" dispatch level. Not thread-safe-relevant:
// pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/matrix_weight.h"
#include "core/tensor.h"

namespace mimo::ref {

// y[t, r] = sum_c x[t, c] * W[r, c] for rows [row_begin, row_end).   x [T, cols], y [T, rows]
void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y);
void Linear(const float* x, int64_t T, const MatrixWeight& w, float* y);

// x, out [T, dim]; weight [dim] F32|BF16|F16.
void RmsNorm(const float* x, int64_t T, int64_t dim, const TensorView& weight, float eps,
             float* out);

// x [T, num_heads, head_dim]; positions [T]. Angles and sin/cos in double.
void RopeNeox(float* x, int64_t T, int num_heads, int head_dim, int rotary_dim, float theta,
              const int32_t* positions);
// The rotation alone, given per-token angles: cos, sin [T, rotary_dim / 2].
void RopeRotate(float* x, int64_t T, int num_heads, int head_dim, int rotary_dim, const float* cos,
                const float* sin);

// out = silu(gate) * up.   [n]
void SiluMul(const float* gate, const float* up, float* out, int64_t n);

// dst[i] = src[i] as fp32.   src [n] F32|BF16|F16
void ConvertRow(const void* src, DType dtype, int64_t n, float* dst);
// scores[j] = scale * dot(q, k[j]) (double sums).   q [d]; k [n, d]; scores [n]
void DotRows(const float* q, const float* k, int64_t n, int64_t d, float scale, float* scores);
// acc[c] += sum_j e[j] * v[j, c], j ascending.   e [n]; v [n, d]; acc [d]
void AxpyRows(const float* e, const float* v, int64_t n, int64_t d, float* acc);
// e[j] = exp(s[j] - m): the fp32 difference, exp in double.   s, e [n]
void ExpShifted(const float* s, int64_t n, float m, float* e);
// Scalar roofline probes (KernelTable::read_probe / fma_probe).
uint64_t ReadProbe(const void* p, size_t bytes);
double FmaProbe(int64_t iters, float* sink);

// out[t] = table[ids[t]].   table [vocab, dim]; out [T, dim]
void Embedding(const TensorView& table, const int32_t* ids, int64_t T, float* out);

}  // namespace mimo::ref
