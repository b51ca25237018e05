// The public ops of kernels.h: argument checks, threading, then one call into the active table.
#include "kernels/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "kernels/dispatch.h"

namespace mimo {
namespace {

// Output rows per parallel work item: keeps each thread's rows contiguous and a multiple of the
// kernels' row blocking.
constexpr int64_t kRowGranule = 16;
// Below this many multiply-adds a fork-join costs more than it saves.
constexpr int64_t kMinParallelWork = 1 << 16;

void CheckMatrixWeight(const MatrixWeight& w) {
  MIMO_CHECK(w.data != nullptr && w.rows > 0 && w.cols > 0, "Linear: empty weight [%lld, %lld]",
             static_cast<long long>(w.rows), static_cast<long long>(w.cols));
  switch (w.dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
      return;
    case DType::kInt8:
      // The kernels' int8 steps are whole 32-column blocks (a short last block masked).
      MIMO_CHECK(w.block_cols == 32, "Linear: int8 weight [%lld, %lld] has block_cols %lld, not 32",
                 static_cast<long long>(w.rows), static_cast<long long>(w.cols),
                 static_cast<long long>(w.block_cols));
      if (w.int8_tile_rows != 0) {  // the grouped layout: bf16 scales of its own
        MIMO_CHECK(w.int8_tile_rows == MatrixWeight::kInt8TileRows && w.scale_row.empty() &&
                       w.block_rows == 1 && w.num_scale_rows == w.rows &&
                       w.scale_cols == (w.cols + 31) / 32 && w.int8_scale_bf16 != nullptr,
                   "Linear: int8 weight [%lld, %lld] has an inconsistent tile layout (%d rows)",
                   static_cast<long long>(w.rows), static_cast<long long>(w.cols),
                   w.int8_tile_rows);
        return;
      }
      [[fallthrough]];
    case DType::kF8E4M3:
      MIMO_CHECK(w.scale_inv != nullptr && w.block_cols > 0 &&
                     w.scale_cols * w.block_cols >= w.cols &&
                     (static_cast<int64_t>(w.scale_row.size()) == w.rows ||
                      (w.scale_row.empty() && w.block_rows > 0 &&
                       (w.rows + w.block_rows - 1) / w.block_rows <= w.num_scale_rows)),
                 "Linear: %s weight [%lld, %lld] has inconsistent scales (scale_cols %lld, "
                 "block_cols %lld, scale_row %zu)",
                 w.dtype == DType::kInt8 ? "int8" : "FP8", static_cast<long long>(w.rows),
                 static_cast<long long>(w.cols), static_cast<long long>(w.scale_cols),
                 static_cast<long long>(w.block_cols), w.scale_row.size());
      return;
    case DType::kMxfp4:
      // The kernels decode one 32-column block at a time with one exponent per block and row.
      MIMO_CHECK(w.scale_e8m0 != nullptr && w.block_cols == 32 &&
                     w.scale_cols * w.block_cols >= w.cols &&
                     (static_cast<int64_t>(w.scale_row.size()) == w.rows ||
                      (w.scale_row.empty() && w.block_rows > 0 &&
                       (w.rows + w.block_rows - 1) / w.block_rows <= w.num_scale_rows)),
                 "Linear: MXFP4 weight [%lld, %lld] has inconsistent scales (scale_cols %lld, "
                 "block_cols %lld, %lld scale rows)",
                 static_cast<long long>(w.rows), static_cast<long long>(w.cols),
                 static_cast<long long>(w.scale_cols), static_cast<long long>(w.block_cols),
                 static_cast<long long>(w.num_scale_rows));
      return;
    default:
      MIMO_ABORT("Linear: unsupported weight dtype %s", std::string(DTypeName(w.dtype)).c_str());
  }
}

using RowsFn = void (*)(const float*, int64_t, const MatrixWeight&, int64_t, int64_t, float*);
// The table entry a step runs: the bf16 kernel when the context asks for it and the CPU has one,
// whatever T (so a token's output does not depend on the step it is in), else the exact one.
RowsFn RowsFor(const KernelTable& k, const ExecContext& ctx) {
  if (ctx.precision == Precision::kBf16 && k.linear_rows_bf16 != nullptr) {
    return k.linear_rows_bf16;
  }
  if (ctx.precision == Precision::kInt8 && k.linear_rows_int8 != nullptr) {
    return k.linear_rows_int8;
  }
  return k.linear_rows;
}

// The interleaved int8 layout is read by the int8 mode's kernels only.
void CheckLayoutFor(const KernelTable& k, RowsFn rows, const MatrixWeight& w) {
  MIMO_CHECK(w.int8_tile_rows == 0 || (rows == k.linear_rows_int8 && rows != nullptr),
             "Linear: int8 weight [%lld, %lld] is interleaved for --precision int8 "
             "(InterleaveInt8Rows), but this step runs the %s kernels",
             static_cast<long long>(w.rows), static_cast<long long>(w.cols),
             rows == k.linear_rows_bf16 ? "bf16" : "exact");
}
// Whether rows runs the int8 mode on w's grouped layout, whose input a threaded call quantizes
// once (QuantizeGrouped) instead of once per thread.
bool GroupedInt8(const KernelTable& k, RowsFn rows, const MatrixWeight& w) {
  return w.int8_tile_rows != 0 && rows == k.linear_rows_int8 &&
         k.linear_rows_int8_grouped != nullptr;
}

// Inputs of at least this many values are quantized by all threads, split by token.
constexpr int64_t kMinParallelQuantize = 1 << 15;

// Fills xa[i] (sized) from x[i] for i < n: in one region split by token when there is enough to
// share, else on the calling thread (a decode step's few thousand values).
void QuantizeGrouped(const KernelTable& k, ExecContext& ctx, const float* const* x,
                     Int8GroupActivations* xa, int n) {
  int64_t tokens = 0, values = 0;
  for (int i = 0; i < n; ++i) {
    tokens += xa[i].tokens;
    values += xa[i].tokens * xa[i].cols;
  }
  if (ctx.pool == nullptr || values < kMinParallelQuantize) {
    for (int i = 0; i < n; ++i) k.quantize_int8_grouped(x[i], 0, xa[i].tokens, &xa[i]);
    return;
  }
  ctx.pool->ParallelFor(tokens, [&](int64_t u0, int64_t u1, int) {
    int64_t base = 0;  // the first token of input i among all inputs' tokens
    for (int i = 0; i < n && base < u1; ++i) {
      const int64_t b = std::max<int64_t>(u0 - base, 0), e = std::min(u1 - base, xa[i].tokens);
      if (b < e) k.quantize_int8_grouped(x[i], b, e, &xa[i]);
      base += xa[i].tokens;
    }
  });
}
}  // namespace

void LinearOn(const KernelTable& k, ExecContext& ctx, const float* x, int64_t T,
              const MatrixWeight& w, float* y) {
  CheckMatrixWeight(w);
  if (T <= 0) return;
  const int64_t groups = (w.rows + kRowGranule - 1) / kRowGranule;
  const RowsFn rows = RowsFor(k, ctx);
  CheckLayoutFor(k, rows, w);
  // One thread still goes through ParallelFor (which runs it inline), so that the regions a step
  // counts are the workload's whatever the thread count (ThreadPool::regions()).
  if (ctx.pool == nullptr || groups == 1 || w.rows * w.cols * T < kMinParallelWork) {
    rows(x, T, w, 0, w.rows, y);
    return;
  }
  if (GroupedInt8(k, rows, w)) {
    // The caller's (a name for it, as a lambda on another thread would see its own).
    thread_local Int8GroupActivations caller_xa;
    Int8GroupActivations& xa = caller_xa;
    xa.Resize(T, w.cols);
    QuantizeGrouped(k, ctx, &x, &xa, 1);
    ctx.pool->ParallelFor(groups, [&](int64_t g0, int64_t g1, int) {
      k.linear_rows_int8_grouped(xa, w, g0 * kRowGranule, std::min(g1 * kRowGranule, w.rows), y);
    });
    return;
  }
  ctx.pool->ParallelFor(groups, [&](int64_t g0, int64_t g1, int) {
    rows(x, T, w, g0 * kRowGranule, std::min(g1 * kRowGranule, w.rows), y);
  });
}

void Linear(ExecContext& ctx, const float* x, int64_t T, const MatrixWeight& w, float* y) {
  LinearOn(ActiveKernels(), ctx, x, T, w, y);
}

int64_t MarkFp8PlainBlocks(MatrixWeight* w, ThreadPool* pool, int64_t* tiles) {
  if (tiles) *tiles = 0;
  if (w->dtype != DType::kF8E4M3 || w->empty()) return 0;
  CheckMatrixWeight(*w);
  // Codes the branch-free decode cannot take: subnormals (exponent 0, mantissa not 0: DAZ would
  // read them as 0) and the two NaN codes. Zero codes decode to 0 exactly.
  static const std::array<uint8_t, 256> kSpecial = [] {
    std::array<uint8_t, 256> t{};
    for (int b = 0; b < 256; ++b) {
      const int e = (b >> 3) & 15, m = b & 7;
      t[b] = (e == 0 && m != 0) || (e == 15 && m == 7);
    }
    return t;
  }();
  constexpr int64_t kGroup = 4;  // rows per GEMV tile (cpu::kRows)
  auto p = std::make_shared<Fp8PlainBlocks>();
  p->data = w->data;
  p->rows = w->rows;
  p->cols = w->cols;
  p->block_cols = w->block_cols;
  const int64_t blocks = (w->cols + w->block_cols - 1) / w->block_cols;
  const int64_t groups = (w->rows + kGroup - 1) / kGroup;
  p->words_per_group = (blocks + 63) / 64;
  p->bits.assign(static_cast<size_t>(groups * p->words_per_group), 0);
  const auto* codes = static_cast<const uint8_t*>(w->data);
  std::vector<int64_t> plain_per_part(pool ? pool->num_threads() : 1, 0);
  auto mark = [&](int64_t g0, int64_t g1, int part) {
    for (int64_t g = g0; g < g1; ++g) {
      if ((g + 1) * kGroup > w->rows) continue;  // a short last tile runs the general path
      for (int64_t j = 0; j < blocks; ++j) {
        const int64_t cb = j * w->block_cols, ce = std::min(cb + w->block_cols, w->cols);
        if ((ce - cb) % 64 != 0) continue;  // the plain tile reads whole 64-byte lines
        uint8_t special = 0;
        for (int64_t r = g * kGroup; r < (g + 1) * kGroup; ++r) {
          const uint8_t* row = codes + r * w->cols;
          for (int64_t c = cb; c < ce; ++c) special |= kSpecial[row[c]];
        }
        if (!special) {
          p->bits[g * p->words_per_group + (j >> 6)] |= uint64_t{1} << (j & 63);
          ++plain_per_part[part];
        }
      }
    }
  };
  if (pool) {
    pool->ParallelFor(groups, mark);
  } else {
    mark(0, groups, 0);
  }
  if (tiles) *tiles = groups * blocks;
  w->fp8_plain = std::move(p);
  int64_t plain = 0;
  for (int64_t n : plain_per_part) plain += n;
  return plain;
}

bool InterleaveInt8Rows(MatrixWeight* w, ThreadPool* pool) {
  if (w->dtype != DType::kInt8 || w->empty() || w->int8_tile_rows != 0) return false;
  CheckMatrixWeight(*w);
  MIMO_CHECK(w->scale_row.empty() && w->block_rows == 1 && w->num_scale_rows == w->rows,
             "InterleaveInt8Rows: int8 weight [%lld, %lld] needs one scale row per weight row",
             static_cast<long long>(w->rows), static_cast<long long>(w->cols));
  MatrixWeight t = *w;
  t.int8_tile_rows = MatrixWeight::kInt8TileRows;
  // Tensors: weights of a few MB and more are anonymous mappings advised to 2 MiB pages (a 4 KiB
  // page is a TLB miss per 4 KiB the decode streams).
  struct Buffers {
    Tensor codes, scales;
  };
  auto buf = std::make_shared<Buffers>();
  buf->codes.Reset(DType::kInt8, {t.DataBytes()});
  buf->scales.Reset(DType::kBF16, {t.ScaleBytes() / 2});
  auto* tiled_codes = static_cast<int8_t*>(buf->codes.data());
  auto* tiled_scales = static_cast<uint16_t*>(buf->scales.data());
  std::memset(tiled_codes, 0x80, static_cast<size_t>(t.DataBytes()));  // padding: w = 0
  std::memset(tiled_scales, 0, static_cast<size_t>(t.ScaleBytes()));
  const int64_t rows = w->rows, cols = w->cols, nb = w->scale_cols;
  const auto* codes = static_cast<const int8_t*>(w->data);
  // Runs of 4 columns (a lane's bytes) stay together in the grouped layout, stored w ^ 0x80.
  auto body = [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < cols; c += 4) {
        int8_t* dst = tiled_codes + t.Int8CodeIndex(r, c);
        for (int64_t b = 0; b < std::min<int64_t>(4, cols - c); ++b)
          dst[b] = static_cast<int8_t>(codes[r * cols + c + b] ^ 0x80);
      }
      for (int64_t j = 0; j < nb; ++j) {
        const float s = w->scale_inv[r * nb + j];
        MIMO_CHECK(BF16ToF32(F32ToBF16(s)) == s,
                   "InterleaveInt8Rows: the scale %g of row %lld, block %lld is not a bf16 value "
                   "(QuantizeWeightToInt8's are)",
                   static_cast<double>(s), static_cast<long long>(r), static_cast<long long>(j));
        tiled_scales[t.Int8ScaleIndex(r, j)] = F32ToBF16(s);
      }
    }
  };
  if (pool) {
    pool->ParallelFor(rows, body);
  } else {
    body(0, rows, 0);
  }
  t.data = tiled_codes;
  t.scale_inv = nullptr;
  t.int8_scale_bf16 = tiled_scales;
  t.owned = std::move(buf);
  *w = std::move(t);
  return true;
}

// One region for many jobs. Part p of P covers the global rows (jobs concatenated) from
// Boundary(p) to Boundary(p + 1), where Boundary maps the work fraction p / P to a row rounded
// to kRowGranule inside its job; the bounds are monotonic, so the parts tile every row once.
void LinearManyOn(const KernelTable& k, ExecContext& ctx, const LinearJob* jobs, int num_jobs) {
  double total = 0;
  int64_t total_rows = 0;
  for (int j = 0; j < num_jobs; ++j) {
    CheckMatrixWeight(*jobs[j].w);
    CheckLayoutFor(k, RowsFor(k, ctx), *jobs[j].w);
    if (jobs[j].T > 0) total += static_cast<double>(jobs[j].w->rows) * jobs[j].w->cols * jobs[j].T;
    total_rows += jobs[j].w->rows;
  }
  // One thread goes through ParallelFor too, as in LinearOn.
  if (ctx.pool == nullptr || total < kMinParallelWork || total_rows <= kRowGranule) {
    for (int j = 0; j < num_jobs; ++j) {
      if (jobs[j].T > 0)
        RowsFor(k, ctx)(jobs[j].x, jobs[j].T, *jobs[j].w, 0, jobs[j].w->rows, jobs[j].y);
    }
    return;
  }
  // The int8 mode's grouped weights: each distinct input quantized once, before the rows (the
  // gate and up projections of an MLP share theirs).
  const RowsFn rows_fn = RowsFor(k, ctx);
  // The caller's (a name for it, as a lambda on another thread would see its own).
  thread_local std::vector<Int8GroupActivations> caller_acts;
  std::vector<Int8GroupActivations>& acts = caller_acts;
  std::vector<int> act_of(num_jobs, -1);
  std::vector<const float*> act_x;
  for (int j = 0; j < num_jobs; ++j) {
    const LinearJob& job = jobs[j];
    if (job.T <= 0 || !GroupedInt8(k, rows_fn, *job.w)) continue;
    for (int i = 0; i < j && act_of[j] < 0; ++i) {
      if (act_of[i] >= 0 && jobs[i].x == job.x && jobs[i].T == job.T &&
          jobs[i].w->cols == job.w->cols)
        act_of[j] = act_of[i];
    }
    if (act_of[j] >= 0) continue;
    act_of[j] = static_cast<int>(act_x.size());
    act_x.push_back(job.x);
    if (acts.size() < act_x.size()) acts.resize(act_x.size());
    acts[act_of[j]].Resize(job.T, job.w->cols);
  }
  if (!act_x.empty())
    QuantizeGrouped(k, ctx, act_x.data(), acts.data(), static_cast<int>(act_x.size()));
  const int threads = ctx.pool->num_threads();
  auto boundary = [&](int64_t p) -> int64_t {  // global row where part p starts
    if (p <= 0) return 0;
    if (p >= threads) return total_rows;
    double target = total * p / threads;
    int64_t row0 = 0;
    for (int j = 0; j < num_jobs; ++j) {
      const int64_t rows = jobs[j].w->rows;
      const double per_row = jobs[j].T > 0 ? static_cast<double>(jobs[j].w->cols) * jobs[j].T : 0;
      const double cost = per_row * rows;
      if (target < cost) {
        int64_t r =
            static_cast<int64_t>(target / per_row + 0.5 * kRowGranule) / kRowGranule * kRowGranule;
        return row0 + std::min(r, rows);
      }
      target -= cost;
      row0 += rows;
    }
    return total_rows;
  };
  ctx.pool->ParallelFor(threads, [&](int64_t p0, int64_t p1, int) {
    const int64_t g0 = boundary(p0), g1 = boundary(p1);
    int64_t row0 = 0;
    for (int j = 0; j < num_jobs && row0 < g1; ++j) {
      const LinearJob& job = jobs[j];
      const int64_t rb = std::max<int64_t>(g0 - row0, 0), re = std::min(g1 - row0, job.w->rows);
      if (rb < re && job.T > 0) {
        if (act_of[j] >= 0) {
          k.linear_rows_int8_grouped(acts[act_of[j]], *job.w, rb, re, job.y);
        } else {
          rows_fn(job.x, job.T, *job.w, rb, re, job.y);
        }
      }
      row0 += job.w->rows;
    }
  });
}

void LinearMany(ExecContext& ctx, const LinearJob* jobs, int num_jobs) {
  LinearManyOn(ActiveKernels(), ctx, jobs, num_jobs);
}

void RmsNorm(const float* x, int64_t T, int64_t dim, const TensorView& weight, float eps,
             float* out) {
  MIMO_CHECK(weight.numel() == dim && (weight.dtype == DType::kF32 ||
                                       weight.dtype == DType::kBF16 || weight.dtype == DType::kF16),
             "RmsNorm: weight %s %s does not match dim %lld (F32|BF16|F16)",
             std::string(DTypeName(weight.dtype)).c_str(), ShapeToString(weight.shape).c_str(),
             static_cast<long long>(dim));
  ActiveKernels().rms_norm(x, T, dim, weight, eps, out);
}

void RopeNeox(float* x, int64_t T, int num_heads, int head_dim, int rotary_dim, float theta,
              const int32_t* positions) {
  MIMO_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim,
             "RopeNeox: rotary_dim %d must be even and in (0, head_dim=%d]", rotary_dim, head_dim);
  const int half = rotary_dim / 2;
  // Angles in double: at position 3e5 a float product pos * inv_freq is already off by ~1e-2 rad.
  std::vector<double> inv_freq(half);  // [half]
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * i / rotary_dim);
  }
  std::vector<float> cos(T * half), sin(T * half);  // [T, half]
  for (int64_t t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions[t]) * inv_freq[i];
      cos[t * half + i] = static_cast<float>(std::cos(angle));
      sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  ActiveKernels().rope_rotate(x, T, num_heads, head_dim, rotary_dim, cos.data(), sin.data());
}

void SiluMul(const float* gate, const float* up, float* out, int64_t n) {
  ActiveKernels().silu_mul(gate, up, out, n);
}

void Embedding(const TensorView& table, const int32_t* ids, int64_t T, float* out) {
  MIMO_CHECK(table.ndim() == 2 && (table.dtype == DType::kF32 || table.dtype == DType::kBF16 ||
                                   table.dtype == DType::kF16),
             "Embedding: table must be [vocab, dim] F32|BF16|F16, got %s %s",
             std::string(DTypeName(table.dtype)).c_str(), ShapeToString(table.shape).c_str());
  const int64_t vocab = table.dim(0), dim = table.dim(1);
  const size_t row_bytes = static_cast<size_t>(dim) * DTypeSize(table.dtype);
  const KernelTable& k = ActiveKernels();
  for (int64_t t = 0; t < T; ++t) {
    MIMO_CHECK(ids[t] >= 0 && ids[t] < vocab, "Embedding: token id %d outside [0, %lld)", ids[t],
               static_cast<long long>(vocab));
    k.convert_row(static_cast<const char*>(table.data) + ids[t] * row_bytes, table.dtype, dim,
                  out + t * dim);
  }
}

const char* KernelIsaName() { return IsaName(ActiveKernels().isa); }

}  // namespace mimo
