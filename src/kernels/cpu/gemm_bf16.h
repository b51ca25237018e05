// The opt-in bf16 GEMM (KernelTable::linear_rows_bf16), written once over a vector type V that
// has the bf16 pair ops (vec_avx512.h: AVX512_BF16 vdpbf16ps; a NEON type can map DotBf16 to
// BFDOT). linear_avx512.cc instantiates it; the including unit defines MIMO_BF16_TARGET, the
// function attribute that enables V's bf16 instructions (empty where the unit's flags already do).
//
// Under --precision bf16 every step's BF16 and FP8 matrices run here, whatever T (decode GEMV,
// small batches, prompt chunks). The activations are rounded to bf16 (round to nearest even) as
// they are packed; for FP8 they are first multiplied by the weight's block scale of their column
// block (x * s, so the tiles need no per-block totals: one accumulator runs over the whole row, as
// for BF16). The weights are exact in bf16: BF16 as stored, FP8 as the e4m3 value x 2^-8 (4
// significant bits; the 2^8 is applied to the result). A product of two bf16 values is exact in
// fp32 and DotBf16 adds two per lane into an fp32 accumulator: twice the multiplies of an fp32 FMA
// per instruction, half the bytes of x. So the activations' rounding (relative <= 2^-8: bf16 keeps
// 8 significant bits) is the only one beyond the exact path's, besides summation order.
// Layout: each block (FP8's scale block, else the whole row) is cut into steps of 2 kLanes
// columns, the last zero-padded, for x and the weight rows alike, so lane i of a step pairs
// columns 2i and 2i + 1 of both.
// One reduction order for every T (batch invariance within the mode): output (row, token) is one
// kLanes-lane accumulator chain, one DotBf16 per step in column order starting from +0, then
// V::ReduceAdd and the factor kScaleFactor. The tiles differ only in how many chains they
// interleave (R rows x TT tokens) and the drivers only in which tile they pick; the bits a chain
// reads are the same for every T: x packed by PackTokensBf16, BF16 rows read in place (the last
// partial step by a zeroing load: the padding's +0), FP8 rows decoded by DecodeRowsBf16.
// Tiling mirrors the exact path: steps below V::kLaneMinTokens tokens run token groups of up to
// kSmallTokens under SmallRowsFor(tt) rows (T = 1 is the GEMV, the rows ahead prefetched as
// GemvTile does), longer steps the lane-major tiles (PrefillRowsBf16).
// History: with PrefillRows' 4-row x 3-token FP8 tile and per-block totals (scales applied to the
// sums) GCC spilled the accumulators and the tile ran 1.0-1.2 vdpbf16ps per cycle, against 2.2 for
// the same tile on BF16 weights.
//
// V's bf16 pair ops (B: kLanes lanes of two bf16 each, lane l = elements 2l and 2l + 1):
//   LoadB(p), LoadBAligned(p), StoreB(p, b), StoreBAligned(p, b), Set1Pair(u32), AsF(b), AsB(f)
//   LoadBf16PairsN(p, n)     the first n < 2 kLanes bf16 at p, the rest +0
//   PackBf16(lo, hi)         2 kLanes floats rounded to bf16 (nearest even), lo's kLanes first
//   DotBf16(acc, a, b)       acc + a.even b.even + a.odd b.odd per lane (products exact)
//   KeepInRegister(b)        as for F
//   E4m3Bf16                 a decoder object: TryDecode(p, &b) sets b to the 2 kLanes e4m3
//                            codes at p as bf16 of 2^-8 x their values and returns true, or
//                            returns false if one is a NaN code (the caller then converts)
// and the tuning kLaneRowsBf16 (rows per lane-major tile), with the exact path's kLaneMinTokens,
// kSmallTokens, SmallRowsFor, kLaneXBytes, kLaneScratchBytes and kPrefetchBytes.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/matrix_weight.h"
#include "kernels/cpu/linear_prefill.h"
#include "kernels/cpu/linear_small_batch.h"
#include "kernels/cpu/linear_tiles.h"

#ifndef MIMO_BF16_TARGET
#error "define MIMO_BF16_TARGET (the attribute enabling V's bf16 ops) before gemm_bf16.h"
#endif

namespace mimo::cpu {

// Steps of 2 kLanes columns of a row cut into blocks of bc columns.
template <class V>
int64_t Bf16Steps(int64_t cols, int64_t bc) {
  return PackedSteps<2 * V::kLanes>(cols, bc);
}

// The first n of kLanes floats at p (n <= 0: none), lanes past them +0.
template <class V>
inline typename V::F LoadHalf(const float* p, int64_t n) {
  return n >= V::kLanes ? V::Load(p) : n <= 0 ? V::Zero() : V::LoadN(p, n);
}
// The same for W's elements.
template <class V, class W>
inline typename V::F LoadHalfW(const typename W::T* p, int64_t n) {
  return n >= V::kLanes ? W::Load(p) : n <= 0 ? V::Zero() : W::LoadN(p, n);
}

// Columns [c, c + 2 kLanes) of token row src, clipped at ce, times sv as bf16 pairs.
template <class V>
MIMO_BF16_TARGET inline typename V::B PackStepBf16(const float* src, int64_t n, typename V::F sv) {
  return V::PackBf16(LoadHalf<V>(src, n) * sv, LoadHalf<V>(src + V::kLanes, n - V::kLanes) * sv);
}

// Tokens [t0, t0 + tt) of x as bf16 in step order, each column block times block_scale[block]
// (null: unscaled).   xp [steps, tt, 2 kLanes]
template <class V>
MIMO_BF16_TARGET void PackTokensBf16(const float* x, int64_t cols, int64_t bc, int64_t t0,
                                     int64_t tt, const float* block_scale, uint16_t* xp) {
  constexpr int kStep = 2 * V::kLanes;
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    const typename V::F sv = V::Set1(block_scale ? block_scale[j] : 1.0f);
    for (int64_t c = cb; c < ce; c += kStep) {
      for (int64_t t = 0; t < tt; ++t, xp += kStep) {
        V::StoreB(xp, PackStepBf16<V>(x + (t0 + t) * cols + c, ce - c, sv));
      }
    }
  }
}

// Columns [c, min(c + 2 kLanes, ce)) of row in raw units (exact in bf16), zero-padded: BF16 as
// stored, FP8 as 2^-8 x the e4m3 value (through V's decoder when the step has no NaN code, else
// through the exact f16 route: the same values).
template <class V, class W>
MIMO_BF16_TARGET inline typename V::B WeightStepBf16(
    const typename W::T* row, int64_t c, int64_t ce,
    [[maybe_unused]] const typename V::E4m3Bf16& dec) {
  constexpr int kLanes = V::kLanes;
  if (c + 2 * kLanes > ce) {
    return V::PackBf16(LoadHalfW<V, W>(row + c, ce - c),
                       LoadHalfW<V, W>(row + c + kLanes, ce - c - kLanes));
  }
  if constexpr (W::kBlockScaled) {
    typename V::B b;
    if (dec.TryDecode(reinterpret_cast<const uint8_t*>(row + c), &b)) return b;
  }
  return V::PackBf16(W::Load(row + c), W::Load(row + c + kLanes));
}

// Rows [r, r + n) of w in raw units (WeightStepBf16's values), in step order, row i at
// dst + i * ld; next (row r + ahead; null: none) is prefetched into L2 on the way. Step-major over
// the rows, so n streams of weights are in flight at once (row after row, one stream, was
// slower).   dst [n, ld >= steps * 2 kLanes]
template <class V, class W>
MIMO_BF16_TARGET void DecodeRowsBf16(const MatrixWeight& w, int64_t r, int64_t n,
                                     const typename W::T* next, uint16_t* dst, int64_t ld) {
  using WT = typename W::T;
  constexpr int kStep = 2 * V::kLanes;
  const WT* rows = static_cast<const WT*>(w.data) + r * w.cols;
  const int64_t cols = w.cols, bc = W::kBlockScaled ? w.block_cols : cols;
  const typename V::E4m3Bf16 dec;
  int64_t off = 0;  // dst offset of the step
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += kStep, off += kStep) {
      for (int64_t i = 0; i < n; ++i) {
        if (next != nullptr) V::PrefetchL2(next + i * cols + c);
        V::StoreB(dst + i * ld + off, WeightStepBf16<V, W>(rows + i * cols, c, ce, dec));
      }
    }
  }
}

// The decode GEMV (T = 1) on FP8 rows [r0, r0 + R): WeightStepBf16's values made in registers
// and multiplied at once, so the weights stream from memory while the products run (decoding
// into L1 first and then running Bf16Tile<R, 1> left the memory idle during the second pass:
// 20 tok/s on bench-flash-fp8 against the exact path's 25). Each row is the chain Bf16Tile<R, 1>
// runs over DecodeRowsBf16's rows (one DotBf16 per step from +0, the same operands, then the
// lane sum times out_scale), so the bits are the same for every T.
//   xp [steps, 2 kLanes] (PackTokensBf16 of the one token), y [rows of w]
template <class V, class W, int R>
MIMO_BF16_TARGET void GemvBf16(const MatrixWeight& w, int64_t r0, const uint16_t* xp,
                               const typename W::T* next, float out_scale, float* y) {
  using WT = typename W::T;
  using F = typename V::F;
  constexpr int kStep = 2 * V::kLanes;
  const WT* rows = static_cast<const WT*>(w.data) + r0 * w.cols;
  const int64_t cols = w.cols, bc = W::kBlockScaled ? w.block_cols : cols;
  const typename V::E4m3Bf16 dec;
  F acc[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) acc[i] = V::Zero();
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += kStep, xp += kStep) {
      const typename V::B xv = V::LoadB(xp);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        if (next != nullptr) V::PrefetchL2(next + i * cols + c);
        acc[i] = V::DotBf16(acc[i], WeightStepBf16<V, W>(rows + i * cols, c, ce, dec), xv);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) y[r0 + i] = out_scale * V::ReduceAdd(acc[i]);
}

// One step of an R x TT tile: acc[i][t] += the pair products of row step wv[i] and token t's
// step at xp + t * 2 kLanes.
template <class V, int R, int TT>
MIMO_BF16_TARGET __attribute__((always_inline)) inline void Bf16Step(const typename V::B (&wv)[R],
                                                                     const uint16_t* xp,
                                                                     typename V::F (&acc)[R][TT]) {
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) {
    typename V::B xv = V::LoadB(xp + t * 2 * V::kLanes);
    V::KeepInRegister(xv);  // one load per token vector (see SmallBatchTile)
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) acc[i][t] = V::DotBf16(acc[i][t], wv[i], xv);
  }
}

// The chains of R rows x TT tokens: y[t0 + t, r0 + i] = out_scale * (sum of the pair products of
// row i's steps and token t's), x packed by PackTokensBf16 for these TT tokens (xp [steps, TT,
// 2 kLanes]), row i in step order at wd + i * ld: `full` whole steps, then (tail > 0) one step of
// its first `tail` elements (lanes past them +0). pf > 0: the line pf elements past each row's
// step is prefetched into L2 (rows further down).   y [.., rows]
template <class V, int R, int TT>
MIMO_BF16_TARGET void Bf16Tile(const uint16_t* xp, int64_t t0, const uint16_t* wd, int64_t ld,
                               int64_t full, int tail, int64_t pf, int64_t rows, int64_t r0,
                               float out_scale, float* y) {
  constexpr int kStep = 2 * V::kLanes;
  typename V::F acc[R][TT];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) acc[i][t] = V::Zero();
  const uint16_t* row[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) row[i] = wd + i * ld;
  typename V::B wv[R];
  for (int64_t k = 0; k < full; ++k, xp += TT * kStep) {
    if (pf > 0) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) V::PrefetchL2(row[i] + k * kStep + pf);
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) wv[i] = V::LoadB(row[i] + k * kStep);
    Bf16Step<V, R, TT>(wv, xp, acc);
  }
  if (tail > 0) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) wv[i] = V::LoadBf16PairsN(row[i] + full * kStep, tail);
    Bf16Step<V, R, TT>(wv, xp, acc);
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) y[(t0 + t) * rows + r0 + i] = out_scale * V::ReduceAdd(acc[i][t]);
  }
}

using Bf16Fn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, int, int64_t,
                        int64_t, int64_t, float, float*);
template <class V, int R, size_t... I>
constexpr std::array<Bf16Fn, sizeof...(I)> Bf16Row(std::index_sequence<I...>) {
  return {&Bf16Tile<V, R, static_cast<int>(I) + 1>...};
}
// [TT - 1] for R rows: R = SmallRowsFor(tt) of a group, or 1 (rows left over, or straddling two
// FP8 scale rows).
template <class V, int R>
constexpr std::array<Bf16Fn, V::kSmallTokens> kBf16Tiles =
    Bf16Row<V, R>(std::make_index_sequence<V::kSmallTokens>());
template <class V>
const Bf16Fn* Bf16TilesFor(int64_t r) {
  constexpr int kWide = V::SmallRowsFor(1), kNarrow = V::SmallRowsFor(V::kSmallTokens);
  return r == kWide     ? kBf16Tiles<V, kWide>.data()
         : r == kNarrow ? kBf16Tiles<V, kNarrow>.data()
                        : kBf16Tiles<V, 1>.data();
}

// ---- bf16 prompts (T >= kLaneMinTokens) on lane-major tiles ----------------------------------
// The bf16 mode's chain for (row, token) is one DotBf16 per step, lane l taking the column pair
// (2l, 2l + 1) of the step, from +0, then V::ReduceAdd times the factor. As for the exact prefill
// (linear_prefill.h), the kLanes lane chains are independent GEMMs over pairs, so the tile runs one
// lane at a time: a broadcast weight pair times kLanes tokens' pairs of the same columns per
// DotBf16 (the same lane arithmetic on the same operands), kLaneRowsBf16 rows x 2 kLanes tokens,
// and the lanes are summed in ReduceAdd's order (LaneReduce). FP8 x is packed with the block
// scales of one scale row, so a row block never straddles two scale rows.
// Layouts (in 32-bit pairs; Sp = Bf16Steps rounded up to kLanes):
//   xt      [token groups][kLanes lanes][Sp steps][2 kLanes tokens]
//   scratch [kLanes lanes][block rows][Sp steps]
//   sums    [block rows][kLanes lanes][2 kLanes tokens]

// Lane l of R rows x kLanes NV tokens over `steps` steps: wl = the first row's lane-l pairs (row
// stride wstride), xl = the group's xt + l * Sp * 2 kLanes; the lane's sums to sums + i * kLanes
// * 2 kLanes.
template <class V, int R, int NV>
MIMO_BF16_TARGET void LaneTileBf16(const uint32_t* wl, int64_t wstride, const uint32_t* xl,
                                   int64_t steps, float* sums) {
  constexpr int kLanes = V::kLanes, kTokens = 2 * kLanes;
  typename V::F acc[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = V::Zero();
  for (int64_t s = 0; s < steps; ++s) {
    typename V::B xv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) xv[v] = V::LoadBAligned(xl + s * kTokens + kLanes * v);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const typename V::B wv = V::Set1Pair(wl[i * wstride + s]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = V::DotBf16(acc[i][v], wv, xv[v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      V::StoreAligned(sums + i * kLanes * kTokens + kLanes * v, acc[i][v]);
}

using LaneBf16Fn = void (*)(const uint32_t*, int64_t, const uint32_t*, int64_t, float*);
template <class V, int NV, size_t... I>
constexpr std::array<LaneBf16Fn, sizeof...(I)> LaneRowBf16(std::index_sequence<I...>) {
  return {&LaneTileBf16<V, static_cast<int>(I) + 1, NV>...};
}
// [NV - 1][R - 1]
template <class V>
constexpr std::array<std::array<LaneBf16Fn, V::kLaneRowsBf16>, 2> kLaneTilesBf16 = {
    LaneRowBf16<V, 1>(std::make_index_sequence<V::kLaneRowsBf16>()),
    LaneRowBf16<V, 2>(std::make_index_sequence<V::kLaneRowsBf16>())};

// Tokens [t0, t0 + n) (n <= 2 kLanes) of x as one bf16 xt group [kLanes][Sp][2 kLanes] pairs,
// each column block times block_scale[block] (null: 1), rounded as PackTokensBf16 rounds them;
// +0 elsewhere.
template <class V>
MIMO_BF16_TARGET void PackLaneGroupBf16(const float* x, int64_t cols, int64_t bc, int64_t padded,
                                        int64_t t0, int64_t n, const float* block_scale,
                                        uint32_t* xt) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes, kTokens = 2 * kLanes;
  int64_t s = 0;
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    const F sv = V::Set1(block_scale ? block_scale[j] : 1.0f);
    for (int64_t c = cb; c < ce; c += 2 * kLanes, ++s) {
      for (int h = 0; h * kLanes < n; ++h) {
        F in[kLanes], out[kLanes];
#pragma GCC unroll 16
        for (int i = 0; i < kLanes; ++i) {
          const int64_t t = kLanes * h + i;
          in[i] = t < n ? V::AsF(PackStepBf16<V>(x + (t0 + t) * cols + c, ce - c, sv)) : V::Zero();
        }
        V::Transpose(in, out);
#pragma GCC unroll 16
        for (int l = 0; l < kLanes; ++l) {
          V::StoreBAligned(xt + (l * padded + s) * kTokens + kLanes * h, V::AsB(out[l]));
        }
      }
    }
  }
  for (int l = 0; l < kLanes; ++l) {
    std::memset(xt + (l * padded + s) * kTokens, 0, (padded - s) * kTokens * sizeof(uint32_t));
  }
}

// Row r of w as the bf16 mode's steps (FP8: WeightStepBf16's raw units; BF16: the stored bits,
// the last step's missing columns +0, as Bf16Tile reads them): dst[l * lane_stride + s] = the
// pair of lane l in step s.
template <class V, class W>
MIMO_BF16_TARGET void DecodeLaneRowBf16(const MatrixWeight& w, int64_t r, int64_t lane_stride,
                                        uint32_t* dst) {
  using WT = typename W::T;
  using F = typename V::F;
  constexpr int kLanes = V::kLanes, kStep = 2 * kLanes;
  const WT* row = static_cast<const WT*>(w.data) + r * w.cols;
  const int64_t cols = w.cols, bc = W::kBlockScaled ? w.block_cols : cols;
  [[maybe_unused]] const typename V::E4m3Bf16 dec;
  F in[kLanes], out[kLanes];
  int k = 0;
  int64_t s0 = 0;
  auto flush = [&]() {  // in[0 .. k) are steps s0 .. s0 + k
    for (int j = k; j < kLanes; ++j) in[j] = V::Zero();
    V::Transpose(in, out);
#pragma GCC unroll 16
    for (int l = 0; l < kLanes; ++l) V::StoreB(dst + l * lane_stride + s0, V::AsB(out[l]));
    s0 += k;
    k = 0;
  };
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += kStep) {
      typename V::B v;
      if constexpr (W::kBlockScaled) {
        v = WeightStepBf16<V, W>(row, c, ce, dec);
      } else if (c + kStep <= ce) {
        v = V::LoadB(row + c);
      } else {
        v = V::LoadBf16PairsN(row + c, ce - c);
      }
      in[k++] = V::AsF(v);
      if (k == kLanes) flush();
    }
  }
  if (k > 0) flush();
}

template <class V, class W>
MIMO_BF16_TARGET void PrefillRowsBf16(const float* x, int64_t T, const MatrixWeight& w, int64_t r0,
                                      int64_t r1, float* y) {
  constexpr int kLanes = V::kLanes, kTokens = 2 * kLanes;
  constexpr bool kScaled = W::kBlockScaled;
  constexpr int kR = V::kLaneRowsBf16;
  const int64_t cols = w.cols, bc = kScaled ? w.block_cols : cols;
  const int64_t steps = Bf16Steps<V>(cols, bc), sp = (steps + kLanes - 1) / kLanes * kLanes;
  const int64_t group_units = kLanes * sp * kTokens;
  const LaneBlocking<V> blocking(group_units * 4, kLanes * sp * 4, kR);
  const int64_t chunk = blocking.chunk, block_rows = blocking.block_rows;
  thread_local std::vector<Lanes<uint32_t, kLanes>> xt_buf, scratch_buf;
  thread_local std::vector<Lanes<float, kLanes>> sums_buf;
  xt_buf.resize(chunk / kTokens * group_units / kLanes);
  scratch_buf.resize(block_rows * sp);  // [L][block_rows][sp] pairs
  sums_buf.resize(block_rows * kTokens);
  uint32_t* xt = xt_buf.data()->v;
  uint32_t* scratch = scratch_buf.data()->v;
  float* sums = sums_buf.data()->v;
  for (int64_t tc = 0; tc < T; tc += chunk) {
    const int64_t nt = std::min(chunk, T - tc);
    const int64_t groups = (nt + kTokens - 1) / kTokens;
    int64_t packed_scale_row = -1;
    for (int64_t rb = r0, nr = 0; rb < r1; rb += nr) {
      // Rows [rb, rb + nr): at most a block, all on one scale row (FP8).
      const int64_t sr = kScaled ? w.ScaleRow(rb) : 0;
      nr = 1;
      while (nr < block_rows && rb + nr < r1 && (!kScaled || w.ScaleRow(rb + nr) == sr)) ++nr;
      if (sr != packed_scale_row) {
        const float* block_scale = kScaled ? w.scale_inv + sr * w.scale_cols : nullptr;
        for (int64_t g = 0; g < groups; ++g) {
          PackLaneGroupBf16<V>(x, cols, bc, sp, tc + g * kTokens,
                               std::min<int64_t>(kTokens, nt - g * kTokens), block_scale,
                               xt + g * group_units);
        }
        packed_scale_row = sr;
      }
      for (int64_t i = 0; i < nr; ++i)
        DecodeLaneRowBf16<V, W>(w, rb + i, block_rows * sp, scratch + i * sp);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t gt = std::min<int64_t>(kTokens, nt - g * kTokens);
        const int nv = gt > kLanes ? 2 : 1;
        const uint32_t* xg = xt + g * group_units;
        for (int l = 0; l < kLanes; ++l) {
          for (int64_t i = 0; i < nr; i += kR) {
            const int rt = static_cast<int>(std::min<int64_t>(kR, nr - i));
            kLaneTilesBf16<V>[nv - 1][rt - 1](scratch + (l * block_rows + i) * sp, sp,
                                              xg + l * sp * kTokens, steps,
                                              sums + i * kLanes * kTokens + l * kTokens);
          }
        }
        StoreLaneOutputs<V, true>(sums, nr, nv, gt, tc + g * kTokens, W::kScaleFactor, w.rows, rb,
                                  y);
      }
    }
  }
}

// The bf16 GEMM, rows [r0, r1): prompts (T >= kLaneMinTokens) on the lane-major tiles; otherwise
// the token groups packed as bf16 (FP8: again whenever the rows reach another scale row, with that
// row's block scales), then per R rows that share a scale row (FP8: decoded once into an L1
// scratch; BF16: read in place) the tile run over every group; a tile whose rows straddle two
// scale rows, or that would pass r1, runs row by row.
template <class V, class W>
MIMO_BF16_TARGET void RowsBf16(const float* x, int64_t T, const MatrixWeight& w, int64_t r0,
                               int64_t r1, float* y) {
  if (T >= V::kLaneMinTokens) return PrefillRowsBf16<V, W>(x, T, w, r0, r1, y);
  constexpr bool kScaled = W::kBlockScaled;
  constexpr int kStep = 2 * V::kLanes;
  constexpr int kMaxRows = std::max(V::SmallRowsFor(1), V::SmallRowsFor(V::kSmallTokens));
  using WT = typename W::T;
  const int64_t cols = w.cols, bc = kScaled ? w.block_cols : cols;
  const int64_t stride = Bf16Steps<V>(cols, bc) * kStep;  // bf16 elements per row in step order
  thread_local std::vector<uint16_t> decoded;             // [kMaxRows, stride] (FP8)
  thread_local std::vector<uint16_t> packed;              // [groups, steps, tt, 2 kLanes]
  if constexpr (kScaled) decoded.resize(kMaxRows * stride);
  const TokenGroups groups(T, V::kSmallTokens);  // the whole step is one chunk
  const int64_t max_tt = groups.MaxTokens();
  const int64_t tile_rows = V::SmallRowsFor(max_tt);
  // Small steps stream the weights once: rows this far ahead are prefetched (GemvTile's).
  const int64_t ahead = PrefetchRowsAhead<V>(tile_rows, cols * static_cast<int64_t>(sizeof(WT)));
  const int64_t group_elems = stride * max_tt;
  packed.resize(groups.n * group_elems);
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
        PackTokensBf16<V>(x, cols, bc, groups.t0[g], groups.tt[g], block_scale,
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
        constexpr int kGemvRows = V::SmallRowsFor(1);
        const WT* next = prefetch ? wrow + ahead * cols : nullptr;
        if (n == kGemvRows) {
          GemvBf16<V, W, kGemvRows>(w, r, packed.data(), next, W::kScaleFactor, y);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            GemvBf16<V, W, 1>(w, r + i, packed.data(), next ? next + i * cols : nullptr,
                              W::kScaleFactor, y);
          }
        }
        r += n;
        continue;
      }
      DecodeRowsBf16<V, W>(w, r, n, prefetch ? wrow + ahead * cols : nullptr, decoded.data(),
                           stride);
      src = decoded.data();
      ld = stride;
      full = stride / kStep;
      tail = 0;
    } else {
      src = wrow;
      ld = cols;
      full = cols / kStep;
      tail = static_cast<int>(cols % kStep);
      pf = prefetch ? ahead * cols : 0;
    }
    const Bf16Fn* tiles = Bf16TilesFor<V>(n);
    for (int64_t g = 0; g < groups.n; ++g) {
      tiles[groups.tt[g] - 1](packed.data() + g * group_elems, groups.t0[g], src, ld, full, tail,
                              g == 0 ? pf : 0, w.rows, r, W::kScaleFactor, y);
    }
    r += n;
  }
}

// KernelTable::linear_rows_bf16 of the unit that instantiates it: BF16 and FP8 weights here,
// the others on the exact kernels.
template <class V>
MIMO_BF16_TARGET void LinearRowsBf16For(const float* x, int64_t T, const MatrixWeight& w,
                                        int64_t row_begin, int64_t row_end, float* y) {
  switch (w.dtype) {
    case DType::kBF16:
      return RowsBf16<V, BF16W<V>>(x, T, w, row_begin, row_end, y);
    case DType::kF8E4M3:
      return RowsBf16<V, F8W<V>>(x, T, w, row_begin, row_end, y);
    default:  // F32/F16/MXFP4 weights: the exact kernels
      return LinearRowsFor<V>(x, T, w, row_begin, row_end, y);
  }
}

}  // namespace mimo::cpu
