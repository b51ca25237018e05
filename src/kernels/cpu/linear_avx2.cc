// Linear (y = x W^T) for AVX2+FMA+F16C, weights F32/BF16/F16/F8E4M3/MXFP4.
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
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/e4m3_avx2.h"

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

// e4m3 through the exact f16 remap (e4m3_avx2.h): 2^-8 * the value, NaN codes -> NaN.
struct F8W {
  using T = uint8_t;
  static constexpr bool kBlockScaled = true;
  static constexpr float kScaleFactor = 256.0f;
  static __m256 Load(const T* p) { return E4M3x8ToUnits(p); }
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

// T > 1: each weight row is decoded once per token chunk into an L1 scratch (decode_row(r, dst):
// raw units, exactly the vectors the GEMV holds before the block scale; scale_of(r, j): block j's
// scale in raw units) and reused by a kRows x kTokens register tile; chunks of kTokenChunk tokens
// keep x in L2.
template <bool kScaled, class DecodeRow, class ScaleOf>
void MultiTokenRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                    int64_t bc, float* y, DecodeRow decode_row, ScaleOf scale_of) {
  const int64_t cols = w.cols;
  const int64_t nb = (cols + bc - 1) / bc;
  thread_local std::vector<float> scratch, scale;  // [kRows, cols] raw rows; [kRows, nb]
  scratch.resize(kRows * cols);
  scale.resize(kRows * nb);
  for (int64_t tc = 0; tc < T; tc += kTokenChunk) {
    const int64_t nt = std::min(kTokenChunk, T - tc);
    for (int64_t r = r0; r < r1; r += kRows) {
      const int n = static_cast<int>(std::min<int64_t>(kRows, r1 - r));
      for (int i = 0; i < n; ++i) {
        decode_row(r + i, scratch.data() + i * cols);
        for (int64_t j = 0; j < nb; ++j) scale[i * nb + j] = scale_of(r + i, j);
      }
      for (int64_t t = 0; t < nt; t += kTokens) {
        const int tt = static_cast<int>(std::min<int64_t>(kTokens, nt - t));
        kMulti<kScaled>[n - 1][tt - 1](x + tc * cols, t, scratch.data(), scale.data(), nb, cols,
                                       bc, w.rows, r, y + tc * w.rows);
      }
    }
  }
}

// T == 1 over rows [r0, r1) with tiles of kRows, then one tile of the 1-3 rows left.
template <template <int> class Tile>
void GemvRows(const float* x, const MatrixWeight& w, int64_t r0, int64_t r1, float* y) {
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) Tile<kRows>::Run(x, w, r, y);
  switch (r1 - r) {
    case 3:
      Tile<3>::Run(x, w, r, y);
      break;
    case 2:
      Tile<2>::Run(x, w, r, y);
      break;
    case 1:
      Tile<1>::Run(x, w, r, y);
      break;
    default:
      break;
  }
}

template <class W>
struct GemvTileOf {
  template <int R>
  struct T {
    static void Run(const float* x, const MatrixWeight& w, int64_t r0, float* y) {
      GemvTile<W, R>(x, w, r0, y);
    }
  };
};

template <class W>
void LinearRowsTyped(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                     float* y) {
  if (T == 1) return GemvRows<GemvTileOf<W>::template T>(x, w, r0, r1, y);
  MultiTokenRows<W::kBlockScaled>(
      x, T, w, r0, r1, W::kBlockScaled ? w.block_cols : w.cols, y,
      [&](int64_t r, float* dst) { DecodeRowRaw<W>(w, r, dst); },
      [&](int64_t r, int64_t j) { return BlockScale<W>(w, r, j); });
}

// ---- MXFP4 (spec section 4) ----------------------------------------------------------------
// Codes become 2x their value as int8 through a 16-entry pshufb table, then fp32 (exact); the
// factor 2 is folded into the block's E8M0 scale, which multiplies the 32-column block's partial
// sum with one FMA, as FP8's block scales do. Everything stays 4-bit in memory.
constexpr int64_t kMxBlock = 32;

// The 32 codes held by 16 bytes as four vectors of 8 columns (raw units: 2 x the E2M1 value).
inline void DecodeMx32(__m128i bytes, __m256 out[4]) {
  const __m128i nibble = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, nibble);                     // codes 0, 2, 4, ...
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);  // codes 1, 3, 5, ...
  const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i v0 = _mm_shuffle_epi8(table, _mm_unpacklo_epi8(lo, hi));  // columns 0-15
  const __m128i v1 = _mm_shuffle_epi8(table, _mm_unpackhi_epi8(lo, hi));  // columns 16-31
  out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v0));
  out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v0, v0)));
  out[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v1));
  out[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v1, v1)));
}

// A block of n < 32 columns: only its ceil(n / 2) bytes are read (into a zeroed copy, the spare
// high nibble of an odd n cleared), so lanes >= n decode to +0.
inline void DecodeMxTail(const uint8_t* p, int64_t n, __m256 out[4]) {
  alignas(16) uint8_t buf[16] = {};
  const int64_t bytes = (n + 1) / 2;
  for (int64_t k = 0; k < bytes; ++k) buf[k] = p[k];
  if (n & 1) buf[bytes - 1] &= 0x0f;
  DecodeMx32(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)), out);
}

// E8M0 exponent -> block scale in raw units (halved: the decoded codes are doubled).
const std::array<float, 256> kE8M0Half = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[e] = E8M0ToF32(static_cast<uint8_t>(e)) * 0.5f;
  return t;
}();

// T == 1: y[r0 .. r0+R) for one token, codes decoded in registers. Per block, exactly the steps of
// MultiTile on a decoded row: 8 columns at a time, a short block's last step masked.
template <int R>
struct MxGemvTile {
  static void Run(const float* x, const MatrixWeight& w, int64_t r0, float* y) {
    const int64_t cols = w.cols, row_bytes = w.RowBytes();
    const uint8_t* row[R];
    const uint8_t* next[R];  // the next tile's rows, prefetched one 64-byte line per 4 blocks
    const uint8_t* exps[R];  // [scale_cols] exponents of each row
    __m256 total[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      row[i] = static_cast<const uint8_t*>(w.data) + (r0 + i) * row_bytes;
      next[i] = r0 + R + i < w.rows ? row[i] + R * row_bytes : row[i];
      exps[i] = w.scale_e8m0 + w.ScaleRow(r0 + i) * w.scale_cols;
      total[i] = _mm256_setzero_ps();
    }
    const int64_t full = cols / kMxBlock;
    for (int64_t j = 0; j < full; ++j) {
      const int64_t c = j * kMxBlock;
      if ((j & 3) == 0) {
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(next[i] + c / 2), _MM_HINT_T1);
      }
      __m256 xv[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) xv[k] = _mm256_loadu_ps(x + c + 8 * k);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        __m256 wv[4];
        DecodeMx32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[i] + c / 2)), wv);
        __m256 acc = _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) acc = _mm256_fmadd_ps(wv[k], xv[k], acc);
        total[i] = _mm256_fmadd_ps(acc, _mm256_set1_ps(kE8M0Half[exps[i][j]]), total[i]);
      }
    }
    if (const int64_t n = cols - full * kMxBlock; n > 0) {
      const int64_t c = full * kMxBlock;
      const int64_t steps = (n + 7) / 8;
      __m256 xv[4];
      for (int64_t k = 0; k < steps; ++k) {
        xv[k] = 8 * k + 8 <= n ? _mm256_loadu_ps(x + c + 8 * k)
                               : _mm256_maskload_ps(x + c + 8 * k, TailMask(n - 8 * k));
      }
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        __m256 wv[4];
        DecodeMxTail(row[i] + c / 2, n, wv);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t k = 0; k < steps; ++k) acc = _mm256_fmadd_ps(wv[k], xv[k], acc);
        total[i] = _mm256_fmadd_ps(acc, _mm256_set1_ps(kE8M0Half[exps[i][full]]), total[i]);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) y[r0 + i] = HorizontalSum(total[i]);
  }
};

// dst[c] = W[r, c] in raw units (2 x the code value; the block exponent not applied).   dst [cols]
void DecodeMxRow(const MatrixWeight& w, int64_t r, float* dst) {
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.RowBytes();
  const int64_t full = w.cols / kMxBlock;
  __m256 v[4];
  for (int64_t j = 0; j < full; ++j) {
    DecodeMx32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j * 16)), v);
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(dst + j * kMxBlock + 8 * k, v[k]);
  }
  if (const int64_t n = w.cols - full * kMxBlock; n > 0) {
    DecodeMxTail(row + full * 16, n, v);
    alignas(32) float buf[kMxBlock];
    for (int k = 0; k < 4; ++k) _mm256_store_ps(buf + 8 * k, v[k]);
    std::copy(buf, buf + n, dst + full * kMxBlock);
  }
}

void LinearRowsMxfp4(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                     float* y) {
  if (T == 1) return GemvRows<MxGemvTile>(x, w, r0, r1, y);
  MultiTokenRows<true>(
      x, T, w, r0, r1, kMxBlock, y, [&](int64_t r, float* dst) { DecodeMxRow(w, r, dst); },
      [&](int64_t r, int64_t j) {
        return kE8M0Half[w.scale_e8m0[w.ScaleRow(r) * w.scale_cols + j]];
      });
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
    case DType::kMxfp4:
      return LinearRowsMxfp4(x, T, w, row_begin, row_end, y);
    default:
      MIMO_ABORT("avx2::LinearRows: unsupported dtype %d", static_cast<int>(w.dtype));
  }
}

}  // namespace mimo::avx2
