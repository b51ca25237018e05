// The Linear (y = x W^T) kernel body, written once for any vector width: linear_avx2.cc
// instantiates it with LinearAvx2 (VecAvx2, 8 lanes), linear_avx512.cc with LinearAvx512
// (VecAvx512, 16 lanes), each unit under its own -m flags; dispatch picks the unit after the
// runtime probe. The two units had carried this code twice, differing only in vector width.
//
// Design: decode (T == 1) is memory-bound, so GemvTile streams each weight row exactly once and
// decodes it in registers (bf16: shift; f16: vcvtph2ps; e4m3: a bit remap to f16 then vcvtph2ps,
// which also gets subnormals right), 4 rows at a time for independent accumulator chains. FP8
// block scales multiply the per-block partial sums, not every element. MultiTokenRows (T > 1)
// decodes 4 rows once per token chunk into an fp32 scratch and runs a 4-row x kMultiTokens
// register tile over it; that tile reduces every (row, token) in exactly the order of the T == 1
// path, so outputs are batch-invariant (docs/ARCHITECTURE.md). MXFP4 has the same two paths
// with its own decoder. The other T > 1 paths, lane-major prompt tiles and small-step tiles that
// decode weights in registers, are width-templated too (linear_prefill.h, linear_small_batch.h:
// BatchRows, which the unit must include).
//
// V is a vector-op type (vec_avx2.h) extended by the unit's Linear tuning:
//   kMultiTokens      tokens per MultiTile register tile (4 x kMultiTokens accumulators)
//   kPrefetchBytes    how far ahead GemvTile's software prefetch reads (0: the next tile)
//   kName             the unit, for messages
//   Mx                the MXFP4 decoder: kVecs vectors per 32-column block, Decode(p, out),
//                     DecodeTail(p, n, out) (lanes >= n +0), Scale(e8m0) (raw units)
//   the tuning of the T > 1 paths listed in linear_prefill.h and linear_small_batch.h
// Every function here is a template over V, directly or through a decoder that is: plain inline
// code would be compiled by both units with different flags and the linker would keep one copy.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/matrix_weight.h"

namespace mimo::cpu {

// What the MXFP4 decoders whose codes come out as 2 x the E2M1 value (a 16-entry int8 table
// lookup: AVX2's pshufb, NEON's TBL) share: the block scale with the factor 2 folded in, and a
// partial block's bytes. A template over V, like every body here, so each unit has its own copy.
template <class V>
struct Mxfp4DoubledCodes {
  // E8M0 exponent -> block scale in raw units (halved: the decoded codes are doubled).
  static float Scale(uint8_t e) { return kE8M0Half[e]; }
  // A block of n < 32 columns: its ceil(n / 2) bytes copied into the zeroed 16 bytes at buf, the
  // spare high nibble of an odd n cleared, so lanes >= n decode to +0.
  static void TailBytes(const uint8_t* p, int64_t n, uint8_t* buf) {
    std::memset(buf, 0, 16);
    const int64_t bytes = (n + 1) / 2;
    for (int64_t k = 0; k < bytes; ++k) buf[k] = p[k];
    if (n & 1) buf[bytes - 1] &= 0x0f;
  }
  static inline const std::array<float, 256> kE8M0Half = [] {
    std::array<float, 256> t{};
    for (int e = 0; e < 256; ++e) t[e] = E8M0ToF32(static_cast<uint8_t>(e)) * 0.5f;
    return t;
  }();
};

constexpr int kRows = 4;             // weight rows per GEMV and MultiTile tile
constexpr int64_t kTokenChunk = 96;  // tokens per x chunk (768 KiB at 2048 cols: stays in L2)

// Weight decoders: Load(p) returns V::kLanes weights in "raw" units, LoadN(p, n) the first
// n < kLanes of them (lanes >= n +0, nothing past p + n read); kScaleFactor converts raw units
// to real ones (the e4m3 -> f16 remap leaves a factor 2^8). Unscaled dtypes are V's loads as is.
template <class V, DType kDtype>
struct UnscaledW {
  static_assert(kDtype == DType::kF32 || kDtype == DType::kBF16 || kDtype == DType::kF16);
  using T = std::conditional_t<kDtype == DType::kF32, float, uint16_t>;
  using F = typename V::F;
  static constexpr bool kBlockScaled = false;
  static constexpr bool kNanLineTest = false;
  static constexpr float kScaleFactor = 1.0f;
  static F Load(const T* p) {
    if constexpr (kDtype == DType::kF32) return V::Load(p);
    if constexpr (kDtype == DType::kBF16) return V::LoadBf16(p);
    if constexpr (kDtype == DType::kF16) return V::LoadF16(p);
  }
  static F LoadN(const T* p, int64_t n) {
    if constexpr (kDtype == DType::kF32) return V::LoadN(p, n);
    if constexpr (kDtype == DType::kBF16) return V::LoadBf16N(p, n);
    if constexpr (kDtype == DType::kF16) return V::LoadF16N(p, n);
  }
};
template <class V>
using F32W = UnscaledW<V, DType::kF32>;
template <class V>
using BF16W = UnscaledW<V, DType::kBF16>;
template <class V>
using F16W = UnscaledW<V, DType::kF16>;

// e4m3 through the exact f16 remap (e4m3_avx2.h): 2^-8 * the value, NaN codes -> NaN.
template <class V>
struct F8W {
  using T = uint8_t;
  static constexpr bool kBlockScaled = true;
  static constexpr bool kNanLineTest = V::kE4m3LineNanTest;
  static constexpr float kScaleFactor = 256.0f;
  static typename V::F Load(const T* p) { return V::LoadE4m3(p); }
  static typename V::F LoadN(const T* p, int64_t n) { return V::LoadE4m3N(p, n); }
  // kNanLineTest only: Load for bytes known to hold no NaN code; the NaN codes of a 64-byte line.
  static typename V::F LoadNoNan(const T* p) { return V::LoadE4m3NoNan(p); }
  static uint64_t LineNanMask(const T* p) { return V::E4m3LineNanMask(p); }
};

// int8 codes (the int8 weight format: 32-column blocks, fp32 scales) converted exactly.
template <class V>
struct I8W {
  using T = int8_t;
  static constexpr bool kBlockScaled = true;
  static constexpr bool kNanLineTest = false;
  static constexpr float kScaleFactor = 1.0f;
  static typename V::F Load(const T* p) { return V::LoadI8(p); }
  static typename V::F LoadN(const T* p, int64_t n) { return V::LoadI8N(p, n); }
};

// W::Load for data already checked to hold no NaN code.
template <class W>
inline auto LoadClean(const typename W::T* p) {
  if constexpr (W::kNanLineTest) {
    return W::LoadNoNan(p);
  } else {
    return W::Load(p);
  }
}

// How many rows ahead of a tile's first row the software prefetch reads: the next tile, or
// several tiles ahead when rows are short (an expert's down_proj row is 512 bytes of FP8), so
// the lines are requested at least V::kPrefetchBytes before they are used.
template <class V>
inline int64_t PrefetchRowsAhead(int64_t tile_rows, int64_t row_bytes) {
  const int64_t tiles = (V::kPrefetchBytes + tile_rows * row_bytes - 1) / (tile_rows * row_bytes);
  return tile_rows * std::max<int64_t>(tiles, 1);
}

// The block-scale rows of rows r0 .. r0 + R, looked up once per tile (ScaleRow divides by
// block_rows): block j of row r0 + i is scaled by scales[i][j] * W::kScaleFactor.
template <class W, int R>
inline void ScaleRows(const MatrixWeight& w, int64_t r0, const float* (&scales)[R]) {
  if constexpr (W::kBlockScaled) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) scales[i] = w.scale_inv + w.ScaleRow(r0 + i) * w.scale_cols;
  }
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

// acc[i] = the kLanes lane sums of one scale block, columns [cb, ce), of row[i] against x
// (GemvTile; plain_block: read with V::LoadE4m3Plain against xs = x * 2^112); next[i] + c is
// prefetched once per line.
template <class V, class W, int R>
__attribute__((always_inline)) inline void GemvBlockSums(
    const float* x, [[maybe_unused]] const float* xs, const typename W::T* const (&row)[R],
    const typename W::T* const (&next)[R], int64_t cb, int64_t ce,
    [[maybe_unused]] bool plain_block, typename V::F (&acc)[R]) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes;
  constexpr int64_t kLine = 64 / sizeof(typename W::T);  // elements per cache line
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) acc[i] = V::Zero();
  int64_t c = cb;
  if constexpr (std::is_same_v<W, F8W<V>> && V::kE4m3Plain) {
    if (plain_block) {  // whole lines, no special code
      for (; c < ce; c += kLine) {
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) V::PrefetchL2(next[i] + c);
#pragma GCC unroll 8
        for (int64_t v = 0; v < kLine; v += kLanes) {
          const F xv = V::Load(xs + c + v);
#pragma GCC unroll 16
          for (int i = 0; i < R; ++i)
            acc[i] = V::Fmadd(V::LoadE4m3Plain(row[i] + c + v), xv, acc[i]);
        }
      }
    }
  }
  for (; c + kLine <= ce; c += kLine) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) V::PrefetchL2(next[i] + c);
    // FP8 (AVX-512): one NaN-code test per cache line and row lets the common case skip the
    // per-vector NaN patch (~8% faster decode); a line holding a NaN code takes the exact path.
    uint64_t nan_codes = 0;
    if constexpr (W::kNanLineTest) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) nan_codes |= W::LineNanMask(row[i] + c);
    }
    if (nan_codes == 0) {
#pragma GCC unroll 8
      for (int64_t v = 0; v < kLine; v += kLanes) {
        const F xv = V::Load(x + c + v);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) acc[i] = V::Fmadd(LoadClean<W>(row[i] + c + v), xv, acc[i]);
      }
    } else {
      for (int64_t v = 0; v < kLine; v += kLanes) {
        const F xv = V::Load(x + c + v);
        for (int i = 0; i < R; ++i) acc[i] = V::Fmadd(W::Load(row[i] + c + v), xv, acc[i]);
      }
    }
  }
  // Blocks shorter than a line (int8's 32 columns): the line is prefetched by the block that
  // starts it.
  if (ce - cb < kLine && cb % kLine < ce - cb) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) V::PrefetchL2(next[i] + cb);
  }
  for (; c + kLanes <= ce; c += kLanes) {
    const F xv = V::Load(x + c);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) acc[i] = V::Fmadd(W::Load(row[i] + c), xv, acc[i]);
  }
  if (c < ce) {  // the block's tail: one more step, lanes past it +0
    const F xv = V::LoadN(x + c, ce - c);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) acc[i] = V::Fmadd(W::LoadN(row[i] + c, ce - c), xv, acc[i]);
  }
}

// T == 1: y[r0 .. r0+R) for one token, weights decoded in registers. Software prefetch
// PrefetchRowsAhead rows ahead (into L2): rows are often a single 4 KiB page (FP8, 4096 cols),
// and hardware prefetchers stop at page boundaries.
// FP8 plain tiles (V::kE4m3Plain): with xs = x * 2^112 and plain (w.fp8_plain), a block whose
// rows MarkFp8PlainBlocks found free of subnormal and NaN codes is read with
// V::LoadE4m3Plain (2^-120 x the e4m3 value) against xs: each product is the same real number
// (2^-8 v) x as the f16 route's, through the same FMAs in the same order, so the same bits, with
// three integer ops per vector instead of the remap, two-uop vcvtph2ps and per-line NaN test
// (docs/PERFORMANCE.md, issue 31). Any other block takes the general loop (GemvBlockSums).
template <class V, class W, int R>
void GemvTile(const float* x, const MatrixWeight& w, int64_t r0, float* y,
              const float* xs = nullptr, const Fp8PlainBlocks* plain = nullptr) {
  using F = typename V::F;
  using T = typename W::T;
  const auto* base = static_cast<const T*>(w.data);
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  const T* row[R];
  const T* next[R];
  F total[R];
  [[maybe_unused]] const float* scales[R];  // [R][scale_cols] (FP8)
  ScaleRows<W, R>(w, r0, scales);
  const int64_t ahead = PrefetchRowsAhead<V>(R, cols * static_cast<int64_t>(sizeof(T)));
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    row[i] = base + (r0 + i) * cols;
    next[i] = r0 + ahead + i < w.rows ? row[i] + ahead * cols : row[i];
    total[i] = V::Zero();
  }
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    F acc[R];
    const bool plain_block = plain != nullptr && plain->PlainRows(r0, R, j);
    GemvBlockSums<V, W, R>(x, xs, row, next, cb, std::min(cb + bc, cols), plain_block, acc);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      if constexpr (W::kBlockScaled) {
        total[i] = V::Fmadd(acc[i], V::Set1(scales[i][j] * W::kScaleFactor), total[i]);
      } else {
        total[i] = total[i] + acc[i];
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) y[r0 + i] = V::ReduceAdd(total[i]);
}

// w.fp8_plain if it was computed for this very weight (a copy sliced or re-laid out afterwards
// keeps the pointer but not the data, shape or blocks it describes). A template, as everything
// here.
template <class V>
const Fp8PlainBlocks* PlainBlocksOf(const MatrixWeight& w) {
  const Fp8PlainBlocks* p = w.fp8_plain.get();
  return p != nullptr && p->data == w.data && p->rows == w.rows && p->cols == w.cols &&
                 p->block_cols == w.block_cols
             ? p
             : nullptr;
}

// dst[c] = W[r, c] in raw units: exactly the vectors GemvTile's registers hold before the block
// scale (lanes past a block's tail are left unwritten).   dst [cols]
template <class V, class W>
void DecodeRowRaw(const MatrixWeight& w, int64_t r, float* dst) {
  const auto* row = static_cast<const typename W::T*>(w.data) + r * w.cols;
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    int64_t c = cb;
    for (; c + V::kLanes <= ce; c += V::kLanes) V::Store(dst + c, W::Load(row + c));
    if (c < ce) V::StoreN(dst + c, W::LoadN(row + c, ce - c), ce - c);
  }
}

// y[t0 + t, r0 + i] for i < R, t < TT over decoded raw rows.   wd [R, cols]; scale [R, nb] (block
// scales in raw units, FP8 only); x [T, cols].
// Batch invariance: every (row, token) is reduced exactly as GemvTile reduces it for one token:
// kLanes lane sums over each scale block in column order (the block's tail one masked step), the
// block's scale applied with one FMA into a running total (a plain add when unscaled), one
// V::ReduceAdd at the end. Only the weight source differs (registers there, a decoded L1 scratch
// here), so a token's output does not depend on how many tokens share the step.
template <class V, int R, int TT, bool kScaled>
void MultiTile(const float* x, int64_t t0, const float* wd, const float* scale, int64_t nb,
               int64_t cols, int64_t bc, int64_t rows, int64_t r0, float* y) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes;
  // Running totals (FP8 block scales): kept in memory, touched once per block. Unscaled
  // weights have one block, whose total is formed in registers at the end, as GemvTile does.
  alignas(64) float total[kScaled ? R : 1][kScaled ? TT : 1][kLanes];
  if constexpr (kScaled) std::memset(total, 0, sizeof(total));
  const float* xt[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) xt[t] = x + (t0 + t) * cols;
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    F acc[R][TT];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) acc[i][t] = V::Zero();
    int64_t c = cb;
    for (; c + kLanes <= ce; c += kLanes) {
      F xv[TT];
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) xv[t] = V::Load(xt[t] + c);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const F wv = V::Load(wd + i * cols + c);
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) acc[i][t] = V::Fmadd(wv, xv[t], acc[i][t]);
      }
    }
    if (const int64_t n = ce - c; n > 0) {
      F xv[TT];
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) xv[t] = V::LoadN(xt[t] + c, n);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const F wv = V::LoadN(wd + i * cols + c, n);
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) acc[i][t] = V::Fmadd(wv, xv[t], acc[i][t]);
      }
    }
    if constexpr (kScaled) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) {
          V::StoreAligned(total[i][t], V::Fmadd(acc[i][t], V::Set1(scale[i * nb + j]),
                                                V::LoadAligned(total[i][t])));
        }
      }
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t)
          y[(t0 + t) * rows + r0 + i] = V::ReduceAdd(V::Zero() + acc[i][t]);
    }
  }
  if constexpr (kScaled) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t)
        y[(t0 + t) * rows + r0 + i] = V::ReduceAdd(V::LoadAligned(total[i][t]));
  }
}

using MultiFn = void (*)(const float*, int64_t, const float*, const float*, int64_t, int64_t,
                         int64_t, int64_t, int64_t, float*);
template <class V, bool kScaled, int R, size_t... I>
constexpr std::array<MultiFn, sizeof...(I)> MultiRow(std::index_sequence<I...>) {
  return {&MultiTile<V, R, static_cast<int>(I) + 1, kScaled>...};
}
// [R - 1][TT - 1]
template <class V, bool kScaled>
constexpr std::array<std::array<MultiFn, V::kMultiTokens>, kRows> kMulti = {
    MultiRow<V, kScaled, 1>(std::make_index_sequence<V::kMultiTokens>()),
    MultiRow<V, kScaled, 2>(std::make_index_sequence<V::kMultiTokens>()),
    MultiRow<V, kScaled, 3>(std::make_index_sequence<V::kMultiTokens>()),
    MultiRow<V, kScaled, 4>(std::make_index_sequence<V::kMultiTokens>())};

// T > 1: each weight row is decoded once per token chunk into an L1 scratch (decode_row(r, dst):
// raw units, exactly the vectors the GEMV holds before the block scale; scale_of(r, j): block j's
// scale in raw units) and reused by a kRows x kMultiTokens register tile; chunks of kTokenChunk
// tokens keep x in L2.
template <class V, bool kScaled, class DecodeRow, class ScaleOf>
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
      for (int64_t t = 0; t < nt; t += V::kMultiTokens) {
        const int tt = static_cast<int>(std::min<int64_t>(V::kMultiTokens, nt - t));
        kMulti<V, kScaled>[n - 1][tt - 1](x + tc * cols, t, scratch.data(), scale.data(), nb, cols,
                                          bc, w.rows, r, y + tc * w.rows);
      }
    }
  }
}

// MultiTokenRows for dtype decoder W (AVX2's T > 1 path for every dtype but MXFP4).
template <class V, class W>
void DecodedMultiTokenRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                           float* y) {
  MultiTokenRows<V, W::kBlockScaled>(
      x, T, w, r0, r1, W::kBlockScaled ? w.block_cols : w.cols, y,
      [&](int64_t r, float* dst) { DecodeRowRaw<V, W>(w, r, dst); },
      [&](int64_t r, int64_t j) { return BlockScale<W>(w, r, j); });
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

template <class V, class W>
struct GemvTileOf {
  template <int R>
  struct T {
    static void Run(const float* x, const MatrixWeight& w, int64_t r0, float* y) {
      GemvTile<V, W, R>(x, w, r0, y);
    }
  };
};

// T == 1 over FP8 rows [r0, r1) with plain tiles: every tile reads its plain blocks branch-free
// (GemvTile). False (nothing written) when the weight has no plain map or x is too large for
// the 2^112 scaling.
template <class V>
bool GemvRowsPlain(const float* x, const MatrixWeight& w, int64_t r0, int64_t r1, float* y) {
  const Fp8PlainBlocks* plain = PlainBlocksOf<V>(w);
  if (plain == nullptr) return false;
  thread_local std::vector<float> xs_buffer;
  if (static_cast<int64_t>(xs_buffer.size()) < w.cols) xs_buffer.resize(w.cols);
  float* xs = xs_buffer.data();
  if (!V::ScaleForE4m3Plain(x, w.cols, xs)) return false;
  int64_t r = r0;
  for (; r + kRows <= r1; r += kRows) GemvTile<V, F8W<V>, kRows>(x, w, r, y, xs, plain);
  switch (r1 - r) {
    case 3:
      return GemvTile<V, F8W<V>, 3>(x, w, r, y, xs, plain), true;
    case 2:
      return GemvTile<V, F8W<V>, 2>(x, w, r, y, xs, plain), true;
    case 1:
      return GemvTile<V, F8W<V>, 1>(x, w, r, y, xs, plain), true;
    default:
      return true;
  }
}

// The T > 1 path for dtype decoder W (linear_small_batch.h).
template <class V, class W>
void BatchRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1, float* y);

template <class V, class W>
void LinearRowsTyped(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                     float* y) {
  if (T == 1) {
    if constexpr (std::is_same_v<W, F8W<V>> && V::kE4m3Plain) {
      if (GemvRowsPlain<V>(x, w, r0, r1, y)) return;
    }
    return GemvRows<GemvTileOf<V, W>::template T>(x, w, r0, r1, y);
  }
  BatchRows<V, W>(x, T, w, r0, r1, y);
}

// ---- Lane-major prompt tiles (linear_prefill.h) ----------------------------------------------
// The kLanes-column steps of a row: scale blocks of bc columns, each block's last step partial.
template <int kLanes>
struct LaneSteps {
  int64_t nb;      // blocks
  int64_t full;    // steps of every block but the last
  int64_t last;    // steps of the last block
  int64_t padded;  // all steps, rounded up to kLanes (the transposes go kLanes steps at a time)
  LaneSteps(int64_t cols, int64_t bc)
      : nb((cols + bc - 1) / bc),
        full((bc + kLanes - 1) / kLanes),
        last((cols - (nb - 1) * bc + kLanes - 1) / kLanes),
        padded(((nb - 1) * full + last + kLanes - 1) / kLanes * kLanes) {}
};

// Calls f(step, c, n) for every step: columns [c, c + n) of the row, n <= kLanes.
template <int kLanes, class F>
inline void ForEachStep(int64_t cols, int64_t bc, F&& f) {
  int64_t s = 0;
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += kLanes) f(s++, c, std::min<int64_t>(kLanes, ce - c));
  }
}

// ---- MXFP4 (spec section 4) ----------------------------------------------------------------
// V::Mx decodes a 32-column block (16 bytes of E2M1 codes) into V::Mx::kVecs vectors in raw
// units; the block's E8M0 exponent (V::Mx::Scale, raw units) multiplies the block's partial sum
// with one FMA, as FP8's block scales do. Everything stays 4-bit in memory.
constexpr int64_t kMxBlock = 32;

// T == 1: y[r0 .. r0+R) for one token, codes decoded in registers. Per block, exactly the steps of
// MultiTile on a decoded row: kLanes columns at a time, a short block's last step masked.
template <class V>
struct MxGemvTileOf {
  template <int R>
  struct T {
    static void Run(const float* x, const MatrixWeight& w, int64_t r0, float* y) {
      using F = typename V::F;
      using Mx = typename V::Mx;
      constexpr int kLanes = V::kLanes, kVecs = Mx::kVecs;
      const Mx mx;  // per call: whatever the decoder keeps in registers (AVX-512: its table)
      const int64_t cols = w.cols, row_bytes = w.RowBytes();
      const uint8_t* row[R];
      const uint8_t* next[R];  // the next tile's rows, prefetched one 64-byte line per 4 blocks
      const uint8_t* exps[R];  // [scale_cols] exponents of each row
      F total[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        row[i] = static_cast<const uint8_t*>(w.data) + (r0 + i) * row_bytes;
        next[i] = r0 + R + i < w.rows ? row[i] + R * row_bytes : row[i];
        exps[i] = w.scale_e8m0 + w.ScaleRow(r0 + i) * w.scale_cols;
        total[i] = V::Zero();
      }
      const int64_t full = cols / kMxBlock;
      for (int64_t j = 0; j < full; ++j) {
        const int64_t c = j * kMxBlock;
        if ((j & 3) == 0) {
#pragma GCC unroll 16
          for (int i = 0; i < R; ++i) V::PrefetchL2(next[i] + c / 2);
        }
        F xv[kVecs];
#pragma GCC unroll 4
        for (int k = 0; k < kVecs; ++k) xv[k] = V::Load(x + c + kLanes * k);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          F wv[kVecs];
          mx.Decode(row[i] + c / 2, wv);
          F acc = V::Zero();
#pragma GCC unroll 4
          for (int k = 0; k < kVecs; ++k) acc = V::Fmadd(wv[k], xv[k], acc);
          total[i] = V::Fmadd(acc, V::Set1(Mx::Scale(exps[i][j])), total[i]);
        }
      }
      if (const int64_t n = cols - full * kMxBlock; n > 0) {
        const int64_t c = full * kMxBlock;
        // A permuting decoder's lanes hold columns from the whole block: every vector is used
        // (x is zero-padded past the row's end there).
        const int64_t steps = Mx::kPermuted ? kVecs : (n + kLanes - 1) / kLanes;
        F xv[kVecs];
        for (int64_t k = 0; k < steps; ++k) {
          xv[k] = Mx::kPermuted || kLanes * k + kLanes <= n
                      ? V::Load(x + c + kLanes * k)
                      : V::LoadN(x + c + kLanes * k, n - kLanes * k);
        }
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          F wv[kVecs];
          mx.DecodeTail(row[i] + c / 2, n, wv);
          F acc = V::Zero();
          for (int64_t k = 0; k < steps; ++k) acc = V::Fmadd(wv[k], xv[k], acc);
          total[i] = V::Fmadd(acc, V::Set1(Mx::Scale(exps[i][full])), total[i]);
        }
      }
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) y[r0 + i] = V::ReduceAdd(total[i]);
    }
  };
};

// dst[c] = W[r, c] in raw units (the block exponent not applied), in the decoder's lane order:
// column order, or per 32-column block the permuted order of Mx::PermuteBlock (a short last
// block then padded with +0 to 32).   dst [cols], or [ceil(cols / 32) * 32] if permuted
template <class V>
void DecodeMxRow(const MatrixWeight& w, int64_t r, float* dst) {
  using Mx = typename V::Mx;
  constexpr int kLanes = V::kLanes;
  const Mx mx;
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.RowBytes();
  const int64_t full = w.cols / kMxBlock;
  typename V::F v[Mx::kVecs];
  for (int64_t j = 0; j < full; ++j) {
    mx.Decode(row + j * 16, v);
    for (int k = 0; k < Mx::kVecs; ++k) V::Store(dst + j * kMxBlock + kLanes * k, v[k]);
  }
  if (const int64_t n = w.cols - full * kMxBlock; n > 0) {
    float* d = dst + full * kMxBlock;
    mx.DecodeTail(row + full * 16, n, v);
    if constexpr (Mx::kPermuted) {
      for (int k = 0; k < Mx::kVecs; ++k) V::Store(d + kLanes * k, v[k]);
      return;
    }
    for (int64_t k = 0; k * kLanes < n; ++k) {
      const int64_t left = n - kLanes * k;
      if (left >= kLanes) {
        V::Store(d + kLanes * k, v[k]);
      } else {
        V::StoreN(d + kLanes * k, v[k], left);
      }
    }
  }
}

// x [T, cols] in a permuting decoder's lane order, per 32-column block, each row padded with +0 to
// whole blocks.   xp [T, ceil(cols / 32) * 32]
template <class V>
const float* PermuteMxInput(const float* x, int64_t T, int64_t cols) {
  const int64_t padded = (cols + kMxBlock - 1) / kMxBlock * kMxBlock;
  thread_local std::vector<float> xp;
  xp.resize(static_cast<size_t>(T * padded));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < cols; c += kMxBlock) {
      V::Mx::PermuteBlock(x + t * cols + c, std::min(kMxBlock, cols - c),
                          xp.data() + t * padded + c);
    }
  }
  return xp.data();
}

// T = 2..kMxSmallMax with a permuting decoder (x in its lane order, whole blocks): R rows x TT
// tokens, each block of a row decoded once in registers and multiplied into the TT token vectors,
// so a step of a few tokens (several decoding requests, a speculative verify) costs about one
// read and one decode of the weights; decoding rows into an fp32 scratch (MultiTokenRows) made
// T = 2 ~4x slower than T = 1. Each (row, token) is reduced exactly as MxGemvTileOf reduces it.
constexpr int64_t kMxSmallMax = 16;
template <class V, int R, int TT>
void MxSmallTile(const float* xp, int64_t t0, const MatrixWeight& w, int64_t r0, float* y) {
  using F = typename V::F;
  using Mx = typename V::Mx;
  static_assert(Mx::kPermuted, "whole-block steps need the permuted lane order");
  constexpr int kLanes = V::kLanes, kVecs = Mx::kVecs;
  const Mx mx;
  const int64_t cols = w.cols, row_bytes = w.RowBytes();
  const int64_t nb = (cols + kMxBlock - 1) / kMxBlock, padded = nb * kMxBlock;
  const uint8_t* row[R];
  const uint8_t* exps[R];
  F total[R][TT];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    row[i] = static_cast<const uint8_t*>(w.data) + (r0 + i) * row_bytes;
    exps[i] = w.scale_e8m0 + w.ScaleRow(r0 + i) * w.scale_cols;
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) total[i][t] = V::Zero();
  }
  const float* xt = xp + t0 * padded;
  auto block = [&](int64_t j, const F(&wv)[R][kVecs]) {
    const int64_t c = j * kMxBlock;
    F sc[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) sc[i] = V::Set1(Mx::Scale(exps[i][j]));
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      F xv[kVecs];
#pragma GCC unroll 4
      for (int k = 0; k < kVecs; ++k) xv[k] = V::Load(xt + t * padded + c + kLanes * k);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        F acc = V::Zero();
#pragma GCC unroll 4
        for (int k = 0; k < kVecs; ++k) acc = V::Fmadd(wv[i][k], xv[k], acc);
        total[i][t] = V::Fmadd(acc, sc[i], total[i][t]);
      }
    }
  };
  const int64_t full = cols / kMxBlock;
  for (int64_t j = 0; j < full; ++j) {
    F wv[R][kVecs];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) mx.Decode(row[i] + j * (kMxBlock / 2), wv[i]);
    block(j, wv);
  }
  if (full < nb) {
    F wv[R][kVecs];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
      mx.DecodeTail(row[i] + full * (kMxBlock / 2), cols - full * kMxBlock, wv[i]);
    block(full, wv);
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) y[(t0 + t) * w.rows + r0 + i] = V::ReduceAdd(total[i][t]);
}

using MxSmallFn = void (*)(const float*, int64_t, const MatrixWeight&, int64_t, float*);
template <class V, int R, size_t... I>
constexpr std::array<MxSmallFn, sizeof...(I)> MxSmallRow(std::index_sequence<I...>) {
  return {&MxSmallTile<V, R, static_cast<int>(I) + 1>...};
}
// Up to 4 tokens: 4 rows per tile; 5-8 tokens: 2 rows (R x TT accumulators, R x kVecs decoded
// vectors and a token's x stay within the registers); more tokens run in balanced groups.
constexpr int kMxSmallTokens = 8;
template <class V>
void MxSmallRows(const float* xp, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                 float* y) {
  static constexpr std::array<MxSmallFn, 4> kFour = MxSmallRow<V, 4>(std::make_index_sequence<4>());
  static constexpr std::array<MxSmallFn, kMxSmallTokens> kTwo =
      MxSmallRow<V, 2>(std::make_index_sequence<kMxSmallTokens>());
  static constexpr std::array<MxSmallFn, kMxSmallTokens> kOne =
      MxSmallRow<V, 1>(std::make_index_sequence<kMxSmallTokens>());
  const int64_t groups = (T + kMxSmallTokens - 1) / kMxSmallTokens;
  const int rows_per_tile = T <= 4 ? 4 : 2;
  for (int64_t r = r0; r < r1;) {
    const int n = r + rows_per_tile <= r1 ? rows_per_tile : 1;
    for (int64_t g = 0, t0 = 0; g < groups; ++g) {
      const int64_t tt = (T - t0) / (groups - g);  // balanced: groups differ by at most one token
      const auto& tiles = n == 4 ? kFour.data() : n == 2 ? kTwo.data() : kOne.data();
      tiles[tt - 1](xp, t0, w, r, y);
      t0 += tt;
    }
    r += n;
  }
}

// T >= V::kLaneMinTokens on the lane-major prompt tiles (linear_prefill.h, which the unit includes).
template <class V>
void MxPrefillRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                   float* y);

template <class V>
void LinearRowsMxfp4(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                     float* y) {
  auto scale_of = [&](int64_t r, int64_t j) {
    return V::Mx::Scale(w.scale_e8m0[w.ScaleRow(r) * w.scale_cols + j]);
  };
  auto decode = [&](int64_t r, float* dst) { DecodeMxRow<V>(w, r, dst); };
  if constexpr (V::Mx::kPermuted) {
    const float* xp = PermuteMxInput<V>(x, T, w.cols);
    if (T == 1) return GemvRows<MxGemvTileOf<V>::template T>(xp, w, r0, r1, y);
    if (T <= kMxSmallMax) return MxSmallRows<V>(xp, T, w, r0, r1, y);
    if (T >= V::kLaneMinTokens) return MxPrefillRows<V>(xp, T, w, r0, r1, y);
    // The decoded rows and xp are whole permuted blocks: the tile walks them as full blocks.
    MatrixWeight padded = w;
    padded.cols = (w.cols + kMxBlock - 1) / kMxBlock * kMxBlock;
    return MultiTokenRows<V, true>(xp, T, padded, r0, r1, kMxBlock, y, decode, scale_of);
  }
  if (T == 1) return GemvRows<MxGemvTileOf<V>::template T>(x, w, r0, r1, y);
  if (T >= V::kLaneMinTokens) return MxPrefillRows<V>(x, T, w, r0, r1, y);
  MultiTokenRows<V, true>(x, T, w, r0, r1, kMxBlock, y, decode, scale_of);
}

// KernelTable::linear_rows of the unit that instantiates it.
template <class V>
void LinearRowsFor(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                   int64_t row_end, float* y) {
  switch (w.dtype) {
    case DType::kF32:
      return LinearRowsTyped<V, F32W<V>>(x, T, w, row_begin, row_end, y);
    case DType::kBF16:
      return LinearRowsTyped<V, BF16W<V>>(x, T, w, row_begin, row_end, y);
    case DType::kF16:
      return LinearRowsTyped<V, F16W<V>>(x, T, w, row_begin, row_end, y);
    case DType::kF8E4M3:
      return LinearRowsTyped<V, F8W<V>>(x, T, w, row_begin, row_end, y);
    case DType::kMxfp4:
      return LinearRowsMxfp4<V>(x, T, w, row_begin, row_end, y);
    case DType::kInt8:
      return LinearRowsTyped<V, I8W<V>>(x, T, w, row_begin, row_end, y);
    default:
      MIMO_ABORT("%s::LinearRows: unsupported dtype %d", V::kName, static_cast<int>(w.dtype));
  }
}

}  // namespace mimo::cpu
