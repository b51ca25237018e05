// The Linear lane-major prompt tiles (T >= V::kLaneMinTokens), written once for any vector width:
// linear_avx2.cc instantiates them at 8 lanes, linear_avx512.cc at 16 (and the bf16 GEMM,
// gemm_bf16.h, reuses their transposes and output stores). Only ops of the vector type V are
// used (vec_avx2.h lists them), no intrinsics.
//
// Every (row, token) must reduce exactly as GemvTile (linear_tiles.h) reduces it for one token:
// kLanes lane sums, lane l over the columns l, l + kLanes, ... of each scale block in column order
// (the block's last step zero-padded), each block's sum scaled by one FMA into the lane's running
// total (unscaled: one block, total = +0 + sum), then V::ReduceAdd over the lanes. The kLanes lane
// sums are kLanes independent small GEMMs, so the prompt tile runs one lane at a time as an outer
// product: lane l, R rows x 2 kLanes tokens, each FMA multiplies one broadcast weight by kLanes
// tokens' x (2 R accumulators, no horizontal sum per output); the lanes are summed at the end by
// vector adds in ReduceAdd's halving order (LaneReduce), kLanes tokens at a time. A lane's x slice
// of a token group stays in L1 for a whole block of rows, whose decoded weights stream from an L2
// scratch. The inner-product tiles this replaced paid one horizontal sum per output and read every
// token's x from L2 once per 3-4 rows (docs/PERFORMANCE.md, issue 31).
// Layouts (L = kLanes, Sp = the blocks' steps rounded up to L):
//   xt      [token groups][L lanes][Sp steps][2 L tokens]   x of one token chunk, 0-padded
//   scratch [L lanes][block rows][Sp steps]                decoded raw weights, 0-padded
// (lane-major so that a tile's rows are adjacent: rows L Sp floats apart would all fall in one L1
// set whenever Sp is a multiple of 64)
//   sums    [block rows][L lanes][2 L tokens]              one group's per-lane totals
//
// V's Linear tuning read here (linear_avx2.cc, linear_avx512.cc):
//   kLaneMinTokens                      the smallest T that runs here
//   kLaneRowsUnscaled, kLaneRowsScaled  rows per tile (2 R accumulators, + 2 R totals if scaled)
//   kLaneScratchBytes, kLaneXBytes      byte budgets of a row block's scratch and a token chunk
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/matrix_weight.h"
#include "kernels/cpu/linear_tiles.h"

namespace mimo::cpu {

// One vector's worth of floats (or bf16 pairs); std::vector<Lanes<...>> is aligned for
// V::LoadAligned / StoreAligned.
template <class E, int kLanes>
struct alignas(sizeof(E) * kLanes) Lanes {
  E v[kLanes];
};

// kLanes tokens' outputs from their kLanes lane totals (lane l's totals of those tokens at
// lanes + l * stride): the vertical form of V::ReduceAdd, same pairs in the same order (lane i +
// lane i + n / 2 while n > 1), so the same bits.
template <class V>
inline typename V::F LaneReduce(const float* lanes, int64_t stride) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes;
  F h[kLanes];
#pragma GCC unroll 16
  for (int i = 0; i < kLanes / 2; ++i) {
    h[i] = V::LoadAligned(lanes + i * stride) + V::LoadAligned(lanes + (i + kLanes / 2) * stride);
  }
#pragma GCC unroll 8
  for (int n = kLanes / 2; n > 1; n /= 2) {
#pragma GCC unroll 8
    for (int i = 0; i < n / 2; ++i) h[i] = h[i] + h[i + n / 2];
  }
  return h[0];
}

// A token group's outputs from its lane sums [nr][kLanes][2 kLanes]: rows [rb, rb + nr) x tokens
// [t0, t0 + gt) of y [.., rows], each LaneReduce (kScale: times `scale`, as the bf16 mode's
// scalar path multiplies), kLanes rows x kLanes tokens at a time transposed into token rows: one
// store per token and kLanes rows, not kLanes stores a whole output row apart.
template <class V, bool kScale>
void StoreLaneOutputs(const float* sums, int64_t nr, int nv, int64_t gt, int64_t t0, float scale,
                      int64_t rows, int64_t rb, float* y) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes, kTokens = 2 * kLanes;
  const F sv = V::Set1(scale);
  for (int64_t i0 = 0; i0 < nr; i0 += kLanes) {
    const int64_t n_rows = std::min<int64_t>(kLanes, nr - i0);
    for (int v = 0; v < nv; ++v) {
      F by_row[kLanes], by_token[kLanes];
#pragma GCC unroll 16
      for (int k = 0; k < kLanes; ++k) {
        if (k >= n_rows) {
          by_row[k] = V::Zero();
          continue;
        }
        by_row[k] = LaneReduce<V>(sums + (i0 + k) * kLanes * kTokens + kLanes * v, kTokens);
        if constexpr (kScale) by_row[k] = sv * by_row[k];
      }
      V::Transpose(by_row, by_token);
      const int64_t n = std::min<int64_t>(kLanes, gt - kLanes * v);
      float* out = y + (t0 + kLanes * v) * rows + rb + i0;
      if (n_rows == kLanes) {
        for (int64_t t = 0; t < n; ++t) V::Store(out + t * rows, by_token[t]);
      } else {
        for (int64_t t = 0; t < n; ++t) V::StoreN(out + t * rows, by_token[t], n_rows);
      }
    }
  }
}

// Tokens [t0, t0 + n) (n <= 2 kLanes) of x [.., cols] as one xt group [kLanes][Sp][2 kLanes]:
// per step and kLanes tokens, a transpose of their kLanes-column vectors; missing tokens and
// padding steps are +0 (a group of <= kLanes tokens leaves its second half unwritten: the tiles
// do not read it).
template <class V>
void PackLaneGroup(const float* x, int64_t cols, int64_t bc, int64_t padded, int64_t t0, int64_t n,
                   float* xt) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes, kTokens = 2 * kLanes;
  int64_t steps = 0;
  ForEachStep<kLanes>(cols, bc, [&](int64_t s, int64_t c, int64_t cn) {
    for (int h = 0; h * kLanes < n; ++h) {
      F in[kLanes], out[kLanes];
#pragma GCC unroll 16
      for (int i = 0; i < kLanes; ++i) {
        const int64_t t = kLanes * h + i;
        const float* p = x + (t0 + t) * cols + c;
        in[i] = t >= n ? V::Zero() : cn == kLanes ? V::Load(p) : V::LoadN(p, cn);
      }
      V::Transpose(in, out);
#pragma GCC unroll 16
      for (int l = 0; l < kLanes; ++l) {
        V::StoreAligned(xt + (l * padded + s) * kTokens + kLanes * h, out[l]);
      }
    }
    steps = s + 1;
  });
  for (int l = 0; l < kLanes; ++l) {
    std::memset(xt + (l * padded + steps) * kTokens, 0, (padded - steps) * kTokens * sizeof(float));
  }
}

// Row r of w decoded to raw units: dst[l * lane_stride + s] = column l of step s (s < Sp).
// FP8 blocks the plain map (GemvTile's) calls plain for the row take V::LoadE4m3Plain times
// 2^112: 2^-120 x the value times a power of two is exactly the f16 route's 2^-8 x the value, so
// the scratch holds the same floats either way (used where kLanes x kLanes columns, one transpose,
// lie in one scale block).
template <class V, class W>
void DecodeLaneRow(const MatrixWeight& w, int64_t r, int64_t bc, int64_t lane_stride, float* dst) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes;
  const auto* row = static_cast<const typename W::T*>(w.data) + r * w.cols;
  F in[kLanes], out[kLanes];
  auto flush = [&](int64_t s0) {
    V::Transpose(in, out);
#pragma GCC unroll 16
    for (int l = 0; l < kLanes; ++l) V::Store(dst + l * lane_stride + s0, out[l]);
  };
  if (bc % kLanes == 0 && w.cols % kLanes == 0) {  // every step whole: step s is columns L s ..
    const int64_t steps = w.cols / kLanes;
    constexpr bool kPlainDecode = std::is_same_v<W, F8W<V>> && V::kE4m3Plain;
    [[maybe_unused]] const Fp8PlainBlocks* plain = nullptr;
    // A group of kLanes steps (one transpose) lies in one block when bc % (kLanes^2) == 0.
    if constexpr (kPlainDecode) {
      if (bc % (kLanes * kLanes) == 0) plain = PlainBlocksOf<V>(w);
    }
    for (int64_t s0 = 0; s0 < steps; s0 += kLanes) {
      const int64_t n = std::min<int64_t>(kLanes, steps - s0);
      if constexpr (kPlainDecode) {
        if (plain != nullptr && n == kLanes && plain->PlainRows(r, 1, kLanes * s0 / bc)) {
          const F k = V::Set1(0x1p112f);
#pragma GCC unroll 16
          for (int j = 0; j < kLanes; ++j) in[j] = V::LoadE4m3Plain(row + kLanes * (s0 + j)) * k;
          flush(s0);
          continue;
        }
      }
#pragma GCC unroll 16
      for (int j = 0; j < kLanes; ++j) in[j] = j < n ? W::Load(row + kLanes * (s0 + j)) : V::Zero();
      flush(s0);
    }
    return;
  }
  int k = 0;
  int64_t s0 = 0;
  ForEachStep<kLanes>(w.cols, bc, [&](int64_t s, int64_t c, int64_t n) {
    in[k++] = n == kLanes ? W::Load(row + c) : W::LoadN(row + c, n);
    if (k == kLanes) {
      flush(s0);
      k = 0;
      s0 = s + 1;
    }
  });
  if (k > 0) {  // in[0 .. k) are steps s0 .. s0 + k
    for (int j = k; j < kLanes; ++j) in[j] = V::Zero();
    flush(s0);
  }
}

// Lane l of R rows x kLanes NV tokens: wl = the first row's lane-l steps (row stride wstride),
// xl = the group's xt + l * Sp * 2 kLanes, scales [R][nb] (FP8: each block's scale x
// kScaleFactor, the factor GemvTile applies); writes the lane's totals to sums + i * kLanes *
// 2 kLanes (+ kLanes v). Everything the loops read is copied to locals first, since a store
// through a vector pointer (may_alias) would make GCC reload it.
template <class V, int R, int NV, bool kScaled>
void LaneTile(const float* wl, int64_t wstride, const float* xl, const LaneSteps<V::kLanes>& ls,
              const float* scales, float* sums) {
  using F = typename V::F;
  constexpr int kLanes = V::kLanes, kTokens = 2 * kLanes;
  const int64_t nb = ls.nb, full = ls.full, last = ls.last;
  const float* w[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) w[i] = wl + i * wstride;
  F total[kScaled ? R : 1][kScaled ? NV : 1];
  if constexpr (kScaled) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) total[i][v] = V::Zero();
  }
  int64_t s = 0;
  for (int64_t j = 0; j < nb; ++j) {
    const int64_t se = s + (j + 1 < nb ? full : last);
    F acc[R][NV];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = V::Zero();
    for (; s < se; ++s) {
      F xv[NV];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) xv[v] = V::LoadAligned(xl + s * kTokens + kLanes * v);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const F wv = V::Set1(w[i][s]);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[i][v] = V::Fmadd(wv, xv[v], acc[i][v]);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        if constexpr (kScaled) {
          total[i][v] = V::Fmadd(acc[i][v], V::Set1(scales[i * nb + j]), total[i][v]);
        } else {  // one block: total = +0 + its sum
          V::StoreAligned(sums + i * kLanes * kTokens + kLanes * v, V::Zero() + acc[i][v]);
        }
      }
    }
  }
  if constexpr (kScaled) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        V::StoreAligned(sums + i * kLanes * kTokens + kLanes * v, total[i][v]);
      }
  }
}

template <class V>
using LaneFn = void (*)(const float*, int64_t, const float*, const LaneSteps<V::kLanes>&,
                        const float*, float*);
template <class V, int NV, bool kScaled, size_t... I>
constexpr std::array<LaneFn<V>, sizeof...(I)> LaneRow(std::index_sequence<I...>) {
  return {&LaneTile<V, static_cast<int>(I) + 1, NV, kScaled>...};
}
template <class V, bool kScaled>
constexpr int kLaneRows = kScaled ? V::kLaneRowsScaled : V::kLaneRowsUnscaled;
// [NV - 1][R - 1]
template <class V, bool kScaled>
constexpr std::array<std::array<LaneFn<V>, kLaneRows<V, kScaled>>, 2> kLaneTiles = {
    LaneRow<V, 1, kScaled>(std::make_index_sequence<kLaneRows<V, kScaled>>()),
    LaneRow<V, 2, kScaled>(std::make_index_sequence<kLaneRows<V, kScaled>>())};

// Tokens per chunk (whole groups of 2 kLanes) and rows per block (whole tiles of tile_rows)
// within V's byte budgets, for group_bytes of packed x per group and row_bytes of scratch per row.
template <class V>
struct LaneBlocking {
  int64_t chunk, block_rows;
  LaneBlocking(int64_t group_bytes, int64_t row_bytes, int64_t tile_rows)
      : chunk(2 * V::kLanes * std::clamp<int64_t>(V::kLaneXBytes / group_bytes, 1, 8)),
        block_rows(tile_rows *
                   std::clamp<int64_t>(V::kLaneScratchBytes / (row_bytes * tile_rows), 1, 4)) {}
};

// Rows [r0, r1) of y [T, rows] for T >= V::kLaneMinTokens: per token chunk, x [T, cols] packed
// lane-major (PackLaneGroup); per block of rows, each row decoded once into the lane-major scratch
// by decode_row(r, lane_stride, dst) (DecodeLaneRow's layout), with kScaled block j of row r
// scaled by scale_of(r, j) (bc columns a block; unscaled: bc == cols), then every group's lanes
// run on the register tiles and the lane sums are reduced into y. The dtype-specific parts are the
// two callbacks, so FP8, the float dtypes and MXFP4 share one driver.
template <class V, bool kScaled, class DecodeRow, class ScaleOf>
void PrefillRowsWith(const float* x, int64_t T, int64_t rows, int64_t cols, int64_t bc, int64_t r0,
                     int64_t r1, float* y, DecodeRow decode_row, ScaleOf scale_of) {
  constexpr int kLanes = V::kLanes, kTokens = 2 * kLanes;
  constexpr int kR = kLaneRows<V, kScaled>;
  using Vec = Lanes<float, kLanes>;
  const LaneSteps<kLanes> ls(cols, bc);
  const int64_t sp = ls.padded;
  const int64_t group_floats = kLanes * sp * kTokens;
  const LaneBlocking<V> blocking(group_floats * 4, kLanes * sp * 4, kR);
  const int64_t chunk = blocking.chunk, block_rows = blocking.block_rows;
  thread_local std::vector<Vec> xt_buf, scratch_buf, sums_buf;
  xt_buf.resize(chunk / kTokens * group_floats / kLanes);
  scratch_buf.resize(block_rows * sp);  // [L][block_rows][sp] floats = block_rows * sp vectors
  sums_buf.resize(block_rows * kTokens);
  thread_local std::vector<float> scales_buf;  // [block_rows][nb] (block-scaled dtypes)
  scales_buf.resize(kScaled ? block_rows * ls.nb : 0);
  float* block_scales = scales_buf.data();
  float* xt = xt_buf.data()->v;
  float* scratch = scratch_buf.data()->v;
  float* sums = sums_buf.data()->v;
  for (int64_t tc = 0; tc < T; tc += chunk) {
    const int64_t nt = std::min(chunk, T - tc);
    const int64_t groups = (nt + kTokens - 1) / kTokens;
    for (int64_t g = 0; g < groups; ++g) {
      PackLaneGroup<V>(x, cols, bc, sp, tc + g * kTokens,
                       std::min<int64_t>(kTokens, nt - g * kTokens), xt + g * group_floats);
    }
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
      const int64_t nr = std::min(block_rows, r1 - rb);
      for (int64_t i = 0; i < nr; ++i) {
        decode_row(rb + i, block_rows * sp, scratch + i * sp);
        if constexpr (kScaled) {
          for (int64_t j = 0; j < ls.nb; ++j) block_scales[i * ls.nb + j] = scale_of(rb + i, j);
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t gt = std::min<int64_t>(kTokens, nt - g * kTokens);
        const int nv = gt > kLanes ? 2 : 1;
        const float* xg = xt + g * group_floats;
        for (int l = 0; l < kLanes; ++l) {
          for (int64_t i = 0; i < nr; i += kR) {
            const int rt = static_cast<int>(std::min<int64_t>(kR, nr - i));
            kLaneTiles<V, kScaled>[nv - 1][rt - 1](
                scratch + (l * block_rows + i) * sp, sp, xg + l * sp * kTokens, ls,
                block_scales + i * ls.nb, sums + i * kLanes * kTokens + l * kTokens);
          }
        }
        StoreLaneOutputs<V, false>(sums, nr, nv, gt, tc + g * kTokens, 1.0f, rows, rb, y);
      }
    }
  }
}

// PrefillRowsWith for a stored dtype W (F32, BF16, F16, FP8 with its block scales).
template <class V, class W>
void PrefillRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                 float* y) {
  constexpr bool kScaled = W::kBlockScaled;
  const int64_t bc = kScaled ? w.block_cols : w.cols;
  PrefillRowsWith<V, kScaled>(
      x, T, w.rows, w.cols, bc, r0, r1, y,
      [&](int64_t r, int64_t lane_stride, float* dst) {
        DecodeLaneRow<V, W>(w, r, bc, lane_stride, dst);
      },
      [&](int64_t r, int64_t j) {
        return w.scale_inv[w.ScaleRow(r) * w.scale_cols + j] * W::kScaleFactor;
      });
}

// MXFP4 prompts on the same tiles: each row's blocks decoded in the decoder's lane order
// (DecodeMxRow: column order, or the permuted order of Mx::PermuteBlock with x permuted alike and
// both padded with +0 to whole blocks) into one fp32 row, then transposed lane-major as an F32
// row; each 32-column block's sum is scaled by its E8M0 exponent with one FMA. That is the GEMV's
// reduction (MxGemvTileOf: per block kVecs steps from +0, one scaling FMA), so a token's outputs
// are the same bits alone or in a prompt. The multi-token row tiles this replaced paid one
// horizontal sum per output and ran at half the FP8 prompt speed (docs/PERFORMANCE.md).
template <class V>
void MxPrefillRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                   float* y) {
  const int64_t cols =
      V::Mx::kPermuted ? (w.cols + kMxBlock - 1) / kMxBlock * kMxBlock : w.cols;
  thread_local std::vector<float> row_buf;
  row_buf.resize(static_cast<size_t>((w.cols + kMxBlock - 1) / kMxBlock * kMxBlock));
  MatrixWeight row;  // one decoded row as an F32 weight, for DecodeLaneRow
  row.dtype = DType::kF32;
  row.rows = 1;
  row.cols = cols;
  row.data = row_buf.data();
  PrefillRowsWith<V, true>(
      x, T, w.rows, cols, kMxBlock, r0, r1, y,
      [&](int64_t r, int64_t lane_stride, float* dst) {
        DecodeMxRow<V>(w, r, row_buf.data());
        DecodeLaneRow<V, F32W<V>>(row, 0, kMxBlock, lane_stride, dst);
      },
      [&](int64_t r, int64_t j) {
        return V::Mx::Scale(w.scale_e8m0[w.ScaleRow(r) * w.scale_cols + j]);
      });
}

}  // namespace mimo::cpu
