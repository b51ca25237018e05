// The op API the model calls. Activations are fp32 on CPU; weights come in their stored dtype.
// Each op dispatches once (kernels/dispatch) to the best ISA that passed its runtime probe;
// kernels/ref/ holds the scalar reference every optimized version is tested against.
#pragma once

#include <cstdint>

#include "core/matrix_weight.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace mimo {

// y[t, r] = sum_c x[t, c] * W[r, c].   x [T, w.cols], y [T, w.rows]
void Linear(ExecContext& ctx, const float* x, int64_t T, const MatrixWeight& w, float* y);

// Independent Linear ops run in one fork-join region (e.g. q/k/v, or gate/up of every chosen
// expert): the rows of all jobs are split over the threads in proportion to their work
// (rows x cols x T). Each output row is computed exactly as Linear computes it.
struct LinearJob {
  const float* x = nullptr;  // [T, w->cols]
  int64_t T = 0;
  const MatrixWeight* w = nullptr;
  float* y = nullptr;  // [T, w->rows]
};
void LinearMany(ExecContext& ctx, const LinearJob* jobs, int num_jobs);

// out[t] = (x[t] * rsqrt(mean(x[t]^2) + eps)) * weight.   x, out [T, dim]; weight [dim] F32|BF16|F16
// (out may alias x)
void RmsNorm(const float* x, int64_t T, int64_t dim, const TensorView& weight, float eps, float* out);

// NeoX (rotate-half) RoPE on the first rotary_dim dims of every head, in place.
// x [T, num_heads, head_dim]; positions [T]; inv_freq[i] = theta^(-2i/rotary_dim).
void RopeNeox(float* x, int64_t T, int num_heads, int head_dim, int rotary_dim, float theta,
              const int32_t* positions);

// out[i] = silu(gate[i]) * up[i].   gate, up, out [n]  (out may alias gate)
void SiluMul(const float* gate, const float* up, float* out, int64_t n);

// out[t] = table[ids[t]] as fp32.   table [vocab, dim] F32|BF16|F16; out [T, dim]
void Embedding(const TensorView& table, const int32_t* ids, int64_t T, float* out);

// FP8 weights: marks in w->fp8_plain the tiles of 4 rows x one scale block that hold no subnormal
// and no NaN e4m3 code, so that the decode GEMV (T == 1, AVX-512) reads them with a three-op
// decode and no per-line NaN test (linear_avx512.cc). The outputs do not change, bit for bit:
// the tiles left unmarked take the general path. Reads the whole weight once (a load-time pass,
// rows split over the pool). Returns how many tiles are plain, of *tiles (may be null); other
// dtypes are left as they are (0 of 0).
int64_t MarkFp8PlainBlocks(MatrixWeight* w, ThreadPool* pool, int64_t* tiles = nullptr);

// int8 weights (DType::kInt8, row-major): re-lays codes and scales out as rows interleaved in tiles
// (MatrixWeight::int8_tile_rows), so that each tile of the int8 mode's GEMV reads one sequential
// stream instead of four row streams. Only KernelTable::linear_rows_int8 reads that layout
// (Linear aborts, naming the weight's shape, if another kernel is asked to): call it only when
// every step runs --precision int8 on a table that has the int8 kernels. The mode's outputs do not
// change, bit for bit. Needs one scale row per weight row. Copies the weight once (rows split over
// the pool); returns whether it did (false for other dtypes and weights already interleaved).
bool InterleaveInt8Rows(MatrixWeight* w, ThreadPool* pool);

// Which ISA the dispatcher chose ("avx512", "avx2", "scalar"), for logs and `mimo inspect`.
const char* KernelIsaName();

}  // namespace mimo
