// The kernel dispatch boundary: one KernelTable of function pointers per ISA, filled once at
// startup. An ISA is usable only if CPUID claims it AND a tiny instruction sequence of it actually
// ran (kernels/cpu_features). MIMO_ISA=scalar|avx2|avx512|neon (env) forces a lower level, never a
// higher one than probed (x86 and AArch64 levels are never both usable: scalar is the only level
// below neon that an AArch64 host has). Thread-safety: all functions are safe to call from any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/matrix_weight.h"
#include "core/tensor.h"

namespace mimo {

// The int8 mode's activations for weights in its grouped layout (MatrixWeight::int8_tile_rows):
// each token's x quantized by the int8 weight format's rule, codes stored in the layout's column
// order. Filled by KernelTable::quantize_int8_grouped, read by linear_rows_int8_grouped; Linear
// quantizes a call's input once (its threads splitting the tokens), not once per thread.
struct Int8GroupActivations {
  int64_t tokens = 0;
  int64_t cols = 0;
  int64_t padded_cols = 0;    // ceil(cols / 512) * 512
  std::vector<int8_t> q;      // [tokens, padded_cols] codes in the grouped order, 0 past cols
  std::vector<float> scale;   // [tokens, padded_cols / 32] block scales, 0 past the row's blocks
  std::vector<int32_t> bias;  // [tokens, padded_cols / 32] the ISA's per-block correction
  void Resize(int64_t T, int64_t c) {
    tokens = T;
    cols = c;
    padded_cols = (c + MatrixWeight::kInt8GroupCols - 1) / MatrixWeight::kInt8GroupCols *
                  MatrixWeight::kInt8GroupCols;
    q.resize(static_cast<size_t>(T * padded_cols));
    scale.resize(static_cast<size_t>(T * padded_cols / 32));
    bias.resize(static_cast<size_t>(T * padded_cols / 32));
  }
};

// kNeon: AArch64 Advanced SIMD (4 fp32 lanes), the vector types' third instantiation.
enum class Isa : uint8_t { kScalar, kAvx2, kAvx512, kNeon, kCount };

const char* IsaName(Isa isa);
// "scalar" | "avx2" | "avx512" | "neon" -> false for anything else.
bool ParseIsa(const char* name, Isa* out);

// The keys one attend_keys call reads, in place in the paged cache: key j's K row starts
// k_stride * j elements after k (V likewise), elements of dtype F32 | BF16 | F8E4M3; an fp8
// element's value is decode(e4m3) * k_scale (v_scale for V).
struct AttendKeyRows {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride = 0, v_stride = 0;
  DType dtype = DType::kF32;
  float k_scale = 1.0f, v_scale = 1.0f;
  int64_t n = 0;
  // The rows of the caller's next call (same strides), requested ahead while this one computes
  // so a long context streams from DRAM without stalls; null when there is none.
  const void* k_next = nullptr;
  const void* v_next = nullptr;
  int64_t n_next = 0;
};

struct KernelTable {
  Isa isa = Isa::kScalar;

  // y[t, r] = sum_c x[t, c] * W[r, c] for r in [row_begin, row_end).   x [T, w.cols], y [T, w.rows]
  void (*linear_rows)(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                      int64_t row_end, float* y) = nullptr;
  // linear_rows with x rounded to bf16 (round to nearest even) and products summed in fp32, two
  // columns per instruction (AVX512_BF16 vdpbf16ps); BF16 and F8E4M3 weights (others: the exact
  // linear_rows). Every step of every T when asked for (ExecContext::precision = kBf16); one
  // reduction order per output element whatever T (batch invariant within the mode); null where
  // the ISA or the probe lacks AVX512_BF16.
  void (*linear_rows_bf16)(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                           int64_t row_end, float* y) = nullptr;
  // linear_rows with x quantized per token to int8 by Q8_0's rule (per 32 columns, scale
  // amax / 127 in fp32, codes rounded to nearest even) and each block's dot product exact
  // in integers (AVX512_VNNI vpdpbusd; AVX2 vpmaddubsw; NEON smull), scaled by weight scale x
  // activation scale in fp32; int8 weights only (others: the exact linear_rows). Batch
  // invariant within the mode; null for the scalar table.
  void (*linear_rows_int8)(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                           int64_t row_end, float* y) = nullptr;
  // The two halves of linear_rows_int8 on a weight in the grouped layout, so a call quantizes its
  // input once: token rows [t_begin, t_end) of x [xa->tokens, xa->cols] into xa (sized with
  // Resize), then rows [row_begin, row_end) (whole tiles) from xa; the same bits as
  // linear_rows_int8. Null exactly where linear_rows_int8 is.
  void (*quantize_int8_grouped)(const float* x, int64_t t_begin, int64_t t_end,
                                Int8GroupActivations* xa) = nullptr;
  void (*linear_rows_int8_grouped)(const Int8GroupActivations& xa, const MatrixWeight& w,
                                   int64_t row_begin, int64_t row_end, float* y) = nullptr;
  // See RmsNorm in kernels.h.
  void (*rms_norm)(const float* x, int64_t T, int64_t dim, const TensorView& weight, float eps,
                   float* out) = nullptr;
  // Rotate-half on the first rotary_dim dims of each head with precomputed angles.
  // x [T, num_heads, head_dim]; cos, sin [T, rotary_dim / 2]
  void (*rope_rotate)(float* x, int64_t T, int num_heads, int head_dim, int rotary_dim,
                      const float* cos, const float* sin) = nullptr;
  // out = silu(gate) * up.   [n]
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  // dst[i] = src[i] as fp32 for F32|BF16|F16 src.   [n]
  void (*convert_row)(const void* src, DType dtype, int64_t n, float* dst) = nullptr;
  // Attention over one block of keys (attention/cpu_paged_backend.cc):
  // scores[j] = scale * dot(q, k[j]) for j < n.   q [d]; k [n, d]; scores [n]
  void (*dot_rows)(const float* q, const float* k, int64_t n, int64_t d, float scale,
                   float* scores) = nullptr;
  // acc[c] += sum over j ascending of e[j] * v[j, c].   e [n]; v [n, d]; acc [d]
  void (*axpy_rows)(const float* e, const float* v, int64_t n, int64_t d, float* acc) = nullptr;
  // e[j] = exp(s[j] - m) (a few ulp; NaN stays NaN).   s, e [n]
  void (*exp_shifted)(const float* s, int64_t n, float m, float* e) = nullptr;
  // Online-softmax update of num_states query states (the query heads of one GQA group at one
  // position) that all see the keys of `rows`, in groups of kAttendKeyGroup keys
  // (attend_keys_composed.h); per state s and group: scores = scale * dot(q[s], k[j]), then
  // m[s] = max(m[s], group max) with l[s] and acc[s] rescaled by exp(old m - new m),
  // l[s] += sum exp(score - m[s]), acc[s] += sum exp(score - m[s]) * v[j].
  //   q [num_states, dk]; m, l [num_states]; acc [num_states, dv]
  void (*attend_keys)(const float* q, int num_states, const AttendKeyRows& rows, int64_t dk,
                      int64_t dv, float scale, float* m, float* l, float* acc) = nullptr;

  // Machine-limit probes for benchmarks (`mimo bench`), at this table's vector width.
  // Sums [p, p + bytes) (64-byte aligned; a multiple of 512 bytes is read) with the widest loads
  // into independent accumulators; returns a value that depends on every byte.
  uint64_t (*read_probe)(const void* p, size_t bytes) = nullptr;
  // iters rounds of independent fp32 FMAs of the width the Linear T > 1 tiles use (result added
  // to *sink); returns the floating-point operations executed (2 per FMA lane).
  double (*fma_probe)(int64_t iters, float* sink) = nullptr;
  // The same for vdpbf16ps, the instruction of linear_rows_bf16 (null with it).
  double (*bf16_dot_probe)(int64_t iters, float* sink) = nullptr;
  // The same for vpdpbusd (AVX512_VNNI), the int8 mode's instruction: int8 multiply-adds, 2
  // operations each (null without it).
  double (*int8_dot_probe)(int64_t iters, float* sink) = nullptr;
};

// The level MIMO_ISA=env_value asks for, clamped to best_probed; nullptr/empty/unknown -> best.
Isa SelectIsa(Isa best_probed, const char* env_value);

// The table every op in kernels.h uses: the best probed ISA, lowered by MIMO_ISA if set.
const KernelTable& ActiveKernels();
// The table of one ISA, or nullptr if that ISA is not compiled in or failed its probe.
const KernelTable* KernelsFor(Isa isa);
// Every ISA whose table is usable here, lowest first (always starts with kScalar).
std::vector<Isa> AvailableIsas();

}  // namespace mimo

namespace mimo {
struct ExecContext;
// Linear (kernels.h) on an explicit table, threaded over output rows with ctx.pool. Tests and
// benchmarks use it to run one ISA; Linear() calls it with ActiveKernels().
void LinearOn(const KernelTable& k, ExecContext& ctx, const float* x, int64_t T,
              const MatrixWeight& w, float* y);
struct LinearJob;
// LinearMany (kernels.h) on an explicit table.
void LinearManyOn(const KernelTable& k, ExecContext& ctx, const LinearJob* jobs, int num_jobs);
}  // namespace mimo
