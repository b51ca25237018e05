// Linear (y = x W^T) for AVX2+FMA+F16C, weights F32/BF16/F16/F8E4M3.
//
// Design: decode (T == 1) is memory-bound, so each weight row is streamed exactly once and decoded
// in registers (bf16: shift; f16: vcvtph2ps; e4m3: a bit remap to f16 then vcvtph2ps, which also
// gets subnormals right), 4 rows at a time for independent accumulator chains. FP8 block scales
// multiply the per-block partial sums, not every element. T > 1 decodes 4 rows once per token
// chunk into an fp32 scratch and runs a 4-row x 3-token register tile over it, so the decode
// cost is paid once per row, not once per token; that tile reduces every (row, token) in exactly
// the order of the T == 1 path, so outputs are batch-invariant (docs/ARCHITECTURE.md).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <array>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mimo::avx2 {
namespace {

constexpr int kRows = 4;             // output rows per register tile
constexpr int kTokens = 3;           // tokens per register tile (T > 1): 12 accumulators
constexpr int64_t kTokenChunk = 96;  // tokens per x chunk (768 KiB at 2048 cols: stays in L2)

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Weight decoders. Load(p) returns 8 weights in "raw" units.
// kScaleFactor converts raw units to real ones (the e4m3 -> f16 remap leaves a factor 2^8).
struct F32W {
  using T = float;
  static constexpr bool kBlockScaled = false;
  static constexpr float kScaleFactor = 1.0f;
  static __m256 Load(const T* p) { return _mm256_loadu_ps(p); }
};

struct BF16W {
  using T = uint16_t;
  static constexpr bool kBlockScaled = false;
  static constexpr float kScaleFactor = 1.0f;
  static __m256 Load(const T* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

struct F16W {
  using T = uint16_t;
  static constexpr bool kBlockScaled = false;
  static constexpr float kScaleFactor = 1.0f;
  static __m256 Load(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

// e4m3 -> f16 bit remap: the f16 with the same sign, exponent field e (bias 15 instead of 7) and
// mantissa has exactly 2^-8 times the e4m3 value, subnormals included (vcvtph2ps handles f16
// subnormals exactly, no denormal-input penalty). The NaN codes (S.1111.111) become an f16 NaN.
struct F8W {
  using T = uint8_t;
  static constexpr bool kBlockScaled = true;
  static constexpr float kScaleFactor = 256.0f;
  static __m256 Load(const T* p) {
    // Sign-extended b shifted left by 7 holds b in bits 14..7 and its sign in bit 15 as well;
    // clearing bit 14 leaves the f16 bit pattern.
    const __m128i sx = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    __m128i h = _mm_and_si128(_mm_slli_epi16(sx, 7), _mm_set1_epi16(static_cast<short>(0xbfff)));
    // NaN codes (b & 0x7f == 0x7f) are exactly those with sx | 0xff80 == 0xffff.
    const __m128i nan = _mm_cmpeq_epi16(
        _mm_or_si128(sx, _mm_set1_epi16(static_cast<short>(0xff80))), _mm_set1_epi16(-1));
    h = _mm_blendv_epi8(h, _mm_set1_epi16(0x7e00), nan);
    return _mm256_cvtph_ps(h);
  }
};

// Lanes [0, n) set, n in [1, 8), for _mm256_maskload_ps / _mm256_maskstore_ps.
inline __m256i TailMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The n < 8 weights at p decoded as a vector whose lanes >= n hold +0 (a zero-padded copy, so
// nothing past the row is read): a block's tail is one more masked FMA step, like AVX-512's.
template <class W>
inline __m256 LoadTail(const typename W::T* p, int64_t n) {
  typename W::T buf[8] = {};
  for (int64_t k = 0; k < n; ++k) buf[k] = p[k];
  return W::Load(buf);
}

// Scale of block j of row r in raw units (1 for unscaled dtypes).
template <class W>
inline float BlockScale(const MatrixWeight& w, int64_t r, int64_t j) {
  if constexpr (W::kBlockScaled) {
    return w.scale_inv[w.ScaleRow(r) * w.scale_cols + j] * W::kScaleFactor;
  } else {
    return 1.0f;
  }
}

// T == 1: y[r0 .. r0+R) for one token, weights decoded in registers.
template <class W, int R>
void GemvTile(const float* x, const MatrixWeight& w, int64_t r0, float* y) {
  const auto* base = static_cast<const typename W::T*>(w.data);
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  const typename W::T* row[R];
  // Software prefetch one tile ahead (into L2): rows are often a single 4 KiB page (FP8, 4096
  // cols), and hardware prefetchers stop at page boundaries.
  const typename W::T* next[R];
  constexpr int64_t kLine = 64 / sizeof(typename W::T);  // elements per cache line
  __m256 total[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    row[i] = base + (r0 + i) * cols;
    next[i] = r0 + R + i < w.rows ? row[i] + R * cols : row[i];
    total[i] = _mm256_setzero_ps();
  }
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    __m256 acc[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
    int64_t c = cb;
    for (; c + kLine <= ce; c += kLine) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(next[i] + c), _MM_HINT_T1);
#pragma GCC unroll 8
      for (int64_t v = 0; v < kLine; v += 8) {
        const __m256 xv = _mm256_loadu_ps(x + c + v);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) acc[i] = _mm256_fmadd_ps(W::Load(row[i] + c + v), xv, acc[i]);
      }
    }
    for (; c + 8 <= ce; c += 8) {
      const __m256 xv = _mm256_loadu_ps(x + c);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i] = _mm256_fmadd_ps(W::Load(row[i] + c), xv, acc[i]);
    }
    if (c < ce) {
      const __m256 xv = _mm256_maskload_ps(x + c, TailMask(ce - c));
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
        acc[i] = _mm256_fmadd_ps(LoadTail<W>(row[i] + c, ce - c), xv, acc[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      if constexpr (W::kBlockScaled) {
        total[i] = _mm256_fmadd_ps(acc[i], _mm256_set1_ps(BlockScale<W>(w, r0 + i, j)), total[i]);
      } else {
        total[i] = _mm256_add_ps(total[i], acc[i]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) y[r0 + i] = HorizontalSum(total[i]);
}

// dst[c] = W[r, c] in raw units: exactly the vectors GemvTile's registers hold before the block
// scale (lanes past a block's tail are left unwritten).   dst [cols]
template <class W>
void DecodeRowRaw(const MatrixWeight& w, int64_t r, float* dst) {
  const auto* row = static_cast<const typename W::T*>(w.data) + r * w.cols;
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    int64_t c = cb;
    for (; c + 8 <= ce; c += 8) _mm256_storeu_ps(dst + c, W::Load(row + c));
    if (c < ce) _mm256_maskstore_ps(dst + c, TailMask(ce - c), LoadTail<W>(row + c, ce - c));
  }
}

// y[t0 + t, r0 + i] for i < R, t < TT over decoded raw rows.   wd [R, cols]; scale [R, nb] (block
// scales in raw units, FP8 only); x [T, cols].
// Batch invariance: every (row, token) is reduced exactly as GemvTile reduces it for one token:
// 8 lane sums over each scale block in column order (the block's tail one masked step), the
// block's scale applied with one FMA into a running total (a plain add when unscaled), one
// HorizontalSum at the end. Only the weight source differs (registers there, a decoded L1
// scratch here), so a token's output does not depend on how many tokens share the step.
template <int R, int TT, bool kScaled>
void MultiTile(const float* x, int64_t t0, const float* wd, const float* scale, int64_t nb,
               int64_t cols, int64_t bc, int64_t rows, int64_t r0, float* y) {
  // Running totals (FP8 block scales): kept in memory, touched once per block. Unscaled
  // weights have one block, whose total is formed in registers at the end, as GemvTile does.
  alignas(64) float total[kScaled ? R : 1][kScaled ? TT : 1][8];
  if constexpr (kScaled) std::memset(total, 0, sizeof(total));
  const float* xt[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) xt[t] = x + (t0 + t) * cols;
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    __m256 acc[R][TT];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) acc[i][t] = _mm256_setzero_ps();
    int64_t c = cb;
    for (; c + 8 <= ce; c += 8) {
      __m256 xv[TT];
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) xv[t] = _mm256_loadu_ps(xt[t] + c);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const __m256 wv = _mm256_loadu_ps(wd + i * cols + c);
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
      }
    }
    if (c < ce) {
      const __m256i m = TailMask(ce - c);
      __m256 xv[TT];
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) xv[t] = _mm256_maskload_ps(xt[t] + c, m);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const __m256 wv = _mm256_maskload_ps(wd + i * cols + c, m);
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
      }
    }
    if constexpr (kScaled) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) {
          _mm256_store_ps(total[i][t], _mm256_fmadd_ps(acc[i][t], _mm256_set1_ps(scale[i * nb + j]), _mm256_load_ps(total[i][t])));
        }
      }
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t)
          y[(t0 + t) * rows + r0 + i] = HorizontalSum(_mm256_add_ps(_mm256_setzero_ps(), acc[i][t]));
    }
  }
  if constexpr (kScaled) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t)
        y[(t0 + t) * rows + r0 + i] = HorizontalSum(_mm256_load_ps(total[i][t]));
  }
}

using MultiFn = void (*)(const float*, int64_t, const float*, const float*, int64_t, int64_t,
                         int64_t, int64_t, int64_t, float*);
template <bool kScaled, int R, size_t... I>
constexpr std::array<MultiFn, sizeof...(I)> MultiRow(std::index_sequence<I...>) {
  return {&MultiTile<R, static_cast<int>(I) + 1, kScaled>...};
}
// [R - 1][TT - 1]
template <bool kScaled>
constexpr std::array<std::array<MultiFn, kTokens>, kRows> kMulti = {
    MultiRow<kScaled, 1>(std::make_index_sequence<kTokens>()),
    MultiRow<kScaled, 2>(std::make_index_sequence<kTokens>()),
    MultiRow<kScaled, 3>(std::make_index_sequence<kTokens>()),
    MultiRow<kScaled, 4>(std::make_index_sequence<kTokens>())};

template <class W>
void LinearRowsTyped(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                     float* y) {
  if (T == 1) {
    int64_t r = r0;
    for (; r + kRows <= r1; r += kRows) GemvTile<W, kRows>(x, w, r, y);
    switch (r1 - r) {
      case 3:
        GemvTile<W, 3>(x, w, r, y);
        break;
      case 2:
        GemvTile<W, 2>(x, w, r, y);
        break;
      case 1:
        GemvTile<W, 1>(x, w, r, y);
        break;
      default:
        break;
    }
    return;
  }
  // T > 1: each weight row is decoded once per token chunk into an L1 scratch and reused by a
  // kRows x kTokens register tile; chunks of kTokenChunk tokens keep x in L2.
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  const int64_t nb = (cols + bc - 1) / bc;
  thread_local std::vector<float> scratch, scale;  // [kRows, cols] raw rows; [kRows, nb]
  scratch.resize(kRows * cols);
  scale.resize(kRows * nb);
  for (int64_t tc = 0; tc < T; tc += kTokenChunk) {
    const int64_t nt = std::min(kTokenChunk, T - tc);
    for (int64_t r = r0; r < r1; r += kRows) {
      const int n = static_cast<int>(std::min<int64_t>(kRows, r1 - r));
      for (int i = 0; i < n; ++i) {
        DecodeRowRaw<W>(w, r + i, scratch.data() + i * cols);
        for (int64_t j = 0; j < nb; ++j) scale[i * nb + j] = BlockScale<W>(w, r + i, j);
      }
      for (int64_t t = 0; t < nt; t += kTokens) {
        const int tt = static_cast<int>(std::min<int64_t>(kTokens, nt - t));
        kMulti<W::kBlockScaled>[n - 1][tt - 1](x + tc * cols, t, scratch.data(), scale.data(), nb,
                                               cols, bc, w.rows, r, y + tc * w.rows);
      }
    }
  }
}

}  // namespace

void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y) {
  switch (w.dtype) {
    case DType::kF32:
      return LinearRowsTyped<F32W>(x, T, w, row_begin, row_end, y);
    case DType::kBF16:
      return LinearRowsTyped<BF16W>(x, T, w, row_begin, row_end, y);
    case DType::kF16:
      return LinearRowsTyped<F16W>(x, T, w, row_begin, row_end, y);
    case DType::kF8E4M3:
      return LinearRowsTyped<F8W>(x, T, w, row_begin, row_end, y);
    default:
      MIMO_ABORT("avx2::LinearRows: unsupported dtype %d", static_cast<int>(w.dtype));
  }
}

}  // namespace mimo::avx2
