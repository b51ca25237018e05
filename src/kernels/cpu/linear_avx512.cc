// Linear (y = x W^T) for AVX-512 (F/BW/VL/DQ) + F16C, weights F32/BF16/F16/F8E4M3/MXFP4.
//
// The width-templated body of linear_tiles.h at 16 lanes (GEMV tiles for T == 1, FP8 NaN codes
// tested once per cache line; MXFP4 T > 1 on a 4-row x 6-token register tile over decoded rows,
// 24 accumulators of the 32 zmm registers), this width's MXFP4 decoder, and what only AVX-512
// has: small-batch and prefill register tiles for T > 1, and the opt-in bf16 GEMM (every T under
// --precision bf16). Every exact tile reduces each (row, token) in exactly the order of the
// T == 1 path, and every bf16 tile in the order of the bf16 T == 1 path, so outputs are
// batch-invariant within a mode (docs/ARCHITECTURE.md).
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_*; GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/linear_tiles.h"
#include "kernels/cpu/vec_avx512.h"

namespace mimo::avx512 {
namespace {

using cpu::LoadClean;
using cpu::PrefetchRowsAhead;
using cpu::ScaleRows;

// ---- MXFP4 at 16 lanes -----------------------------------------------------------------------
// Codes are decoded to their exact fp32 values by a 16-entry vpermps lookup; a row of 4096
// columns is 2 KiB of codes plus 128 exponent bytes.
const std::array<float, 256> kE8M0 = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[e] = E8M0ToF32(static_cast<uint8_t>(e));
  return t;
}();

struct Mxfp4Avx512 {
  static constexpr int kVecs = 2;  // a 32-column block as two vectors of 16 lanes
  // Lanes in "nibble order": vector k, lane L = 4q + d holds column 8d + q + 4k, i.e. nibble
  // q + 4k of the block's dword d. The 16 code bytes are broadcast to the 4 dword quarters of a
  // zmm (a load-port op), a per-lane shift (vpsrlvd) brings each lane's nibble to bits 0-3, and
  // vpermps (which reads only those bits of an index) looks the value up: 2 shuffles per 32
  // codes, where widening the codes to column order took 6 (the GEMV was bound by them:
  // docs/PERFORMANCE.md). x is permuted to the same order once per call (PermuteBlock), and the
  // T > 1 tile runs on rows decoded in this order, so every path still reduces a (row, token)
  // identically (batch invariance).
  static constexpr bool kPermuted = true;
  const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                      -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
  const __m512i shift0 = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
  const __m512i shift1 =
      _mm512_setr_epi32(16, 16, 16, 16, 20, 20, 20, 20, 24, 24, 24, 24, 28, 28, 28, 28);

  static constexpr int kMxColumns = 32;
  // Column of the block held by lane L of vector k.
  static constexpr int Column(int k, int lane) { return 8 * (lane % 4) + lane / 4 + 4 * k; }
  static __m512i Index(int k) {
    alignas(64) int32_t i[16];
    for (int lane = 0; lane < 16; ++lane) i[lane] = Column(k, lane);
    return _mm512_load_si512(i);
  }

  void DecodeBytes(__m128i bytes, __m512 out[2]) const {
    const __m512i b = _mm512_broadcast_i32x4(bytes);
    out[0] = _mm512_permutexvar_ps(_mm512_srlv_epi32(b, shift0), table);
    out[1] = _mm512_permutexvar_ps(_mm512_srlv_epi32(b, shift1), table);
  }
  void Decode(const uint8_t* p, __m512 out[2]) const {
    DecodeBytes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), out);
  }
  // A block of n < 32 columns: only its ceil(n / 2) bytes are read, and lanes holding columns
  // >= n are +0 (also the spare high nibble of an odd n).
  void DecodeTail(const uint8_t* p, int64_t n, __m512 out[2]) const {
    DecodeBytes(_mm_maskz_loadu_epi8(VecAvx512::TailMask((n + 1) / 2), p), out);
    for (int k = 0; k < 2; ++k) {
      __mmask16 m = 0;
      for (int lane = 0; lane < 16; ++lane) m |= Column(k, lane) < n ? __mmask16(1u << lane) : 0;
      out[k] = _mm512_maskz_mov_ps(m, out[k]);
    }
  }
  // xp[16 k + L] = x[Column(k, L)] for the n <= 32 columns of one block; columns >= n are +0.
  static void PermuteBlock(const float* x, int64_t n, float* xp) {
    if (n == kMxColumns) {
      static const __m512i idx0 = Index(0), idx1 = Index(1);
      const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
      _mm512_storeu_ps(xp, _mm512_permutex2var_ps(lo, idx0, hi));
      _mm512_storeu_ps(xp + 16, _mm512_permutex2var_ps(lo, idx1, hi));
      return;
    }
    alignas(64) float b[32] = {};
    std::memcpy(b, x, static_cast<size_t>(n) * sizeof(float));
    for (int k = 0; k < 2; ++k)
      for (int lane = 0; lane < 16; ++lane) xp[16 * k + lane] = b[Column(k, lane)];
  }
  static float Scale(uint8_t e) { return kE8M0[e]; }
};

struct LinearAvx512 : VecAvx512 {
  static constexpr int kMultiTokens = 6;  // 24 accumulators of the 32 zmm registers
  // The GEMV prefetch requests lines at least this far ahead (~0.2 us at 40 GB/s, a few DRAM
  // latencies).
  static constexpr int64_t kPrefetchBytes = 8 << 10;
  static constexpr const char* kName = "avx512";
  using Mx = Mxfp4Avx512;
  // T > 1: small-batch tiles up to kSmallBatchMax tokens, prefill tiles above (below).
  template <class W>
  static void BatchRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                        float* y);
};

using BF16W = cpu::BF16W<LinearAvx512>;
using F8W = cpu::F8W<LinearAvx512>;

// Small batches (T = 2..kSmallBatchMax: several decoding requests, a speculative verify step)
// are decode-shaped: they should cost about one read of the weights. GemvTile's structure with
// TT tokens: R weight rows are decoded in registers once per 16 columns and multiplied into TT
// token vectors (R x TT accumulators), so the decode and the weight load are shared by every
// token of the group. Steps of more than kSmallTokens tokens run in balanced token groups, a
// group of R rows decoded again per group from L1 (R rows of at most a few KiB); the weights are
// read from DRAM once, the next tile prefetched as in GemvTile. Every (row, token) is reduced
// exactly as GemvTile and MultiTile reduce it (16 lane sums per block in column order, the block
// scale by one FMA into a running total, one reduce at the end): batch invariant.
// History (docs/PERFORMANCE.md): the fp32-scratch tile made a T = 2 step cost 2.7x a T = 1 step;
// a 2-row x 4-token register tile re-decoded each row for every 4 tokens and loaded x once per
// 2 FMAs (FP8 at T = 8 streamed 7.8 GB/s against 29.5 at T = 1).
constexpr int64_t kSmallBatchMax = 16;
constexpr int kSmallTokens = 8;  // tokens per register tile at most (3 x 8 accumulators)

// Rows per tile for a group of tt tokens: R x TT accumulators + R weight vectors + one x vector
// stay within the 32 zmm registers.
constexpr int SmallRowsFor(int64_t tt) { return tt <= 4 ? 4 : 3; }

// The x vectors of tokens [t0, t0 + tt) in the order a small-batch tile consumes them: per scale
// block (bc columns; the whole row when unscaled), 16-column steps from the block's start, each
// step's tt vectors adjacent, the block's last step zero-padded (as the masked load of GemvTile
// reads it). One pointer then walks every token's x at fixed offsets.   xp [steps, tt, 16]
int64_t PackedSteps(int64_t cols, int64_t bc) {
  int64_t steps = 0;
  for (int64_t cb = 0; cb < cols; cb += bc) steps += (std::min(bc, cols - cb) + 15) / 16;
  return steps;
}
void PackTokens(const float* x, int64_t cols, int64_t bc, int64_t t0, int64_t tt, float* xp) {
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += 16) {
      const __mmask16 m = ce - c >= 16 ? 0xffff : VecAvx512::TailMask(ce - c);
      for (int64_t t = 0; t < tt; ++t, xp += 16) {
        _mm512_store_ps(xp, _mm512_maskz_loadu_ps(m, x + (t0 + t) * cols + c));
      }
    }
  }
}

struct alignas(64) Vec16 {  // one packed x vector; std::vector<Vec16> is 64-byte aligned
  float v[16];
};

// Rows r0 .. r0 + R of w start at rows0 (stride w.cols). FP8 plain tiles (GemvTile's): xsp
// holds the same packing of x * 2^112, and a block the map calls plain for these rows is
// decoded by LoadE4m3Plain against it: the same products, so the same bits.
template <class W, int R, int TT>
void SmallBatchTile(const float* xp, int64_t t0, const MatrixWeight& w, const typename W::T* rows0,
                    int64_t r0, bool prefetch, float* y, [[maybe_unused]] const float* xsp,
                    [[maybe_unused]] const Fp8PlainBlocks* plain) {
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  constexpr int64_t kLine = 64 / sizeof(typename W::T);
  // FP8 running totals (touched once per scale block) live in registers while they fit beside
  // the accumulators, in L1 otherwise; unscaled weights have one block and need none.
  constexpr bool kTotalsInRegs = !W::kBlockScaled || R * TT <= 8;
  const typename W::T* row[R];
  const typename W::T* next[R];
  __m512 total[kTotalsInRegs ? R : 1][kTotalsInRegs ? TT : 1];
  alignas(64) float total_mem[kTotalsInRegs ? 1 : R][kTotalsInRegs ? 1 : TT][16];
  [[maybe_unused]] const float* scales[R];  // [R][scale_cols] (FP8)
  ScaleRows<W, R>(w, r0, scales);
  const int64_t ahead =
      PrefetchRowsAhead<LinearAvx512>(R, cols * static_cast<int64_t>(sizeof(typename W::T)));
  if constexpr (!kTotalsInRegs) std::memset(total_mem, 0, sizeof(total_mem));
  constexpr bool kPlainTiles = std::is_same_v<W, F8W>;
  [[maybe_unused]] const int64_t to_xs = xsp != nullptr ? xsp - xp : 0;  // floats from xp to xsp
  if (xsp == nullptr) plain = nullptr;
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    row[i] = rows0 + i * cols;
    next[i] = r0 + ahead + i < w.rows ? row[i] + ahead * cols : row[i];
    if constexpr (kTotalsInRegs) {
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) total[i][t] = _mm512_setzero_ps();
    }
  }
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    __m512 acc[R][TT];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) acc[i][t] = _mm512_setzero_ps();
    // One step of n <= 16 columns; clean: no NaN code in these weights (FP8), so the cheaper
    // decode.
    auto step = [&](int64_t c, int64_t n, bool clean) {
      __m512 wv[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        wv[i] = n != 16 ? W::LoadN(row[i] + c, n)
                : clean ? LoadClean<W>(row[i] + c)
                        : W::Load(row[i] + c);
      }
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) {
        __m512 xv = _mm512_load_ps(xp + t * 16);
        // One load per token vector, kept in a register: left alone, GCC folds the load into
        // each of the R FMAs, and R x TT loads per step made the tile load-port bound.
        asm("" : "+v"(xv));
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
      }
      xp += TT * 16;
    };
    int64_t c = cb;
    if constexpr (kPlainTiles) {
      if (plain != nullptr && plain->PlainRows(r0, R, j)) {  // whole lines, no special code
        for (; c < ce; c += kLine) {
          if (prefetch) {
#pragma GCC unroll 16
            for (int i = 0; i < R; ++i)
              _mm_prefetch(reinterpret_cast<const char*>(next[i] + c), _MM_HINT_T1);
          }
#pragma GCC unroll 4
          for (int64_t v = 0; v < kLine; v += 16) {
            __m512 wv[R];
#pragma GCC unroll 16
            for (int i = 0; i < R; ++i) wv[i] = LinearAvx512::LoadE4m3Plain(row[i] + c + v);
#pragma GCC unroll 16
            for (int t = 0; t < TT; ++t) {
              __m512 xv = _mm512_load_ps(xp + to_xs + t * 16);
              asm("" : "+v"(xv));
#pragma GCC unroll 16
              for (int i = 0; i < R; ++i) acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
            }
            xp += TT * 16;
          }
        }
      }
    }
    for (; c + kLine <= ce; c += kLine) {
      if (prefetch) {
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(next[i] + c), _MM_HINT_T1);
      }
      bool clean = true;
      if constexpr (W::kNanLineTest) {
        __mmask64 nan_codes = 0;
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) nan_codes |= W::LineNanMask(row[i] + c);
        clean = nan_codes == 0;
      }
      if (clean) {
#pragma GCC unroll 4
        for (int64_t v = 0; v < kLine; v += 16) step(c + v, 16, true);
      } else {
        for (int64_t v = 0; v < kLine; v += 16) step(c + v, 16, false);
      }
    }
    for (; c + 16 <= ce; c += 16) step(c, 16, false);
    if (c < ce) step(c, ce - c, false);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) {
        if constexpr (!W::kBlockScaled) {
          total[i][t] = _mm512_add_ps(total[i][t], acc[i][t]);
        } else if constexpr (kTotalsInRegs) {
          total[i][t] =
              _mm512_fmadd_ps(acc[i][t], _mm512_set1_ps(scales[i][j] * W::kScaleFactor), total[i][t]);
        } else {
          _mm512_store_ps(total_mem[i][t],
                          _mm512_fmadd_ps(acc[i][t], _mm512_set1_ps(scales[i][j] * W::kScaleFactor),
                                          _mm512_load_ps(total_mem[i][t])));
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      __m512 sum;
      if constexpr (kTotalsInRegs) {
        sum = total[i][t];
      } else {
        sum = _mm512_load_ps(total_mem[i][t]);
      }
      y[(t0 + t) * w.rows + r0 + i] = _mm512_reduce_add_ps(sum);
    }
  }
}

template <class W>
using SmallFn = void (*)(const float*, int64_t, const MatrixWeight&, const typename W::T*, int64_t,
                         bool, float*, const float*, const Fp8PlainBlocks*);
template <class W, int R, size_t... I>
constexpr std::array<SmallFn<W>, sizeof...(I)> SmallRow(std::index_sequence<I...>) {
  return {&SmallBatchTile<W, R, static_cast<int>(I) + 1>...};
}
// [TT - 1] for R rows
template <class W, int R>
constexpr std::array<SmallFn<W>, kSmallTokens> kSmall =
    SmallRow<W, R>(std::make_index_sequence<kSmallTokens>());

// Token groups of a small batch: balanced (sizes differ by at most one), at most max_tokens.
struct TokenGroups {
  static constexpr int64_t kMaxGroups = 32;  // covers kSmallBatchMax and a prefill token chunk
  int64_t n = 0, t0[kMaxGroups] = {}, tt[kMaxGroups] = {};

  explicit TokenGroups(int64_t T, int64_t max_tokens = kSmallTokens) {
    n = (T + max_tokens - 1) / max_tokens;
    MIMO_CHECK(n <= kMaxGroups, "TokenGroups: %lld tokens in groups of %lld",
               static_cast<long long>(T), static_cast<long long>(max_tokens));
    for (int64_t g = 0, t = 0; g < n; ++g) {
      t0[g] = t;
      tt[g] = (T - t) / (n - g);
      t += tt[g];
    }
  }
};

// Packs every token group of x [.., cols] (PackTokens) into one thread-local buffer (the
// second one for FP8 plain tiles' x * 2^112): group g starts at the result + g * *group_floats.
float* PackGroups(const float* x, int64_t cols, int64_t bc, const TokenGroups& groups,
                  int64_t* group_floats, int buffer = 0) {
  const int64_t max_tt = *std::max_element(groups.tt, groups.tt + groups.n);
  *group_floats = PackedSteps(cols, bc) * max_tt * 16;  // packed tightly: the chunk stays in L2
  thread_local std::vector<Vec16> buffers[2];           // [groups, steps, tt] vectors
  std::vector<Vec16>& packed = buffers[buffer];
  packed.resize(groups.n * *group_floats / 16);
  float* xp = packed.data()->v;
  for (int64_t g = 0; g < groups.n; ++g) {
    PackTokens(x, cols, bc, groups.t0[g], groups.tt[g], xp + g * *group_floats);
  }
  return xp;
}

// Rows [r, r + R) for every token group; group g's packed x at xp + g * group_floats (and its
// x * 2^112 at xsp + g * group_floats when FP8 plain tiles run).
template <class W, int R>
void SmallBatchRowTile(const float* xp, const float* xsp, int64_t group_floats,
                       const TokenGroups& groups, const MatrixWeight& w,
                       const Fp8PlainBlocks* plain, int64_t r, float* y) {
  for (int64_t g = 0; g < groups.n; ++g) {
    kSmall<W, R>[groups.tt[g] - 1](xp + g * group_floats, groups.t0[g], w,
                                   static_cast<const typename W::T*>(w.data) + r * w.cols, r,
                                   g == 0, y, xsp ? xsp + g * group_floats : nullptr, plain);
  }
}

template <class W>
void SmallBatchRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                    float* y) {
  const TokenGroups groups(T);
  const int64_t bc = W::kBlockScaled ? w.block_cols : w.cols;
  int64_t group_floats = 0;
  const float* xp = PackGroups(x, w.cols, bc, groups, &group_floats);
  const bool four = SmallRowsFor(groups.tt[groups.n - 1]) == 4;
  // FP8 plain tiles: x * 2^112 packed alike, unless some |x| >= 2^15.
  const Fp8PlainBlocks* plain = nullptr;
  const float* xsp = nullptr;
  if constexpr (std::is_same_v<W, F8W>) {
    plain = cpu::PlainBlocksOf<LinearAvx512>(w);
    if (plain != nullptr) {
      thread_local std::vector<float> xs;
      xs.resize(T * w.cols);
      if (LinearAvx512::ScaleForE4m3Plain(x, T * w.cols, xs.data())) {
        int64_t same = 0;
        xsp = PackGroups(xs.data(), w.cols, bc, groups, &same, 1);
      } else {
        plain = nullptr;
      }
    }
  }
  int64_t r = r0;
  if (four) {
    for (; r + 4 <= r1; r += 4)
      SmallBatchRowTile<W, 4>(xp, xsp, group_floats, groups, w, plain, r, y);
  } else {
    for (; r + 3 <= r1; r += 3)
      SmallBatchRowTile<W, 3>(xp, xsp, group_floats, groups, w, plain, r, y);
  }
  for (; r < r1; ++r) SmallBatchRowTile<W, 1>(xp, xsp, group_floats, groups, w, plain, r, y);
}

// ---- Prefill (T > kSmallBatchMax): lane-major tiles ------------------------------------------
// Every (row, token) must reduce exactly as GemvTile reduces it for one token: 16 lane sums, lane
// l over the columns l, l + 16, ... of each scale block in column order (the block's last step
// zero-padded), each block's sum scaled by one FMA into the lane's running total (unscaled: one
// block, total = +0 + sum), then _mm512_reduce_add_ps over the lanes. The 16 lane sums are 16
// independent small GEMMs, so the prefill tile runs one lane at a time as an outer product:
// lane l, R rows x 32 tokens, each FMA multiplies one broadcast weight by 16 tokens' x (2 R
// accumulators, no horizontal sum per output); the lanes are summed at the end by vector adds
// in reduce_add's tree order (LaneReduce), 16 tokens at a time. A lane's x slice of a 32-token
// group (2 x cols floats: 16 KiB at 2048 columns) stays in L1 for a whole block of rows, whose
// decoded weights stream from an L2 scratch. The inner-product tiles this replaced (a zmm = 16
// columns of one row or one token: 3 rows x 8 tokens, FP8 4 x 3) read every token's x from L2
// once per 3-4 rows and paid one horizontal sum per output (docs/PERFORMANCE.md, issue 31).
// Layouts (Sp = the blocks' steps, rounded up to 16):
//   xt      [token groups][16 lanes][Sp steps][32 tokens]   x of one token chunk, 0-padded
//   scratch [16 lanes][block rows][Sp steps]               decoded raw weights, 0-padded
// (lane-major so that a tile's rows are adjacent: rows 16 Sp floats apart would all fall in one
// L1 set whenever Sp is a multiple of 64)
//   sums    [block rows][16 lanes][32 tokens]              one group's per-lane totals
constexpr int kLaneTokens = 32;                   // tokens per group: two zmm
constexpr int kLaneRowsUnscaled = 12;             // 24 accumulators
constexpr int kLaneRowsScaled = 6;                // 12 accumulators + 12 per-block totals
constexpr int64_t kLaneScratchBytes = 384 << 10;  // decoded rows of one row block (in L2)
constexpr int64_t kLaneXBytes = 2 << 20;          // packed x of one token chunk (in L2)

// out[l][k] = in[k][l] for a 16 x 16 block of floats.
inline void Transpose16(const __m512 (&in)[16], __m512 (&out)[16]) {
  __m512 t[16], r[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(in[2 * i], in[2 * i + 1]);
  }
  // r[4i + m], 128-bit lane q: column 4q + m of rows 4i .. 4i + 3.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512d t0 = _mm512_castps_pd(t[4 * i]), t1 = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d t2 = _mm512_castps_pd(t[4 * i + 2]), t3 = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512 a = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
    const __m512 b = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xdd);
    const __m512 c = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
    const __m512 d = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xdd);
    out[m] = _mm512_shuffle_f32x4(a, c, 0x88);
    out[8 + m] = _mm512_shuffle_f32x4(a, c, 0xdd);
    out[4 + m] = _mm512_shuffle_f32x4(b, d, 0x88);
    out[12 + m] = _mm512_shuffle_f32x4(b, d, 0xdd);
  }
}

using LaneSteps = cpu::LaneSteps<16>;

// Tokens [t0, t0 + n) (n <= 32) of x [.., cols] as one xt group [16][Sp][32]: per step and 16
// tokens, a transpose of their 16-column vectors; missing tokens and padding steps are +0.
void PackLaneGroup(const float* x, int64_t cols, int64_t bc, int64_t padded, int64_t t0, int64_t n,
                   float* xt) {
  int64_t steps = 0;
  cpu::ForEachStep<16>(cols, bc, [&](int64_t s, int64_t c, int64_t cn) {
    const __mmask16 m = cn == 16 ? 0xffff : VecAvx512::TailMask(cn);
    for (int h = 0; h * 16 < n; ++h) {
      __m512 in[16], out[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const int64_t t = 16 * h + i;
        in[i] = t < n ? _mm512_maskz_loadu_ps(m, x + (t0 + t) * cols + c) : _mm512_setzero_ps();
      }
      Transpose16(in, out);
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) _mm512_store_ps(xt + (l * padded + s) * 32 + 16 * h, out[l]);
    }
    steps = s + 1;
  });
  for (int l = 0; l < 16; ++l) {
    std::memset(xt + (l * padded + steps) * 32, 0, (padded - steps) * 32 * sizeof(float));
  }
}

// Row r of w decoded to raw units: dst[l * lane_stride + s] = column l of step s (s < Sp).
template <class W>
void DecodeLaneRow(const MatrixWeight& w, int64_t r, int64_t bc, int64_t lane_stride, float* dst) {
  const auto* row = static_cast<const typename W::T*>(w.data) + r * w.cols;
  __m512 in[16], out[16];
  if (bc % 16 == 0 && w.cols % 16 == 0) {  // every step whole: step s is columns 16 s ..
    const int64_t steps = w.cols / 16;
    for (int64_t s0 = 0; s0 < steps; s0 += 16) {
      const int64_t n = std::min<int64_t>(16, steps - s0);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j)
        in[j] = j < n ? W::Load(row + 16 * (s0 + j)) : _mm512_setzero_ps();
      Transpose16(in, out);
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) _mm512_storeu_ps(dst + l * lane_stride + s0, out[l]);
    }
    return;
  }
  int k = 0;
  auto flush = [&](int64_t s0) {  // in[0 .. k) are steps s0 .. s0 + k
    for (int j = k; j < 16; ++j) in[j] = _mm512_setzero_ps();
    Transpose16(in, out);
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) _mm512_storeu_ps(dst + l * lane_stride + s0, out[l]);
    k = 0;
  };
  int64_t s0 = 0;
  cpu::ForEachStep<16>(w.cols, bc, [&](int64_t s, int64_t c, int64_t n) {
    in[k++] = n == 16 ? W::Load(row + c) : W::LoadN(row + c, n);
    if (k == 16) {
      flush(s0);
      s0 = s + 1;
    }
  });
  if (k > 0) flush(s0);
}

// Lane l of R rows x 16 NV tokens: wl = the first row's lane-l steps (row stride wstride),
// xl = the group's xt + l * Sp * 32, scales [R][nb] (FP8: each block's scale x kScaleFactor,
// the factor GemvTile applies); writes the lane's totals to sums + i * 16 * 32 + l * 32.
template <int R, int NV, bool kScaled>
void LaneTile(const float* wl, int64_t wstride, const float* xl, const LaneSteps& ls,
              const float* scales, float* sums) {
  __m512 total[kScaled ? R : 1][kScaled ? NV : 1];
  if constexpr (kScaled) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) total[i][v] = _mm512_setzero_ps();
  }
  int64_t s = 0;
  for (int64_t j = 0; j < ls.nb; ++j) {
    const int64_t se = s + (j + 1 < ls.nb ? ls.full : ls.last);
    __m512 acc[R][NV];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
    for (; s < se; ++s) {
      __m512 xv[NV];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) xv[v] = _mm512_load_ps(xl + s * 32 + 16 * v);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const __m512 wv = _mm512_set1_ps(wl[i * wstride + s]);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(wv, xv[v], acc[i][v]);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        if constexpr (kScaled) {
          total[i][v] =
              _mm512_fmadd_ps(acc[i][v], _mm512_set1_ps(scales[i * ls.nb + j]), total[i][v]);
        } else {
          _mm512_store_ps(sums + i * 16 * 32 + 16 * v,
                          _mm512_add_ps(_mm512_setzero_ps(), acc[i][v]));
        }
      }
    }
  }
  if constexpr (kScaled) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) _mm512_store_ps(sums + i * 16 * 32 + 16 * v, total[i][v]);
  }
}

using LaneFn = void (*)(const float*, int64_t, const float*, const LaneSteps&, const float*,
                        float*);
template <int NV, bool kScaled, size_t... I>
constexpr std::array<LaneFn, sizeof...(I)> LaneRow(std::index_sequence<I...>) {
  return {&LaneTile<static_cast<int>(I) + 1, NV, kScaled>...};
}
// [NV - 1][R - 1]
template <bool kScaled>
constexpr int kLaneRows = kScaled ? kLaneRowsScaled : kLaneRowsUnscaled;
template <bool kScaled>
constexpr std::array<std::array<LaneFn, kLaneRows<kScaled>>, 2> kLaneTiles = {
    LaneRow<1, kScaled>(std::make_index_sequence<kLaneRows<kScaled>>()),
    LaneRow<2, kScaled>(std::make_index_sequence<kLaneRows<kScaled>>())};

// 16 tokens' outputs from their 16 lane totals (lane[l] = lane l's totals of the 16 tokens): the
// vertical form of _mm512_reduce_add_ps, same pairs in the same order (GCC's avx512fintrin.h:
// halves 8 + 8, then 4 + 4, then lanes {0, 2} and {1, 3}, then those two), so the same bits.
inline __m512 LaneReduce(const float* lanes) {
  __m512 h8[8], h4[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    h8[i] = _mm512_add_ps(_mm512_load_ps(lanes + (8 + i) * 32), _mm512_load_ps(lanes + i * 32));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) h4[i] = _mm512_add_ps(h8[4 + i], h8[i]);
  const __m512 a = _mm512_add_ps(h4[0], h4[2]);
  const __m512 b = _mm512_add_ps(h4[1], h4[3]);
  return _mm512_add_ps(a, b);
}

// A token group's outputs from its lane sums [nr][16][32]: rows [rb, rb + nr) x tokens
// [t0, t0 + gt) of y [.., rows], each LaneReduce (kScale: times `scale`, as the bf16 mode's
// scalar path multiplies), 16 rows x 16 tokens at a time transposed into token rows: one store
// per token and 16 rows, not 16 stores a whole output row apart.
template <bool kScale>
void StoreLaneOutputs(const float* sums, int64_t nr, int nv, int64_t gt, int64_t t0, float scale,
                      int64_t rows, int64_t rb, float* y) {
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t i0 = 0; i0 < nr; i0 += 16) {
    const int64_t n_rows = std::min<int64_t>(16, nr - i0);
    const __mmask16 row_mask = n_rows == 16 ? 0xffff : VecAvx512::TailMask(n_rows);
    for (int v = 0; v < nv; ++v) {
      __m512 by_row[16], by_token[16];
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        if (k >= n_rows) {
          by_row[k] = _mm512_setzero_ps();
          continue;
        }
        by_row[k] = LaneReduce(sums + (i0 + k) * 16 * 32 + 16 * v);
        if constexpr (kScale) by_row[k] = _mm512_mul_ps(sv, by_row[k]);
      }
      Transpose16(by_row, by_token);
      const int64_t n = std::min<int64_t>(16, gt - 16 * v);
      for (int64_t t = 0; t < n; ++t) {
        _mm512_mask_storeu_ps(y + (t0 + 16 * v + t) * rows + rb + i0, row_mask, by_token[t]);
      }
    }
  }
}

template <class W>
void PrefillRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                 float* y) {
  constexpr bool kScaled = W::kBlockScaled;
  constexpr int kR = kLaneRows<kScaled>;
  const int64_t cols = w.cols;
  const int64_t bc = kScaled ? w.block_cols : cols;
  const LaneSteps ls(cols, bc);
  const int64_t sp = ls.padded;
  const int64_t group_floats = 16 * sp * kLaneTokens;
  // Tokens per chunk (whole groups) and rows per block (whole tiles) within their byte budgets.
  const int64_t chunk = kLaneTokens * std::clamp<int64_t>(kLaneXBytes / (group_floats * 4), 1, 8);
  const int64_t block_rows = kR * std::clamp<int64_t>(kLaneScratchBytes / (16 * sp * 4 * kR), 1, 4);
  thread_local std::vector<Vec16> xt_buf, scratch_buf, sums_buf;
  xt_buf.resize(chunk / kLaneTokens * group_floats / 16);
  scratch_buf.resize(block_rows * sp);  // [16][block_rows][sp] floats = block_rows * sp vectors
  sums_buf.resize(block_rows * 16 * kLaneTokens / 16);
  thread_local std::vector<float> scales_buf;  // [block_rows][nb] (FP8)
  scales_buf.resize(kScaled ? block_rows * ls.nb : 0);
  float* block_scales = scales_buf.data();
  float* xt = xt_buf.data()->v;
  float* scratch = scratch_buf.data()->v;
  float* sums = sums_buf.data()->v;
  for (int64_t tc = 0; tc < T; tc += chunk) {
    const int64_t nt = std::min(chunk, T - tc);
    const int64_t groups = (nt + kLaneTokens - 1) / kLaneTokens;
    for (int64_t g = 0; g < groups; ++g) {
      PackLaneGroup(x, cols, bc, sp, tc + g * kLaneTokens,
                    std::min<int64_t>(kLaneTokens, nt - g * kLaneTokens), xt + g * group_floats);
    }
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
      const int64_t nr = std::min(block_rows, r1 - rb);
      for (int64_t i = 0; i < nr; ++i) {
        DecodeLaneRow<W>(w, rb + i, bc, block_rows * sp, scratch + i * sp);
        if constexpr (kScaled) {
          const float* sr = w.scale_inv + w.ScaleRow(rb + i) * w.scale_cols;
          for (int64_t j = 0; j < ls.nb; ++j) block_scales[i * ls.nb + j] = sr[j] * W::kScaleFactor;
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t gt = std::min<int64_t>(kLaneTokens, nt - g * kLaneTokens);
        const int nv = gt > 16 ? 2 : 1;
        const float* xg = xt + g * group_floats;
        for (int l = 0; l < 16; ++l) {
          for (int64_t i = 0; i < nr; i += kR) {
            const int rt = static_cast<int>(std::min<int64_t>(kR, nr - i));
            kLaneTiles<kScaled>[nv - 1][rt - 1](scratch + (l * block_rows + i) * sp, sp,
                                                xg + l * sp * 32, ls, block_scales + i * ls.nb,
                                                sums + i * 16 * 32 + l * 32);
          }
        }
        StoreLaneOutputs<false>(sums, nr, nv, gt, tc + g * kLaneTokens, 1.0f, w.rows, rb, y);
      }
    }
  }
}

template <class W>
void LinearAvx512::BatchRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0,
                             int64_t r1, float* y) {
  if (T <= kSmallBatchMax) return SmallBatchRows<W>(x, T, w, r0, r1, y);
  PrefillRows<W>(x, T, w, r0, r1, y);
}

// ---- Opt-in bf16 GEMM (AVX512_BF16; KernelTable::linear_rows_bf16) -------------------------
// Under --precision bf16 every step's BF16 and FP8 matrices run here, whatever T (decode GEMV,
// small batches, prompt chunks). The activations are rounded to bf16 (round to nearest even) as
// they are packed; for FP8 they are first multiplied by the weight's block scale of their column
// block (x * s, so the tiles need no per-block totals: one accumulator runs over the whole row,
// as for BF16). The weights are exact in bf16: BF16 as stored, FP8 as the e4m3 value x 2^-8 (4
// significant bits; the 2^8 is applied to the result). A product of two bf16 values is exact in
// fp32 and vdpbf16ps adds two per lane into an fp32 accumulator: twice the multiplies of an fp32
// FMA per instruction, half the bytes of x. So the activations' rounding (relative <= 2^-8: bf16
// keeps 8 significant bits) is the only one beyond the exact path's, besides summation order.
// Layout: each block (FP8's scale block, else the whole row) is cut into 32-column steps, the
// last zero-padded, for x and the weight rows alike, so lane i of a step pairs columns 2i and
// 2i + 1 of both.
// One reduction order for every T (batch invariance within the mode): output (row, token) is
// one 16-lane accumulator chain, one vdpbf16ps per step in column order starting from +0, then
// _mm512_reduce_add_ps and the factor kScaleFactor. The tiles differ only in how many chains
// they interleave (R rows x TT tokens) and the drivers only in which tile they pick; the bits
// a chain reads are the same for every T: x packed by PackTokensBf16, BF16 rows read in place
// (the last partial step by a zeroing masked load: the padding's +0), FP8 rows decoded by
// DecodeRowsBf16.
// Tiling mirrors the exact path: steps of up to kSmallBatchMax tokens run token groups of up to
// kSmallTokens under SmallRowsFor(tt) rows (T = 1 is the GEMV: 4 rows, the rows ahead
// prefetched as GemvTile does), longer steps the lane-major tiles (PrefillRowsBf16).
// History: with PrefillRows' 4-row x 3-token FP8 tile and per-block totals (scales applied to the
// sums) GCC spilled the accumulators and the tile ran 1.0-1.2 vdpbf16ps per cycle, against 2.2
// for the same tile on BF16 weights.
#define MIMO_TARGET_BF16 __attribute__((target("avx512bf16")))

int64_t Bf16Steps(int64_t cols, int64_t bc) {
  int64_t steps = 0;
  for (int64_t cb = 0; cb < cols; cb += bc) steps += (std::min(bc, cols - cb) + 31) / 32;
  return steps;
}

// Lanes [0, n) of 16 (none for n <= 0).
inline __mmask16 HalfMask(int64_t n) {
  return n >= 16 ? 0xffff : n <= 0 ? 0 : VecAvx512::TailMask(n);
}

// The first n of W's 16 elements at p (n <= 0: none), lanes past them +0.
template <class W>
inline __m512 LoadHalf(const typename W::T* p, int64_t n) {
  return n >= 16 ? W::Load(p) : n <= 0 ? _mm512_setzero_ps() : W::LoadN(p, n);
}

// 32 fp32 values as bf16, lo's 16 first.
MIMO_TARGET_BF16 inline __m512i PackBf16(__m512 lo, __m512 hi) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Tokens [t0, t0 + tt) of x as bf16 in step order, each column block times block_scale[block]
// (null: unscaled).   xp [steps, tt, 32]
MIMO_TARGET_BF16 void PackTokensBf16(const float* x, int64_t cols, int64_t bc, int64_t t0,
                                     int64_t tt, const float* block_scale, uint16_t* xp) {
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    const __m512 sv = _mm512_set1_ps(block_scale ? block_scale[j] : 1.0f);
    for (int64_t c = cb; c < ce; c += 32) {
      const __mmask16 lo = HalfMask(ce - c), hi = HalfMask(ce - c - 16);
      for (int64_t t = 0; t < tt; ++t, xp += 32) {
        const float* src = x + (t0 + t) * cols + c;
        _mm512_storeu_si512(xp, PackBf16(_mm512_mul_ps(_mm512_maskz_loadu_ps(lo, src), sv),
                                         _mm512_mul_ps(_mm512_maskz_loadu_ps(hi, src + 16), sv)));
      }
    }
  }
}

// bf16 bits of m x 2^-17 at index m < 8: the e = 0 codes in these units.
inline __m512i SubnormalUnitsBf16() {
  static const __m512i table = [] {
    alignas(64) uint16_t t[32] = {};
    for (int m = 0; m < 8; ++m) {
      const float f = std::ldexp(static_cast<float>(m), -17);  // exact in bf16
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      t[m] = static_cast<uint16_t>(bits >> 16);
    }
    return _mm512_load_si512(t);
  }();
  return table;
}

// 32 e4m3 codes without a NaN code as the bf16 bit patterns of 2^-8 x their values: the bits
// PackBf16(LoadClean, LoadClean) gives, in three 16-bit integer operations instead of the f16 and
// fp32 conversions of both halves (this decode bounded the bf16 mode on FP8 weights: 22 tok/s at
// batch 1 against the exact path's 28). A normal code s.eeee.mmm is 2^(e-15) x 1.mmm in these
// units, the bf16 s | (e + 112) << 7 | mmm << 4, and as e < 16 the + 112 (0b1110000) is an OR:
// sign-extended to 16 bits and shifted left by 4 the code holds s in bit 15 and eeee.mmm in bits
// 10..4, so (w << 4) & 0x87f0 | 0x3800 is the pattern. Codes with e = 0 (zeros and subnormals,
// m x 2^-17, normal in bf16) are looked up by m when a step has any (rare in trained weights).
// subnormal: SubnormalUnitsBf16().
MIMO_TARGET_BF16 inline __m512i E4M3x32ToBf16Units(const uint8_t* p, __m512i subnormal) {
  const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  // (A & B) | C: imm 0xf0 & 0xcc | 0xaa.
  __m512i r = _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 4), _mm512_set1_epi16(0x87f0),
                                        _mm512_set1_epi16(0x3800), 0xea);
  const __mmask32 sub = _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x78));
  if (__builtin_expect(sub != 0, 0)) {
    // Index: w's low 5 bits, 00mmm where e = 0. Sign: A | (B & C), imm 0xf0 | 0xcc & 0xaa.
    const __m512i sign = _mm512_set1_epi16(static_cast<short>(0x8000));
    const __m512i v =
        _mm512_ternarylogic_epi32(_mm512_permutexvar_epi16(w, subnormal), w, sign, 0xf8);
    r = _mm512_mask_mov_epi16(r, sub, v);
  }
  return r;
}

// Columns [c, min(c + 32, ce)) of row in raw units (exact in bf16), zero-padded to 32 lanes: BF16
// as stored, FP8 as 2^-8 x the e4m3 value. FP8: one NaN-code test per step lets a step without NaN
// codes skip the per-vector patch (same values). subnormal: SubnormalUnitsBf16() (FP8 only).
template <class W>
MIMO_TARGET_BF16 inline __m512i WeightStepBf16(const typename W::T* row, int64_t c, int64_t ce,
                                               [[maybe_unused]] __m512i subnormal) {
  if (c + 32 > ce) {
    return PackBf16(LoadHalf<W>(row + c, ce - c), LoadHalf<W>(row + c + 16, ce - c - 16));
  }
  if constexpr (W::kNanLineTest) {
    static_assert(sizeof(typename W::T) == 1, "the NaN test reads 32 e4m3 codes");
    const __m256i b =
        _mm256_or_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c)),
                        _mm256_set1_epi8(static_cast<char>(0x80)));
    if (_mm256_cmpeq_epi8_mask(b, _mm256_set1_epi8(static_cast<char>(0xff))) == 0) {
      return E4M3x32ToBf16Units(reinterpret_cast<const uint8_t*>(row + c), subnormal);
    }
  }
  return PackBf16(W::Load(row + c), W::Load(row + c + 16));
}

// Rows [r, r + n) of w in raw units (WeightStepBf16's values), in step order, row i at
// dst + i * ld; next (row r + ahead; null: none) is prefetched into L2 on the way. Step-major over
// the rows, so n streams of weights are in flight at once (row after row, one stream, was
// slower).   dst [n, ld >= steps * 32]
template <class W>
MIMO_TARGET_BF16 void DecodeRowsBf16(const MatrixWeight& w, int64_t r, int64_t n,
                                     const typename W::T* next, uint16_t* dst, int64_t ld) {
  using WT = typename W::T;
  const WT* rows = static_cast<const WT*>(w.data) + r * w.cols;
  const int64_t cols = w.cols, bc = W::kBlockScaled ? w.block_cols : cols;
  const __m512i subnormal = SubnormalUnitsBf16();
  int64_t off = 0;  // dst offset of the step
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += 32, off += 32) {
      for (int64_t i = 0; i < n; ++i) {
        if (next != nullptr) {
          _mm_prefetch(reinterpret_cast<const char*>(next + i * cols + c), _MM_HINT_T1);
        }
        _mm512_storeu_si512(dst + i * ld + off,
                            WeightStepBf16<W>(rows + i * cols, c, ce, subnormal));
      }
    }
  }
}

// The decode GEMV (T = 1) on FP8 rows [r0, r0 + R): WeightStepBf16's values made in registers
// and multiplied at once, so the weights stream from memory while the products run (decoding
// into L1 first and then running Bf16Tile<R, 1> left the memory idle during the second pass:
// 20 tok/s on bench-flash-fp8 against the exact path's 25). Each row is the chain Bf16Tile<R, 1>
// runs over DecodeRowsBf16's rows (one vdpbf16ps per step from +0, the same operands, then the
// lane sum times out_scale), so the bits are the same for every T.
//   xp [steps, 32] (PackTokensBf16 of the one token), y [rows of w]
template <class W, int R>
MIMO_TARGET_BF16 void GemvBf16(const MatrixWeight& w, int64_t r0, const uint16_t* xp,
                               const typename W::T* next, float out_scale, float* y) {
  using WT = typename W::T;
  const WT* rows = static_cast<const WT*>(w.data) + r0 * w.cols;
  const int64_t cols = w.cols, bc = W::kBlockScaled ? w.block_cols : cols;
  const __m512i subnormal = SubnormalUnitsBf16();
  __m512 acc[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += 32, xp += 32) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xp));
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        if (next != nullptr) {
          _mm_prefetch(reinterpret_cast<const char*>(next + i * cols + c), _MM_HINT_T1);
        }
        const __m512bh wv =
            reinterpret_cast<__m512bh>(WeightStepBf16<W>(rows + i * cols, c, ce, subnormal));
        acc[i] = _mm512_dpbf16_ps(acc[i], wv, xv);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) y[r0 + i] = out_scale * _mm512_reduce_add_ps(acc[i]);
}

// One step of an R x TT tile: acc[i][t] += the pair products of row step wv[i] and token t's
// step at xp + t * 32.
template <int R, int TT>
MIMO_TARGET_BF16 __attribute__((always_inline)) inline void Bf16Step(const __m512bh (&wv)[R],
                                                                     const uint16_t* xp,
                                                                     __m512 (&acc)[R][TT]) {
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) {
    __m512i xv = _mm512_loadu_si512(xp + t * 32);
    asm("" : "+v"(xv));  // one load per token vector (see SmallBatchTile)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      acc[i][t] = _mm512_dpbf16_ps(acc[i][t], wv[i], reinterpret_cast<__m512bh>(xv));
    }
  }
}

// The chains of R rows x TT tokens: y[t0 + t, r0 + i] = out_scale * (sum of the pair products of
// row i's steps and token t's), x packed by PackTokensBf16 for these TT tokens (xp [steps, TT,
// 32]), row i in step order at wd + i * ld: `full` whole steps, then (tail > 0) one step of its
// first `tail` elements (lanes past them +0). pf > 0: the line pf elements past each row's step
// is prefetched into L2 (rows further down).   y [.., rows]
template <int R, int TT>
MIMO_TARGET_BF16 void Bf16Tile(const uint16_t* xp, int64_t t0, const uint16_t* wd, int64_t ld,
                               int64_t full, int tail, int64_t pf, int64_t rows, int64_t r0,
                               float out_scale, float* y) {
  __m512 acc[R][TT];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) acc[i][t] = _mm512_setzero_ps();
  const uint16_t* row[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) row[i] = wd + i * ld;
  __m512bh wv[R];
  for (int64_t k = 0; k < full; ++k, xp += TT * 32) {
    if (pf > 0) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(row[i] + k * 32 + pf), _MM_HINT_T1);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      wv[i] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(row[i] + k * 32));
    }
    Bf16Step<R, TT>(wv, xp, acc);
  }
  if (tail > 0) {
    const __mmask32 m = static_cast<__mmask32>((1u << tail) - 1u);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      wv[i] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m, row[i] + full * 32));
    }
    Bf16Step<R, TT>(wv, xp, acc);
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      y[(t0 + t) * rows + r0 + i] = out_scale * _mm512_reduce_add_ps(acc[i][t]);
    }
  }
}

using Bf16Fn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, int, int64_t,
                        int64_t, int64_t, float, float*);
template <int R, size_t... I>
constexpr std::array<Bf16Fn, sizeof...(I)> Bf16Row(std::index_sequence<I...>) {
  return {&Bf16Tile<R, static_cast<int>(I) + 1>...};
}
constexpr int kBf16Rows = 4;  // rows of the widest tile
// [TT - 1] for R rows: R = 4 (groups of <= 4 tokens), 3 (groups of 5..8 tokens), 1 (rows left
// over, or straddling two FP8 scale rows).
template <int R>
constexpr std::array<Bf16Fn, kSmallTokens> kBf16Tiles =
    Bf16Row<R>(std::make_index_sequence<kSmallTokens>());
static_assert(SmallRowsFor(kSmallTokens) == 3 && SmallRowsFor(4) == kBf16Rows,
              "the tile widths RowsBf16 picks exist");
const Bf16Fn* Bf16TilesFor(int64_t r) {
  return r == 4 ? kBf16Tiles<4>.data() : r == 3 ? kBf16Tiles<3>.data() : kBf16Tiles<1>.data();
}

// ---- bf16 prompts (T > kSmallBatchMax) on lane-major tiles -----------------------------------
// The bf16 mode's chain for (row, token) is one vdpbf16ps per 32-column step, lane l taking the
// column pair (2l, 2l + 1) of the step, from +0, then _mm512_reduce_add_ps times the factor. As
// for the exact prefill (PrefillRows), the 16 lane chains are independent GEMMs over pairs, so
// the tile runs one lane at a time: a broadcast weight pair times 16 tokens' pairs of the same
// columns per vdpbf16ps (the same lane arithmetic on the same operands), 12 rows x 32 tokens,
// and the lanes are summed in reduce_add's order (LaneReduce). FP8 x is packed with the block
// scales of one scale row, so a row block never straddles two scale rows.
// Layouts (in 32-bit pairs; Sp = Bf16Steps rounded up to 16):
//   xt      [token groups][16 lanes][Sp steps][32 tokens]
//   scratch [16 lanes][block rows][Sp steps]
//   sums    [block rows][16 lanes][32 tokens]
struct alignas(64) Pairs16 {  // 16 bf16 pairs; std::vector<Pairs16> is 64-byte aligned
  uint32_t v[16];
};

// Lane l of R rows x 16 NV tokens over `steps` steps: wl = the first row's lane-l pairs (row
// stride wstride), xl = the group's xt + l * Sp * 32; the lane's sums to sums + i * 16 * 32.
template <int R, int NV>
MIMO_TARGET_BF16 void LaneTileBf16(const uint32_t* wl, int64_t wstride, const uint32_t* xl,
                                   int64_t steps, float* sums) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    __m512bh xv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      xv[v] = reinterpret_cast<__m512bh>(_mm512_load_si512(xl + s * 32 + 16 * v));
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512bh wv =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(wl[i * wstride + s])));
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], wv, xv[v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm512_store_ps(sums + i * 16 * 32 + 16 * v, acc[i][v]);
}

using LaneBf16Fn = void (*)(const uint32_t*, int64_t, const uint32_t*, int64_t, float*);
template <int NV, size_t... I>
constexpr std::array<LaneBf16Fn, sizeof...(I)> LaneRowBf16(std::index_sequence<I...>) {
  return {&LaneTileBf16<static_cast<int>(I) + 1, NV>...};
}
constexpr int kLaneRowsBf16 = 12;  // 24 accumulators
// [NV - 1][R - 1]
constexpr std::array<std::array<LaneBf16Fn, kLaneRowsBf16>, 2> kLaneTilesBf16 = {
    LaneRowBf16<1>(std::make_index_sequence<kLaneRowsBf16>()),
    LaneRowBf16<2>(std::make_index_sequence<kLaneRowsBf16>())};

// Tokens [t0, t0 + n) (n <= 32) of x as one bf16 xt group [16][Sp][32] pairs, each column block
// times block_scale[block] (null: 1), rounded as PackTokensBf16 rounds them; +0 elsewhere.
MIMO_TARGET_BF16 void PackLaneGroupBf16(const float* x, int64_t cols, int64_t bc, int64_t padded,
                                        int64_t t0, int64_t n, const float* block_scale,
                                        uint32_t* xt) {
  int64_t s = 0;
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    const __m512 sv = _mm512_set1_ps(block_scale ? block_scale[j] : 1.0f);
    for (int64_t c = cb; c < ce; c += 32, ++s) {
      const __mmask16 lo = HalfMask(ce - c), hi = HalfMask(ce - c - 16);
      for (int h = 0; h * 16 < n; ++h) {
        __m512 in[16], out[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
          const int64_t t = 16 * h + i;
          const float* src = x + (t0 + t) * cols + c;
          in[i] = t < n ? _mm512_castsi512_ps(
                              PackBf16(_mm512_mul_ps(_mm512_maskz_loadu_ps(lo, src), sv),
                                       _mm512_mul_ps(_mm512_maskz_loadu_ps(hi, src + 16), sv)))
                        : _mm512_setzero_ps();
        }
        Transpose16(in, out);
#pragma GCC unroll 16
        for (int l = 0; l < 16; ++l) {
          _mm512_store_si512(xt + (l * padded + s) * 32 + 16 * h, _mm512_castps_si512(out[l]));
        }
      }
    }
  }
  for (int l = 0; l < 16; ++l) {
    std::memset(xt + (l * padded + s) * 32, 0, (padded - s) * 32 * sizeof(uint32_t));
  }
}

// Row r of w as the bf16 mode's steps (FP8: WeightStepBf16's raw units; BF16: the stored bits,
// the last step's missing columns +0, as Bf16Tile reads them): dst[l * lane_stride + s] = the
// pair of lane l in step s.
template <class W>
MIMO_TARGET_BF16 void DecodeLaneRowBf16(const MatrixWeight& w, int64_t r, int64_t lane_stride,
                                        uint32_t* dst) {
  using WT = typename W::T;
  const WT* row = static_cast<const WT*>(w.data) + r * w.cols;
  const int64_t cols = w.cols, bc = W::kBlockScaled ? w.block_cols : cols;
  [[maybe_unused]] const __m512i subnormal = SubnormalUnitsBf16();
  __m512 in[16], out[16];
  int k = 0;
  int64_t s0 = 0;
  auto flush = [&]() {  // in[0 .. k) are steps s0 .. s0 + k
    for (int j = k; j < 16; ++j) in[j] = _mm512_setzero_ps();
    Transpose16(in, out);
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) {
      _mm512_storeu_si512(dst + l * lane_stride + s0, _mm512_castps_si512(out[l]));
    }
    s0 += k;
    k = 0;
  };
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += 32) {
      __m512i v;
      if constexpr (W::kBlockScaled) {
        v = WeightStepBf16<W>(row, c, ce, subnormal);
      } else if (c + 32 <= ce) {
        v = _mm512_loadu_si512(row + c);
      } else {
        v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << (ce - c)) - 1u), row + c);
      }
      in[k++] = _mm512_castsi512_ps(v);
      if (k == 16) flush();
    }
  }
  if (k > 0) flush();
}

template <class W>
MIMO_TARGET_BF16 void PrefillRowsBf16(const float* x, int64_t T, const MatrixWeight& w, int64_t r0,
                                      int64_t r1, float* y) {
  constexpr bool kScaled = W::kBlockScaled;
  constexpr int kR = kLaneRowsBf16;
  const int64_t cols = w.cols, bc = kScaled ? w.block_cols : cols;
  const int64_t steps = Bf16Steps(cols, bc), sp = (steps + 15) / 16 * 16;
  const int64_t group_units = 16 * sp * kLaneTokens;
  const int64_t chunk = kLaneTokens * std::clamp<int64_t>(kLaneXBytes / (group_units * 4), 1, 8);
  const int64_t block_rows = kR * std::clamp<int64_t>(kLaneScratchBytes / (16 * sp * 4 * kR), 1, 4);
  thread_local std::vector<Pairs16> xt_buf, scratch_buf;
  thread_local std::vector<Vec16> sums_buf;
  xt_buf.resize(chunk / kLaneTokens * group_units / 16);
  scratch_buf.resize(block_rows * sp);  // [16][block_rows][sp] pairs
  sums_buf.resize(block_rows * 16 * kLaneTokens / 16);
  uint32_t* xt = xt_buf.data()->v;
  uint32_t* scratch = scratch_buf.data()->v;
  float* sums = sums_buf.data()->v;
  for (int64_t tc = 0; tc < T; tc += chunk) {
    const int64_t nt = std::min(chunk, T - tc);
    const int64_t groups = (nt + kLaneTokens - 1) / kLaneTokens;
    int64_t packed_scale_row = -1;
    for (int64_t rb = r0, nr = 0; rb < r1; rb += nr) {
      // Rows [rb, rb + nr): at most a block, all on one scale row (FP8).
      const int64_t sr = kScaled ? w.ScaleRow(rb) : 0;
      nr = 1;
      while (nr < block_rows && rb + nr < r1 && (!kScaled || w.ScaleRow(rb + nr) == sr)) ++nr;
      if (sr != packed_scale_row) {
        const float* block_scale = kScaled ? w.scale_inv + sr * w.scale_cols : nullptr;
        for (int64_t g = 0; g < groups; ++g) {
          PackLaneGroupBf16(x, cols, bc, sp, tc + g * kLaneTokens,
                            std::min<int64_t>(kLaneTokens, nt - g * kLaneTokens), block_scale,
                            xt + g * group_units);
        }
        packed_scale_row = sr;
      }
      for (int64_t i = 0; i < nr; ++i)
        DecodeLaneRowBf16<W>(w, rb + i, block_rows * sp, scratch + i * sp);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t gt = std::min<int64_t>(kLaneTokens, nt - g * kLaneTokens);
        const int nv = gt > 16 ? 2 : 1;
        const uint32_t* xg = xt + g * group_units;
        for (int l = 0; l < 16; ++l) {
          for (int64_t i = 0; i < nr; i += kR) {
            const int rt = static_cast<int>(std::min<int64_t>(kR, nr - i));
            kLaneTilesBf16[nv - 1][rt - 1](scratch + (l * block_rows + i) * sp, sp,
                                           xg + l * sp * 32, steps, sums + i * 16 * 32 + l * 32);
          }
        }
        StoreLaneOutputs<true>(sums, nr, nv, gt, tc + g * kLaneTokens, W::kScaleFactor, w.rows, rb,
                               y);
      }
    }
  }
}

// The bf16 GEMM, rows [r0, r1): prompts (T > kSmallBatchMax) on the lane-major tiles; otherwise
// the token groups packed as bf16 (FP8: again whenever the rows reach another scale row, with
// that row's block scales), then per R rows that share a scale row (FP8: decoded once into an
// L1 scratch; BF16: read in place) the tile run over every group; a tile whose rows straddle two
// scale rows, or that would pass r1, runs row by row.
template <class W>
MIMO_TARGET_BF16 void RowsBf16(const float* x, int64_t T, const MatrixWeight& w, int64_t r0,
                               int64_t r1, float* y) {
  if (T > kSmallBatchMax) return PrefillRowsBf16<W>(x, T, w, r0, r1, y);
  constexpr bool kScaled = W::kBlockScaled;
  using WT = typename W::T;
  const int64_t cols = w.cols, bc = kScaled ? w.block_cols : cols;
  const int64_t stride = Bf16Steps(cols, bc) * 32;  // bf16 elements per row in step order
  const int64_t chunk = T;                     // T <= kSmallBatchMax: the whole step is one chunk
  thread_local std::vector<uint16_t> decoded;  // [kBf16Rows, stride] (FP8)
  thread_local std::vector<uint16_t> packed;   // [groups, steps, tt, 32]
  if constexpr (kScaled) decoded.resize(kBf16Rows * stride);
  for (int64_t tc = 0; tc < T; tc += chunk) {
    const TokenGroups groups(std::min(chunk, T - tc), kSmallTokens);
    const int64_t max_tt = *std::max_element(groups.tt, groups.tt + groups.n);
    const int64_t tile_rows = SmallRowsFor(max_tt);
    // Small steps stream the weights once: rows this far ahead are prefetched (GemvTile's).
    const int64_t ahead =
        PrefetchRowsAhead<LinearAvx512>(tile_rows, cols * static_cast<int64_t>(sizeof(WT)));
    const int64_t group_elems = stride * max_tt;
    packed.resize(groups.n * group_elems);
    float* yc = y + tc * w.rows;  // [chunk tokens, rows]
    int64_t packed_scale_row = -1;
    for (int64_t r = r0; r < r1;) {
      const int64_t sr = kScaled ? w.ScaleRow(r) : 0;
      int64_t n = tile_rows;
      for (int64_t i = 0; i < n; ++i) {
        if (r + i >= r1 || (kScaled && w.ScaleRow(r + i) != sr)) n = 1;
      }
      if (sr != packed_scale_row) {
        const float* block_scale = kScaled ? w.scale_inv + sr * w.scale_cols : nullptr;
        for (int64_t g = 0; g < groups.n; ++g) {
          PackTokensBf16(x + tc * cols, cols, bc, groups.t0[g], groups.tt[g], block_scale,
                         packed.data() + g * group_elems);
        }
        packed_scale_row = sr;
      }
      const WT* wrow = static_cast<const WT*>(w.data) + r * cols;
      const bool prefetch = ahead > 0 && r + ahead + n <= w.rows;
      const uint16_t* src;
      int64_t ld, full, pf = 0;
      int tail;
      if constexpr (kScaled) {
        if (T == 1) {  // the decode GEMV: no L1 round trip (GemvBf16)
          const WT* next = prefetch ? wrow + ahead * cols : nullptr;
          if (n == 4) {
            GemvBf16<W, 4>(w, r, packed.data(), next, W::kScaleFactor, yc);
          } else {
            for (int64_t i = 0; i < n; ++i) {
              GemvBf16<W, 1>(w, r + i, packed.data(), next ? next + i * cols : nullptr,
                             W::kScaleFactor, yc);
            }
          }
          r += n;
          continue;
        }
        DecodeRowsBf16<W>(w, r, n, prefetch ? wrow + ahead * cols : nullptr, decoded.data(),
                          stride);
        src = decoded.data();
        ld = stride;
        full = stride / 32;
        tail = 0;
      } else {
        src = wrow;
        ld = cols;
        full = cols / 32;
        tail = static_cast<int>(cols % 32);
        pf = prefetch ? ahead * cols : 0;
      }
      const Bf16Fn* tiles = Bf16TilesFor(n);
      for (int64_t g = 0; g < groups.n; ++g) {
        tiles[groups.tt[g] - 1](packed.data() + g * group_elems, groups.t0[g], src, ld, full, tail,
                                g == 0 ? pf : 0, w.rows, r, W::kScaleFactor, yc);
      }
      r += n;
    }
  }
}
}  // namespace

void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y) {
  cpu::LinearRowsFor<LinearAvx512>(x, T, w, row_begin, row_end, y);
}

MIMO_TARGET_BF16 void LinearRowsBf16(const float* x, int64_t T, const MatrixWeight& w,
                                     int64_t row_begin, int64_t row_end, float* y) {
  switch (w.dtype) {
    case DType::kBF16:
      return RowsBf16<BF16W>(x, T, w, row_begin, row_end, y);
    case DType::kF8E4M3:
      return RowsBf16<F8W>(x, T, w, row_begin, row_end, y);
    default:  // F32/F16/MXFP4 weights: the exact kernels
      return LinearRows(x, T, w, row_begin, row_end, y);
  }
}

MIMO_TARGET_BF16 bool ProbeBf16() {
  volatile float in[2] = {1.5f, 2.0f};
  const __m512bh p = _mm512_cvtne2ps_pbh(_mm512_set1_ps(in[0]), _mm512_set1_ps(in[1]));
  // Lanes 0-7 pair two 2.0s (8), lanes 8-15 two 1.5s (4.5).
  return _mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), p, p)) == 100.0f;
}

}  // namespace mimo::avx512
