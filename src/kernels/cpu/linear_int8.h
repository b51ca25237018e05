// The int8-activation mode (KernelTable::linear_rows_int8, --precision int8) for int8 weights
// (DType::kInt8), written once over an integer-dot policy P that the including unit supplies:
// linear_int8_avx512.cc (AVX512_VNNI vpdpbusd, 64 columns a step) and linear_int8_avx2.cc (AVX2
// vpmaddubsw + vpmaddwd, 32 columns a step). The unit defines MIMO_INT8_TARGET, the function
// attribute that enables P's instructions (empty where the unit's flags already do).
//
// Each token's activations are quantized once per call by llama.cpp's Q8_0 rule with an fp32 scale
// (per 32 columns: scale amax / 127 in fp32, 1 for an all-zero block, NaN where a value is not
// finite; codes x / scale rounded to nearest even within [-127, 127]; the weights' own scales are
// that quotient rounded up to bf16, expert_quantizer.h). A step of P::kChunk columns of a row
// gives, per int32 lane, the exact sum of 4 products of weight and activation codes (P::Dot); lanes
// of one 32-column block are converted to fp32 and added into the (row, token)'s running total with
// one FMA against weight scale x activation scale (one fp32 product, computed per group of kLanes
// blocks); one ReduceAdd at the end.
//
// Batch invariance within the mode: a (row, token) is reduced in exactly that order whatever T
// and whichever tile (R rows x TT tokens) runs it; the integer parts are exact, the fp32 steps the
// same operations on the same operands. Weights of any other dtype run the exact kernels.
//
// P (static members):
//   I, kChunk                    integer vector; columns per step (4 x the int32 lanes)
//   kGroup                       steps sharing one vector of kLanes block scales (kLanes blocks)
//   QuantizeBlock(x, n, q)       the rule above for n <= 32 values; returns the scale
//   kExtraBytes, Extra(q, out)   per-token data of one step's codes that Dot needs, stored
//   LoadExtra(p)                 ... and loaded
//   LoadCodes(q)                 one step's activation codes
//   LoadWeights(p, n)            the n <= kChunk weight codes of one step, prepared for Dot
//   Dot(w, q, extra)             int32 lanes: lane l = sum of codes 4l..4l+3 of w times q
//   ToFloat(i)                   int32 lanes -> fp32
//   StepScale(s, c)              the scale vector of step c of a group from its block scales s
//   Prefetch(p)
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/matrix_weight.h"
#include "kernels/dispatch.h"

namespace mimo::cpu {

constexpr int64_t kInt8Block = 32;   // columns per scale (the int8 weight format's block)
constexpr int kInt8MaxRows = 4;      // rows per tile
constexpr int kInt8MaxTokens = 4;    // tokens per tile (R x TT totals in registers)
constexpr int64_t kInt8PrefetchBytes = 8 << 10;

// A step's activations, quantized per token.
template <class P>
struct Int8Activations {
  int64_t steps = 0;          // ceil(cols / kChunk)
  int64_t blocks_padded = 0;  // ceil(cols / 32) rounded up to whole groups of kLanes blocks
  std::vector<int8_t> q;      // [T, steps * kChunk] codes, +0 past cols
  std::vector<uint8_t> extra;  // [T, steps, P::kExtraBytes] P::Extra of each step's codes
  std::vector<float> scale;   // [T, blocks_padded] per-block scale, 0 past the row's blocks
};

template <class P>
MIMO_INT8_TARGET void QuantizeInt8(const float* x, int64_t T, int64_t cols,
                                   Int8Activations<P>* out) {
  constexpr int64_t kChunk = P::kChunk;
  constexpr int64_t kGroupBlocks = P::kGroup * kChunk / kInt8Block;
  const int64_t nb = (cols + kInt8Block - 1) / kInt8Block;
  out->steps = (cols + kChunk - 1) / kChunk;
  out->blocks_padded = (nb + kGroupBlocks - 1) / kGroupBlocks * kGroupBlocks;
  const int64_t qc = out->steps * kChunk;
  // Every element is written below: codes and scales, then +0 past the row (only the padding is
  // cleared, not the whole buffer on every call).
  out->q.resize(static_cast<size_t>(T * qc));
  out->extra.resize(static_cast<size_t>(T * out->steps * P::kExtraBytes));
  out->scale.resize(static_cast<size_t>(T * out->blocks_padded));
  for (int64_t t = 0; t < T; ++t) {
    int8_t* q = out->q.data() + t * qc;
    float* s = out->scale.data() + t * out->blocks_padded;
    std::memset(q + cols, 0, static_cast<size_t>(qc - cols));
    std::fill(s + nb, s + out->blocks_padded, 0.0f);
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t n = std::min(kInt8Block, cols - j * kInt8Block);
      alignas(64) int8_t codes[kInt8Block];
      s[j] = P::QuantizeBlock(x + t * cols + j * kInt8Block, n, codes);
      std::memcpy(q + j * kInt8Block, codes, static_cast<size_t>(n));
    }
    uint8_t* e = out->extra.data() + t * out->steps * P::kExtraBytes;
    for (int64_t c = 0; c < out->steps; ++c) P::Extra(q + c * kChunk, e + c * P::kExtraBytes);
  }
}

// y[t0 + t, r0 + i] for i < R, t < TT.
template <class V, class P, int R, int TT>
MIMO_INT8_TARGET void Int8Tile(const Int8Activations<P>& xa, int64_t t0, const MatrixWeight& w,
                               int64_t r0, float* y) {
  using F = typename V::F;
  using I = typename P::I;
  constexpr int64_t kChunk = P::kChunk;
  constexpr int kLanes = V::kLanes;
  const int64_t cols = w.cols, steps = xa.steps, nb = w.scale_cols;
  const int64_t qc = steps * kChunk;
  const int64_t ahead =
      std::max<int64_t>(1, (kInt8PrefetchBytes + R * cols - 1) / (R * cols)) * R;
  const int8_t* row[R];
  const int8_t* next[R];
  const float* sw[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    row[i] = static_cast<const int8_t*>(w.data) + (r0 + i) * cols;
    next[i] = r0 + ahead + i < w.rows ? row[i] + ahead * cols : row[i];
    sw[i] = w.scale_inv + w.ScaleRow(r0 + i) * w.scale_cols;
  }
  const int8_t* q[TT];
  const uint8_t* extra[TT];
  const float* sx[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) {
    q[t] = xa.q.data() + (t0 + t) * qc;
    extra[t] = xa.extra.data() + (t0 + t) * steps * P::kExtraBytes;
    sx[t] = xa.scale.data() + (t0 + t) * xa.blocks_padded;
  }
  F total[R][TT];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) total[i][t] = V::Zero();
  for (int64_t g = 0; g < steps; g += P::kGroup) {
    // Weight x activation scales of the group's kLanes blocks.
    const int64_t b0 = g * kChunk / kInt8Block;
    alignas(64) float scales[R][TT][kLanes];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const F s = nb - b0 >= kLanes ? V::Load(sw[i] + b0) : V::LoadN(sw[i] + b0, nb - b0);
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) V::StoreAligned(scales[i][t], s * V::Load(sx[t] + b0));
    }
    const int64_t ge = std::min(steps, g + P::kGroup);
    for (int64_t c = g; c < ge; ++c) {
      const int64_t c0 = c * kChunk;
      I wv[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        P::Prefetch(next[i] + c0);
        wv[i] = P::LoadWeights(row[i] + c0, cols - c0);
      }
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) {
        const I qv = P::LoadCodes(q[t] + c0);
        const I ev = P::LoadExtra(extra[t] + c * P::kExtraBytes);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          const F d = P::ToFloat(P::Dot(wv[i], qv, ev));
          total[i][t] = V::Fmadd(d, P::StepScale(scales[i][t], static_cast<int>(c - g)),
                                 total[i][t]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) y[(t0 + t) * w.rows + r0 + i] = V::ReduceAdd(total[i][t]);
}

template <class V, class P>
using Int8TileFn = void (*)(const Int8Activations<P>&, int64_t, const MatrixWeight&, int64_t,
                            float*);
template <class V, class P, int R, size_t... I>
constexpr std::array<Int8TileFn<V, P>, sizeof...(I)> Int8TileRow(std::index_sequence<I...>) {
  return {&Int8Tile<V, P, R, static_cast<int>(I) + 1>...};
}

// Runs tile(r, n, t0, tt) over rows [row_begin, row_end) in tiles of n <= kRows rows, each over
// balanced token groups of tt <= kTokens tokens; a row tile runs every group while its rows are
// in L1. Both layouts' entries walk their tiles with it.
template <int kRows, int kTokens, class Tile>
inline void ForEachInt8Tile(int64_t T, int64_t row_begin, int64_t row_end, Tile&& tile) {
  const int64_t groups = (T + kTokens - 1) / kTokens;
  for (int64_t r = row_begin; r < row_end; r += kRows) {
    const int n = static_cast<int>(std::min<int64_t>(kRows, row_end - r));
    for (int64_t g = 0, t0 = 0; g < groups; ++g) {
      const int64_t tt = (T - t0) / (groups - g);
      tile(r, n, t0, tt);
      t0 += tt;
    }
  }
}

// ---- The grouped layout (MatrixWeight::int8_tile_rows, InterleaveInt8Rows) ----
// Each int32 lane of P's dot product sums one block: a group's 16 blocks take 16 / kLanes passes of
// kLanes lanes (one pass with AVX-512), each pass 8 steps of 4 columns a lane, accumulated in int32
// (exact: at most 32 x 127 x 127 a lane, plus P's bias); then, per pass, one convert and one FMA
// against weight scale (stored bf16, widened exactly) x activation scale (one fp32 product per
// block) into the (row, token)'s running total; one ReduceAdd at the end. The same definition as
// the row-major tiles (each block's dot product exact, scaled by the fp32 product of the scales,
// summed in fp32), in another fp32 summation order.
//
// P (static members, besides QuantizeBlock):
//   W, LoadGroupWeights(p)       kLanes x 4 weight codes, prepared for GroupDot
//   I, LoadGroupCodes(p)         kLanes x 4 activation codes;  QExtra(q): what GroupDot needs of them
//   BlockBias(codes)             int32 start of a block's lane (sum of 32 codes times a constant)
//   LoadBias(p)                  kLanes int32 biases
//   GroupDot(acc, w, q, qx)      acc + per lane the sum of its 4 products, exactly
//   ToFloat(i), Prefetch(p)

// A call's activations in the grouped order (Int8GroupActivations, kernels/dispatch.h): token
// rows [t_begin, t_end) of x [out->tokens, out->cols], out already sized; bias = P::BlockBias.
template <class P>
MIMO_INT8_TARGET void QuantizeInt8Grouped(const float* x, int64_t t_begin, int64_t t_end,
                                          Int8GroupActivations* out) {
  constexpr int64_t kGroupCols = MatrixWeight::kInt8GroupCols;
  const int64_t cols = out->cols, nb = (cols + kInt8Block - 1) / kInt8Block;
  const int64_t cp = out->padded_cols, bp = cp / kInt8Block;
  for (int64_t t = t_begin; t < t_end; ++t) {
    int8_t* q = out->q.data() + t * cp;
    for (int64_t j = 0; j < bp; ++j) {
      alignas(64) int8_t codes[kInt8Block] = {};
      float s = 0.0f;
      if (j < nb)
        s = P::QuantizeBlock(x + t * cols + j * kInt8Block,
                             std::min(kInt8Block, cols - j * kInt8Block), codes);
      out->scale[t * bp + j] = s;
      out->bias[t * bp + j] = P::BlockBias(codes);
      // Block l of group g: its 4-byte runs k at 64 k + 4 l of the group.
      int8_t* dst = q + j / 16 * kGroupCols + 4 * (j % 16);
      for (int k = 0; k < 8; ++k) std::memcpy(dst + 64 * k, codes + 4 * k, 4);
    }
  }
}

// y[t0 + t, r0 + i] for i < R, t < TT; rows [r0, r0 + R) are one tile of the grouped layout.
template <class V, class P, int R, int TT>
MIMO_INT8_TARGET void Int8GroupTile(const Int8GroupActivations& xa, int64_t t0,
                                    const MatrixWeight& w, int64_t r0, float* y) {
  using F = typename V::F;
  using I = typename P::I;
  using W = typename P::W;
  using A = decltype(P::LoadBias(static_cast<const int32_t*>(nullptr)));  // int32 lanes
  constexpr int kLanes = V::kLanes;
  constexpr int64_t kGroupCols = MatrixWeight::kInt8GroupCols;
  constexpr int64_t kGroupBlocks = MatrixWeight::kInt8GroupBlocks;
  static_assert(kGroupBlocks % kLanes == 0, "a pass is whole lanes of the group");
  const int64_t cp = xa.padded_cols, bp = cp / kInt8Block, groups = cp / kGroupCols;
  const int8_t* tile = static_cast<const int8_t*>(w.data) + r0 * cp;
  const uint16_t* tile_scales = w.int8_scale_bf16 + r0 * bp;
  F total[R][TT];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) total[i][t] = V::Zero();
  for (int64_t g = 0; g < groups; ++g) {
    const int8_t* wg = tile + g * R * kGroupCols;          // [R, 512]
    const uint16_t* sg = tile_scales + g * R * kGroupBlocks;  // [R, 16] bf16
#pragma GCC unroll 16
    for (int64_t p = 0; p < kGroupBlocks; p += kLanes) {
      A acc[R][TT];
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) {
        const A b = P::LoadBias(xa.bias.data() + (t0 + t) * bp + g * kGroupBlocks + p);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) acc[i][t] = b;
      }
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const int64_t off = 64 * k + 4 * p;
        W wv[R];
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          // The first token group streams the weights; the others find them in L1.
          if (p == 0 && t0 == 0) P::Prefetch(wg + i * kGroupCols + 64 * k + kInt8PrefetchBytes);
          wv[i] = P::LoadGroupWeights(wg + i * kGroupCols + off);
        }
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) {
          const I qv = P::LoadGroupCodes(xa.q.data() + (t0 + t) * cp + g * kGroupCols + off);
          const I qx = P::QExtra(qv);
#pragma GCC unroll 16
          for (int i = 0; i < R; ++i) acc[i][t] = P::GroupDot(acc[i][t], wv[i], qv, qx);
        }
      }
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const F ws = V::LoadBf16(sg + i * kGroupBlocks + p);
#pragma GCC unroll 16
        for (int t = 0; t < TT; ++t) {
          const F s = ws * V::Load(xa.scale.data() + (t0 + t) * bp + g * kGroupBlocks + p);
          total[i][t] = V::Fmadd(P::ToFloat(acc[i][t]), s, total[i][t]);
        }
      }
    }
  }
  // Wide tiles reduce 16 totals at a time where V can (the same bits as one at a time).
  if constexpr (R * TT >= 8 && requires(const F (&v)[16], float* o) { V::ReduceAdd16(v, o); }) {
    F all[16];
    alignas(64) float sums[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) all[k] = k < R * TT ? total[k / TT][k % TT] : V::Zero();
    V::ReduceAdd16(all, sums);
#pragma GCC unroll 16
    for (int k = 0; k < R * TT; ++k) y[(t0 + k % TT) * w.rows + r0 + k / TT] = sums[k];
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) y[(t0 + t) * w.rows + r0 + i] = V::ReduceAdd(total[i][t]);
  }
}

template <class V, class P>
using Int8GroupTileFn = void (*)(const Int8GroupActivations&, int64_t, const MatrixWeight&, int64_t,
                                 float*);
template <class V, class P, int R, size_t... I>
constexpr std::array<Int8GroupTileFn<V, P>, sizeof...(I)> Int8GroupTileRow(
    std::index_sequence<I...>) {
  return {&Int8GroupTile<V, P, R, static_cast<int>(I) + 1>...};
}

// The grouped layout's rows [row_begin, row_end) (whole tiles) from activations quantized by
// QuantizeInt8Grouped<P> (KernelTable::linear_rows_int8_grouped).
template <class V, class P>
MIMO_INT8_TARGET void LinearRowsInt8GroupedFrom(const Int8GroupActivations& xa,
                                                const MatrixWeight& w, int64_t row_begin,
                                                int64_t row_end, float* y) {
  constexpr int kRows = MatrixWeight::kInt8TileRows;
  constexpr int kTokens = P::kGroupTokens;
  MIMO_CHECK(row_begin % kRows == 0 && (row_end % kRows == 0 || row_end == w.rows),
             "LinearRowsInt8: rows [%lld, %lld) of an interleaved weight are not whole tiles",
             static_cast<long long>(row_begin), static_cast<long long>(row_end));
  MIMO_CHECK(w.int8_tile_rows != 0 && xa.cols == w.cols,
             "LinearRowsInt8: activations of %lld columns for an int8 weight [%lld, %lld]%s",
             static_cast<long long>(xa.cols), static_cast<long long>(w.rows),
             static_cast<long long>(w.cols), w.int8_tile_rows ? "" : " not in the grouped layout");
  // [R - 1][TT - 1]
  static constexpr std::array<std::array<Int8GroupTileFn<V, P>, kTokens>, kRows> kTiles = {
      Int8GroupTileRow<V, P, 1>(std::make_index_sequence<kTokens>()),
      Int8GroupTileRow<V, P, 2>(std::make_index_sequence<kTokens>()),
      Int8GroupTileRow<V, P, 3>(std::make_index_sequence<kTokens>()),
      Int8GroupTileRow<V, P, 4>(std::make_index_sequence<kTokens>())};
  static_assert(kRows == 4, "one tile row per R above");
  ForEachInt8Tile<kRows, kTokens>(
      xa.tokens, row_begin, row_end,
      [&](int64_t r, int n, int64_t t0, int64_t tt) { kTiles[n - 1][tt - 1](xa, t0, w, r, y); });
}

// Both halves in one call (a thread's own copy of the activations).
template <class V, class P>
MIMO_INT8_TARGET void LinearRowsInt8Grouped(const float* x, int64_t T, const MatrixWeight& w,
                                            int64_t row_begin, int64_t row_end, float* y) {
  thread_local Int8GroupActivations xa;
  xa.Resize(T, w.cols);
  QuantizeInt8Grouped<P>(x, 0, T, &xa);
  LinearRowsInt8GroupedFrom<V, P>(xa, w, row_begin, row_end, y);
}

// KernelTable::linear_rows_int8 of the unit that instantiates it; exact_rows for other dtypes.
template <class V, class P>
MIMO_INT8_TARGET void LinearRowsInt8For(
    const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin, int64_t row_end, float* y,
    void (*exact_rows)(const float*, int64_t, const MatrixWeight&, int64_t, int64_t, float*)) {
  if (w.dtype != DType::kInt8) return exact_rows(x, T, w, row_begin, row_end, y);
  if (w.int8_tile_rows != 0) return LinearRowsInt8Grouped<V, P>(x, T, w, row_begin, row_end, y);
  MIMO_CHECK(w.block_cols == kInt8Block, "LinearRowsInt8: block_cols %lld",
             static_cast<long long>(w.block_cols));
  // [R - 1][TT - 1]
  static constexpr std::array<std::array<Int8TileFn<V, P>, kInt8MaxTokens>, kInt8MaxRows> kTiles = {
      Int8TileRow<V, P, 1>(std::make_index_sequence<kInt8MaxTokens>()),
      Int8TileRow<V, P, 2>(std::make_index_sequence<kInt8MaxTokens>()),
      Int8TileRow<V, P, 3>(std::make_index_sequence<kInt8MaxTokens>()),
      Int8TileRow<V, P, 4>(std::make_index_sequence<kInt8MaxTokens>())};
  thread_local Int8Activations<P> xa;
  QuantizeInt8<P>(x, T, w.cols, &xa);
  ForEachInt8Tile<kInt8MaxRows, kInt8MaxTokens>(
      T, row_begin, row_end,
      [&](int64_t r, int n, int64_t t0, int64_t tt) { kTiles[n - 1][tt - 1](xa, t0, w, r, y); });
}

}  // namespace mimo::cpu
