// The Linear T > 1 paths, written once for any vector width: the small-step register tiles
// (2 <= T < V::kLaneMinTokens: several decoding requests, a speculative verify step) and BatchRows,
// which picks them, the lane-major prompt tiles (linear_prefill.h) or the decoded-row tile
// (linear_tiles.h MultiTokenRows). Only ops of the vector type V are used (vec_avx2.h lists them).
//
// Small steps are decode-shaped: they should cost about one read of the weights. GemvTile's
// structure with TT tokens: R weight rows are decoded in registers once per kLanes columns and
// multiplied into TT token vectors (R x TT accumulators), so the decode and the weight load are
// shared by every token of the group. Steps of more than kSmallTokens tokens run in balanced token
// groups, a group of R rows decoded again per group from L1 (R rows of at most a few KiB); the
// weights are read from DRAM once, the next tile prefetched as in GemvTile. Every (row, token) is
// reduced exactly as GemvTile and MultiTile reduce it (kLanes lane sums per block in column order,
// the block scale by one FMA into a running total, one ReduceAdd at the end): batch invariant.
// History (docs/PERFORMANCE.md): the fp32-scratch tile made a T = 2 step cost 2.7x a T = 1 step; a
// 2-row x 4-token register tile re-decoded each row for every 4 tokens and loaded x once per 2
// FMAs (FP8 at T = 8 streamed 7.8 GB/s against 29.5 at T = 1).
//
// V's Linear tuning read here (linear_avx2.cc, linear_avx512.cc):
//   kSmallTokens            tokens per register tile at most
//   SmallRowsFor(tt)        rows per tile for groups of tt tokens (R x TT accumulators, R weight
//                           vectors and one x vector within the registers)
//   kSmallTotalsInRegs      the largest R x TT whose FP8 running totals stay in registers (L1
//                           above)
//   kSmallPrefetch          whether the tiles prefetch the rows ahead (PrefetchRowsAhead)
//   kSmallFp8ScratchAbove   FP8 without a plain map above this T takes MultiTokenRows (each row
//                           decoded once into a scratch) rather than a decode per token group
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/matrix_weight.h"
#include "kernels/cpu/linear_prefill.h"
#include "kernels/cpu/linear_tiles.h"

namespace mimo::cpu {

// Token groups of a small batch: balanced (sizes differ by at most one), at most max_tokens.
struct TokenGroups {
  static constexpr int64_t kMaxGroups = 32;  // covers a small step and a prefill token chunk
  int64_t n = 0, t0[kMaxGroups] = {}, tt[kMaxGroups] = {};

  TokenGroups(int64_t T, int64_t max_tokens) {
    n = (T + max_tokens - 1) / max_tokens;
    MIMO_CHECK(n <= kMaxGroups, "TokenGroups: %lld tokens in groups of %lld",
               static_cast<long long>(T), static_cast<long long>(max_tokens));
    for (int64_t g = 0, t = 0; g < n; ++g) {
      t0[g] = t;
      tt[g] = (T - t) / (n - g);
      t += tt[g];
    }
  }
  int64_t MaxTokens() const { return *std::max_element(tt, tt + n); }
};

// The kLanes-column steps of a row cut into scale blocks of bc columns (each block's last step
// partial).
template <int kLanes>
int64_t PackedSteps(int64_t cols, int64_t bc) {
  int64_t steps = 0;
  for (int64_t cb = 0; cb < cols; cb += bc)
    steps += (std::min(bc, cols - cb) + kLanes - 1) / kLanes;
  return steps;
}

// The x vectors of tokens [t0, t0 + tt) in the order a small-step tile consumes them: per scale
// block (bc columns; the whole row when unscaled), kLanes-column steps from the block's start, each
// step's tt vectors adjacent, the block's last step zero-padded (as GemvTile's LoadN reads it).
// One pointer then walks every token's x at fixed offsets.   xp [steps, tt, kLanes]
template <class V>
void PackTokens(const float* x, int64_t cols, int64_t bc, int64_t t0, int64_t tt, float* xp) {
  constexpr int kLanes = V::kLanes;
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += kLanes) {
      for (int64_t t = 0; t < tt; ++t, xp += kLanes) {
        const float* p = x + (t0 + t) * cols + c;
        V::StoreAligned(xp, ce - c >= kLanes ? V::Load(p) : V::LoadN(p, ce - c));
      }
    }
  }
}

// Packs every token group of x [.., cols] (PackTokens) into one thread-local buffer (the second
// one for FP8 plain tiles' x * 2^112): group g starts at the result + g * *group_floats.
template <class V>
float* PackGroups(const float* x, int64_t cols, int64_t bc, const TokenGroups& groups,
                  int64_t* group_floats, int buffer = 0) {
  constexpr int kLanes = V::kLanes;
  // Packed tightly: the chunk stays in L2.
  *group_floats = PackedSteps<kLanes>(cols, bc) * groups.MaxTokens() * kLanes;
  thread_local std::vector<Lanes<float, kLanes>> buffers[2];  // [groups, steps, tt] vectors
  auto& packed = buffers[buffer];
  packed.resize(groups.n * *group_floats / kLanes);
  float* xp = packed.data()->v;
  for (int64_t g = 0; g < groups.n; ++g) {
    PackTokens<V>(x, cols, bc, groups.t0[g], groups.tt[g], xp + g * *group_floats);
  }
  return xp;
}

// acc[i][t] = the kLanes lane sums of one scale block, columns [cb, ce), of row[i] against token
// t's packed x at xp (advanced past the block). plain_block (FP8 plain tiles): the block holds no
// subnormal or NaN code in these rows, so it is read with V::LoadE4m3Plain against the packing of
// x * 2^112 to_xs floats past xp. prefetch: next[i] + c is requested once per line.
template <class V, class W, int R, int TT>
__attribute__((always_inline)) inline void SmallBlockSums(const typename W::T* const (&row)[R],
                                                          const typename W::T* const (&next)[R],
                                                          int64_t cb, int64_t ce, bool prefetch,
                                                          bool plain_block, int64_t to_xs,
                                                          const float*& xp,
                                                          typename V::F (&acc)[R][TT]) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes;
  constexpr int64_t kLine = 64 / sizeof(typename W::T);
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) acc[i][t] = V::Zero();
  // acc += wv x the TT token vectors at xv_at (one load per token vector, kept in a register:
  // left alone, GCC folds the load into each of the R FMAs, and R x TT loads per step made the
  // AVX-512 tile load-port bound).
  auto multiply = [&](const F(&wv)[R], const float* xv_at) {
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      F xv = V::LoadAligned(xv_at + t * kLanes);
      V::KeepInRegister(xv);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][t] = V::Fmadd(wv[i], xv, acc[i][t]);
    }
    xp += TT * kLanes;
  };
  // One step of n <= kLanes columns; clean: no NaN code in these weights (FP8), so the cheaper
  // decode.
  auto step = [&](int64_t c, int64_t n, bool clean) {
    F wv[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      wv[i] = n != kLanes ? W::LoadN(row[i] + c, n)
              : clean     ? LoadClean<W>(row[i] + c)
                          : W::Load(row[i] + c);
    }
    multiply(wv, xp);
  };
  int64_t c = cb;
  if constexpr (std::is_same_v<W, F8W<V>> && V::kE4m3Plain) {
    if (plain_block) {  // whole lines, no special code
      for (; c < ce; c += kLine) {
        if (V::kSmallPrefetch && prefetch) {
#pragma GCC unroll 16
          for (int i = 0; i < R; ++i) V::PrefetchL2(next[i] + c);
        }
#pragma GCC unroll 4
        for (int64_t v = 0; v < kLine; v += kLanes) {
          F wv[R];
#pragma GCC unroll 16
          for (int i = 0; i < R; ++i) wv[i] = V::LoadE4m3Plain(row[i] + c + v);
          multiply(wv, xp + to_xs);
        }
      }
    }
  }
  for (; c + kLine <= ce; c += kLine) {
    if (V::kSmallPrefetch && prefetch) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) V::PrefetchL2(next[i] + c);
    }
    bool clean = true;
    if constexpr (W::kNanLineTest) {
      uint64_t nan_codes = 0;
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) nan_codes |= W::LineNanMask(row[i] + c);
      clean = nan_codes == 0;
    }
    if (clean) {
#pragma GCC unroll 4
      for (int64_t v = 0; v < kLine; v += kLanes) step(c + v, kLanes, true);
    } else {
      for (int64_t v = 0; v < kLine; v += kLanes) step(c + v, kLanes, false);
    }
  }
  for (; c + kLanes <= ce; c += kLanes) step(c, kLanes, false);
  if (c < ce) step(c, ce - c, false);
}

// y[t0 + t, r0 + i] for i < R, t < TT; rows r0 .. r0 + R of w start at rows0 (stride w.cols).
// FP8 plain tiles (GemvTile's): xsp holds the same packing of x * 2^112, and a block the map calls
// plain for these rows is decoded by V::LoadE4m3Plain against it: the same products, so the same
// bits.
template <class V, class W, int R, int TT>
void SmallBatchTile(const float* xp, int64_t t0, const MatrixWeight& w, const typename W::T* rows0,
                    int64_t r0, bool prefetch, float* y, const float* xsp,
                    const Fp8PlainBlocks* plain) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes;
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  // FP8 running totals (touched once per scale block) live in registers while they fit beside
  // the accumulators, in L1 otherwise; unscaled weights have one block and need none.
  constexpr bool kTotalsInRegs = !W::kBlockScaled || R * TT <= V::kSmallTotalsInRegs;
  const typename W::T* row[R];
  const typename W::T* next[R];
  F total[kTotalsInRegs ? R : 1][kTotalsInRegs ? TT : 1];
  alignas(64) float total_mem[kTotalsInRegs ? 1 : R][kTotalsInRegs ? 1 : TT][kLanes];
  [[maybe_unused]] const float* scales[R];  // [R][scale_cols] (FP8)
  ScaleRows<W, R>(w, r0, scales);
  const int64_t ahead = PrefetchRowsAhead<V>(R, cols * static_cast<int64_t>(sizeof(typename W::T)));
  if constexpr (!kTotalsInRegs) std::memset(total_mem, 0, sizeof(total_mem));
  const int64_t to_xs = xsp != nullptr ? xsp - xp : 0;  // floats from xp to xsp
  if (xsp == nullptr) plain = nullptr;
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    row[i] = rows0 + i * cols;
    next[i] = r0 + ahead + i < w.rows ? row[i] + ahead * cols : row[i];
    if constexpr (kTotalsInRegs) {
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) total[i][t] = V::Zero();
    }
  }
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    F acc[R][TT];
    const bool plain_block = plain != nullptr && plain->PlainRows(r0, R, j);
    SmallBlockSums<V, W, R, TT>(row, next, cb, std::min(cb + bc, cols), prefetch, plain_block,
                                to_xs, xp, acc);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) {
        if constexpr (!W::kBlockScaled) {
          total[i][t] = total[i][t] + acc[i][t];
        } else if constexpr (kTotalsInRegs) {
          total[i][t] = V::Fmadd(acc[i][t], V::Set1(scales[i][j] * W::kScaleFactor), total[i][t]);
        } else {
          V::StoreAligned(total_mem[i][t],
                          V::Fmadd(acc[i][t], V::Set1(scales[i][j] * W::kScaleFactor),
                                   V::LoadAligned(total_mem[i][t])));
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      F sum;
      if constexpr (kTotalsInRegs) {
        sum = total[i][t];
      } else {
        sum = V::LoadAligned(total_mem[i][t]);
      }
      y[(t0 + t) * w.rows + r0 + i] = V::ReduceAdd(sum);
    }
  }
}

template <class W>
using SmallFn = void (*)(const float*, int64_t, const MatrixWeight&, const typename W::T*, int64_t,
                         bool, float*, const float*, const Fp8PlainBlocks*);
template <class V, class W, int R, size_t... I>
constexpr std::array<SmallFn<W>, sizeof...(I)> SmallRow(std::index_sequence<I...>) {
  return {&SmallBatchTile<V, W, R, static_cast<int>(I) + 1>...};
}
// [TT - 1] for R rows
template <class V, class W, int R>
constexpr std::array<SmallFn<W>, V::kSmallTokens> kSmall =
    SmallRow<V, W, R>(std::make_index_sequence<V::kSmallTokens>());

// Rows [r, r + R) for every token group; group g's packed x at xp + g * group_floats (and its
// x * 2^112 at xsp + g * group_floats when FP8 plain tiles run).
template <class V, class W, int R>
void SmallBatchRowTile(const float* xp, const float* xsp, int64_t group_floats,
                       const TokenGroups& groups, const MatrixWeight& w,
                       const Fp8PlainBlocks* plain, int64_t r, float* y) {
  for (int64_t g = 0; g < groups.n; ++g) {
    kSmall<V, W, R>[groups.tt[g] - 1](xp + g * group_floats, groups.t0[g], w,
                                      static_cast<const typename W::T*>(w.data) + r * w.cols, r,
                                      g == 0, y, xsp ? xsp + g * group_floats : nullptr, plain);
  }
}

template <class V, class W>
void SmallBatchRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                    float* y) {
  constexpr int kWide = V::SmallRowsFor(1), kNarrow = V::SmallRowsFor(V::kSmallTokens);
  const TokenGroups groups(T, V::kSmallTokens);
  const int64_t bc = W::kBlockScaled ? w.block_cols : w.cols;
  int64_t group_floats = 0;
  const float* xp = PackGroups<V>(x, w.cols, bc, groups, &group_floats);
  const bool wide = V::SmallRowsFor(groups.MaxTokens()) == kWide;
  // FP8 plain tiles: x * 2^112 packed alike, unless some |x| >= 2^15.
  const Fp8PlainBlocks* plain = nullptr;
  const float* xsp = nullptr;
  if constexpr (std::is_same_v<W, F8W<V>> && V::kE4m3Plain) {
    plain = PlainBlocksOf<V>(w);
    if (plain != nullptr) {
      thread_local std::vector<float> xs;
      xs.resize(T * w.cols);
      if (V::ScaleForE4m3Plain(x, T * w.cols, xs.data())) {
        int64_t same = 0;
        xsp = PackGroups<V>(xs.data(), w.cols, bc, groups, &same, 1);
      } else {
        plain = nullptr;
      }
    }
  }
  int64_t r = r0;
  if (wide) {
    for (; r + kWide <= r1; r += kWide)
      SmallBatchRowTile<V, W, kWide>(xp, xsp, group_floats, groups, w, plain, r, y);
  } else {
    for (; r + kNarrow <= r1; r += kNarrow)
      SmallBatchRowTile<V, W, kNarrow>(xp, xsp, group_floats, groups, w, plain, r, y);
  }
  for (; r < r1; ++r) SmallBatchRowTile<V, W, 1>(xp, xsp, group_floats, groups, w, plain, r, y);
}

// The T > 1 path of LinearRowsTyped (linear_tiles.h) for dtype decoder W: prompts on the lane-major
// tiles, small steps on the register tiles, FP8 rows the plain map does not cover past
// kSmallFp8ScratchAbove tokens on the decoded-row tile (the f16 remap once per row instead of
// once per token group; docs/PERFORMANCE.md).
template <class V, class W>
void BatchRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1, float* y) {
  if (T >= V::kLaneMinTokens) return PrefillRows<V, W>(x, T, w, r0, r1, y);
  if constexpr (W::kBlockScaled) {
    if (T > V::kSmallFp8ScratchAbove && PlainBlocksOf<V>(w) == nullptr) {
      return DecodedMultiTokenRows<V, W>(x, T, w, r0, r1, y);
    }
  }
  SmallBatchRows<V, W>(x, T, w, r0, r1, y);
}

}  // namespace mimo::cpu
