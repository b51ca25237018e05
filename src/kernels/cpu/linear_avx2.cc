// Linear (y = x W^T) for AVX2+FMA+F16C, weights F32/BF16/F16/F8E4M3/MXFP4: the width-templated
// body of linear_tiles.h at 8 lanes (GEMV tiles for T == 1; MultiTile, a 4-row x 3-token register
// tile over decoded rows, for MXFP4 and for FP8 rows without a plain map above 8 tokens), small
// steps with weights decoded in registers (SmallTile, 2 <= T < kLaneMinTokens), lane-major
// prompt tiles (T >= kLaneMinTokens), and this width's MXFP4 decoder.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/linear_tiles.h"
#include "kernels/cpu/vec_avx2.h"

namespace mimo::avx2 {
namespace {

// MXFP4 at 8 lanes: codes become 2x their value as int8 through a 16-entry pshufb table, then
// fp32 (exact); the factor 2 is folded into the block's E8M0 scale.
const std::array<float, 256> kE8M0Half = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[e] = E8M0ToF32(static_cast<uint8_t>(e)) * 0.5f;
  return t;
}();

struct Mxfp4Avx2 {
  static constexpr int kVecs = 4;  // a 32-column block in vectors of 8
  static constexpr bool kPermuted = false;  // lanes in column order

  // The 32 codes held by the 16 bytes at p as four vectors (raw units: 2 x the E2M1 value).
  static void DecodeBytes(__m128i bytes, __m256 out[4]) {
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
  void Decode(const uint8_t* p, __m256 out[4]) const {
    DecodeBytes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), out);
  }
  // A block of n < 32 columns: only its ceil(n / 2) bytes are read (into a zeroed copy, the spare
  // high nibble of an odd n cleared), so lanes >= n decode to +0.
  void DecodeTail(const uint8_t* p, int64_t n, __m256 out[4]) const {
    alignas(16) uint8_t buf[16] = {};
    const int64_t bytes = (n + 1) / 2;
    for (int64_t k = 0; k < bytes; ++k) buf[k] = p[k];
    if (n & 1) buf[bytes - 1] &= 0x0f;
    DecodeBytes(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)), out);
  }
  // E8M0 exponent -> block scale in raw units (halved: the decoded codes are doubled).
  static float Scale(uint8_t e) { return kE8M0Half[e]; }
};

struct LinearAvx2 : VecAvx2 {
  static constexpr int kMultiTokens = 3;        // 12 accumulators of the 16 ymm registers
  static constexpr int64_t kPrefetchBytes = 0;  // prefetch the next tile only
  static constexpr const char* kName = "avx2";
  using Mx = Mxfp4Avx2;
  // T > 1: prompts on lane-major tiles, small steps on SmallTile (MultiTile for some FP8).
  template <class W>
  static void BatchRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                        float* y);
};

// ---- Prompts (T >= kLaneMinTokens): lane-major tiles -------------------------------------------
// Every (row, token) must reduce exactly as GemvTile reduces it for one token: 8 lane sums, lane
// l over the columns l, l + 8, ... of each scale block in column order (the block's last step
// zero-padded), each block's sum scaled by one FMA into the lane's running total (unscaled: one
// block, total = +0 + sum), then VecAvx2::ReduceAdd over the lanes. The 8 lane sums are 8
// independent small GEMMs, so the prompt tile runs one lane at a time as an outer product: lane
// l, 6 rows x 16 tokens, each FMA multiplies one broadcast weight by 8 tokens' x (12
// accumulators, no horizontal sum per output); the lanes are summed at the end by vector adds in
// ReduceAdd's pairs (LaneReduce), 8 tokens at a time. linear_avx512.cc's PrefillRows is the same
// design at 16 lanes; the 4 x 3 inner-product tile (MultiTile) this replaces for prompts paid a
// horizontal sum per output and per FP8 block a total in memory for each of its 12 outputs.
// Layouts (Sp = the blocks' steps, rounded up to 8):
//   xt      [token groups][8 lanes][Sp steps][16 tokens]   x of one token chunk, 0-padded
//   scratch [8 lanes][block rows][Sp steps]               decoded raw weights, 0-padded
//   sums    [block rows][8 lanes][16 tokens]              one group's per-lane totals (FP8: the
//                                                          running totals, updated per block)
constexpr int64_t kLaneMinTokens = 16;            // below: the MultiTile path
constexpr int kLaneTokens = 16;                   // tokens per group: two ymm
constexpr int kLaneRows = 6;                      // 12 accumulators + 2 x + 1 broadcast weight
constexpr int64_t kLaneScratchBytes = 192 << 10;  // decoded rows of one row block (in L2)
constexpr int64_t kLaneXBytes = 1 << 20;          // packed x of one token chunk (L2 + L3)

// out[l][k] = in[k][l] for an 8 x 8 block of floats.
inline void Transpose8(const __m256 (&in)[8], __m256 (&out)[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(in[2 * i], in[2 * i + 1]);
  }
  // u[4h + m], 128-bit half q: column 4q + m of rows 4h .. 4h + 3.
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    u[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    out[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
    out[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
  }
}

using LaneSteps = cpu::LaneSteps<8>;

// Tokens [t0, t0 + n) (n <= 16) of x [.., cols] as one xt group [8][Sp][16]: per step and 8
// tokens, a transpose of their 8-column vectors; missing tokens and padding steps are +0.
void PackLaneGroup(const float* x, int64_t cols, int64_t bc, int64_t padded, int64_t t0, int64_t n,
                   float* xt) {
  int64_t steps = 0;
  cpu::ForEachStep<8>(cols, bc, [&](int64_t s, int64_t c, int64_t cn) {
    for (int h = 0; h * 8 < n; ++h) {
      __m256 in[8], out[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const int64_t t = 8 * h + i;
        const float* p = x + (t0 + t) * cols + c;
        in[i] = t >= n ? _mm256_setzero_ps() : cn == 8 ? _mm256_loadu_ps(p) : VecAvx2::LoadN(p, cn);
      }
      Transpose8(in, out);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) _mm256_store_ps(xt + (l * padded + s) * 16 + 8 * h, out[l]);
    }
    if (n <= 8) {  // the group's second half: no tokens
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l)
        _mm256_store_ps(xt + (l * padded + s) * 16 + 8, _mm256_setzero_ps());
    }
    steps = s + 1;
  });
  for (int l = 0; l < 8; ++l) {
    std::memset(xt + (l * padded + steps) * 16, 0, (padded - steps) * 16 * sizeof(float));
  }
}

// Row r of w decoded to raw units: dst[l * lane_stride + s] = column l of step s (s < Sp).
// FP8 blocks the plain map (GemvTile's) calls plain for the row take the three-op decode times
// 2^112: 2^-120 x the value times a power of two is exactly the f16 route's 2^-8 x the value,
// so the scratch holds the same floats either way.
template <class W>
void DecodeLaneRow(const MatrixWeight& w, int64_t r, int64_t bc, int64_t lane_stride, float* dst) {
  const auto* row = static_cast<const typename W::T*>(w.data) + r * w.cols;
  __m256 in[8], out[8];
  if (bc % 8 == 0 && w.cols % 8 == 0) {  // every step whole: step s is columns 8 s ..
    const int64_t steps = w.cols / 8;
    [[maybe_unused]] const Fp8PlainBlocks* plain = nullptr;
    if constexpr (std::is_same_v<W, cpu::F8W<LinearAvx2>>) {
      // Plain blocks are whole 64-byte lines; with bc % 64 == 0 so is each 64-column step group.
      if (bc % 64 == 0) plain = cpu::PlainBlocksOf<LinearAvx2>(w);
    }
    for (int64_t s0 = 0; s0 < steps; s0 += 8) {
      const int64_t n = std::min<int64_t>(8, steps - s0);
      if constexpr (std::is_same_v<W, cpu::F8W<LinearAvx2>>) {
        if (plain != nullptr && n == 8 && plain->PlainRows(r, 1, 8 * s0 / bc)) {
          const __m256 k = _mm256_set1_ps(0x1p112f);
#pragma GCC unroll 8
          for (int j = 0; j < 8; ++j) in[j] = LinearAvx2::LoadE4m3Plain(row + 8 * (s0 + j)) * k;
          Transpose8(in, out);
#pragma GCC unroll 8
          for (int l = 0; l < 8; ++l) _mm256_storeu_ps(dst + l * lane_stride + s0, out[l]);
          continue;
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) in[j] = j < n ? W::Load(row + 8 * (s0 + j)) : _mm256_setzero_ps();
      Transpose8(in, out);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) _mm256_storeu_ps(dst + l * lane_stride + s0, out[l]);
    }
    return;
  }
  int k = 0;
  auto flush = [&](int64_t s0) {  // in[0 .. k) are steps s0 .. s0 + k
    for (int j = k; j < 8; ++j) in[j] = _mm256_setzero_ps();
    Transpose8(in, out);
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) _mm256_storeu_ps(dst + l * lane_stride + s0, out[l]);
    k = 0;
  };
  int64_t s0 = 0;
  cpu::ForEachStep<8>(w.cols, bc, [&](int64_t s, int64_t c, int64_t n) {
    in[k++] = n == 8 ? W::Load(row + c) : W::LoadN(row + c, n);
    if (k == 8) {
      flush(s0);
      s0 = s + 1;
    }
  });
  if (k > 0) flush(s0);
}

// Lane l of R rows x 8 NV tokens: wl = the first row's lane-l steps (row stride wstride),
// xl = the group's xt + l * Sp * 16, scales [R][nb] (FP8: each block's scale x kScaleFactor, the
// factor GemvTile applies); writes the lane's totals to sums + i * 8 * 16 (+ 8 v). FP8's running
// totals live on the stack (12 accumulators + 12 totals do not fit in 16 ymm), touched once per
// block; everything the loops read is copied to locals first, since a store through __m256
// (may_alias) would make GCC reload it.
template <int R, int NV, bool kScaled>
void LaneTile(const float* wl, int64_t wstride, const float* xl, const LaneSteps& ls,
              const float* scales, float* sums) {
  const int64_t nb = ls.nb, full = ls.full, last = ls.last;
  const float* w[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) w[i] = wl + i * wstride;
  __m256 total[R][NV];  // unscaled: one block, total = +0 + its sum
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) total[i][v] = _mm256_setzero_ps();
  int64_t s = 0;
  for (int64_t j = 0; j < nb; ++j) {
    const int64_t se = s + (j + 1 < nb ? full : last);
    __m256 acc[R][NV];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
    for (; s < se; ++s) {
      __m256 xv[NV];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) xv[v] = _mm256_load_ps(xl + s * 16 + 8 * v);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256 wv = _mm256_broadcast_ss(w[i] + s);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(wv, xv[v], acc[i][v]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      if constexpr (kScaled) {
        const __m256 sv = _mm256_set1_ps(scales[i * nb + j]);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) total[i][v] = _mm256_fmadd_ps(acc[i][v], sv, total[i][v]);
      } else {
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) total[i][v] = _mm256_add_ps(_mm256_setzero_ps(), acc[i][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_store_ps(sums + i * 8 * 16 + 8 * v, total[i][v]);
}

using LaneFn = void (*)(const float*, int64_t, const float*, const LaneSteps&, const float*,
                        float*);
template <int NV, bool kScaled, size_t... I>
constexpr std::array<LaneFn, sizeof...(I)> LaneRow(std::index_sequence<I...>) {
  return {&LaneTile<static_cast<int>(I) + 1, NV, kScaled>...};
}
// [NV - 1][R - 1]
template <bool kScaled>
constexpr std::array<std::array<LaneFn, kLaneRows>, 2> kLaneTiles = {
    LaneRow<1, kScaled>(std::make_index_sequence<kLaneRows>()),
    LaneRow<2, kScaled>(std::make_index_sequence<kLaneRows>())};

// 8 tokens' outputs from their 8 lane totals (lanes + l * 16 = lane l's totals of the 8 tokens):
// the vertical form of VecAvx2::ReduceAdd, same pairs in the same order (lanes l + (l + 4), then
// {0, 2} and {1, 3}, then those two), so the same bits.
inline __m256 LaneReduce(const float* lanes) {
  __m256 h4[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    h4[i] = _mm256_add_ps(_mm256_load_ps(lanes + i * 16), _mm256_load_ps(lanes + (4 + i) * 16));
  return _mm256_add_ps(_mm256_add_ps(h4[0], h4[2]), _mm256_add_ps(h4[1], h4[3]));
}

// A token group's outputs from its lane sums [nr][8][16]: rows [rb, rb + nr) x tokens [t0, t0 +
// gt) of y [.., rows], each LaneReduce, 8 rows x 8 tokens at a time transposed into token rows:
// one store per token and 8 rows, not 8 stores a whole output row apart.
void StoreLaneOutputs(const float* sums, int64_t nr, int nv, int64_t gt, int64_t t0, int64_t rows,
                      int64_t rb, float* y) {
  for (int64_t i0 = 0; i0 < nr; i0 += 8) {
    const int64_t n_rows = std::min<int64_t>(8, nr - i0);
    for (int v = 0; v < nv; ++v) {
      __m256 by_row[8], by_token[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        by_row[k] = k < n_rows ? LaneReduce(sums + (i0 + k) * 8 * 16 + 8 * v) : _mm256_setzero_ps();
      }
      Transpose8(by_row, by_token);
      const int64_t n = std::min<int64_t>(8, gt - 8 * v);
      float* out = y + (t0 + 8 * v) * rows + rb + i0;
      if (n_rows == 8) {
        for (int64_t t = 0; t < n; ++t) _mm256_storeu_ps(out + t * rows, by_token[t]);
      } else {
        for (int64_t t = 0; t < n; ++t) VecAvx2::StoreN(out + t * rows, by_token[t], n_rows);
      }
    }
  }
}

struct alignas(32) Vec8 {  // one packed vector; std::vector<Vec8> is 32-byte aligned
  float v[8];
};

template <class W>
void PrefillRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                 float* y) {
  constexpr bool kScaled = W::kBlockScaled;
  const int64_t cols = w.cols;
  const int64_t bc = kScaled ? w.block_cols : cols;
  const LaneSteps ls(cols, bc);
  const int64_t sp = ls.padded;
  const int64_t group_floats = 8 * sp * kLaneTokens;
  // Tokens per chunk (whole groups) and rows per block (whole tiles) within their byte budgets.
  const int64_t chunk = kLaneTokens * std::clamp<int64_t>(kLaneXBytes / (group_floats * 4), 1, 8);
  const int64_t block_rows =
      kLaneRows * std::clamp<int64_t>(kLaneScratchBytes / (8 * sp * 4 * kLaneRows), 1, 4);
  thread_local std::vector<Vec8> xt_buf, scratch_buf, sums_buf;
  xt_buf.resize(chunk / kLaneTokens * group_floats / 8);
  scratch_buf.resize(block_rows * sp);  // [8][block_rows][sp] floats = block_rows * sp vectors
  sums_buf.resize(block_rows * 8 * kLaneTokens / 8);
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
        const int nv = gt > 8 ? 2 : 1;
        const float* xg = xt + g * group_floats;
        for (int l = 0; l < 8; ++l) {
          for (int64_t i = 0; i < nr; i += kLaneRows) {
            const int rt = static_cast<int>(std::min<int64_t>(kLaneRows, nr - i));
            kLaneTiles<kScaled>[nv - 1][rt - 1](scratch + (l * block_rows + i) * sp, sp,
                                                xg + l * sp * 16, ls, block_scales + i * ls.nb,
                                                sums + i * 8 * 16 + l * 16);
          }
        }
        StoreLaneOutputs(sums, nr, nv, gt, tc + g * kLaneTokens, w.rows, rb, y);
      }
    }
  }
}

// ---- Small steps (2 <= T < kLaneMinTokens): weights decoded in registers --------------------
// The x vectors of tokens [t0, t0 + tt) in the order the tile consumes them: per scale block,
// 8-column steps, each step's tt vectors adjacent, a block's last step zero-padded.
// xp [steps, tt, 8]
void PackSmall(const float* x, int64_t cols, int64_t bc, int64_t t0, int64_t tt, float* xp) {
  for (int64_t cb = 0; cb < cols; cb += bc) {
    const int64_t ce = std::min(cb + bc, cols);
    for (int64_t c = cb; c < ce; c += 8) {
      for (int64_t t = 0; t < tt; ++t, xp += 8) {
        const float* p = x + (t0 + t) * cols + c;
        _mm256_store_ps(xp, ce - c >= 8 ? _mm256_loadu_ps(p) : VecAvx2::LoadN(p, ce - c));
      }
    }
  }
}

constexpr int kSmallRows = 3;  // 3 x 4 accumulators + 3 weights of the 16 ymm
constexpr int kSmallTokens = 4;

// y[t0 + t, r0 + i] for i < R, t < TT: each weight step decoded once in registers for all TT
// tokens, in GemvTile's order (per block 8 lane sums, the block scale by one FMA into the
// running total, ReduceAdd at the end), so the bits are the GEMV's.
// FP8 plain tiles: xsp is the same packing of x x 2^112 (nullptr: none), against which a block the
// map calls plain for these rows is decoded by LoadE4m3Plain (GemvTile's plain products).
template <class W, int R, int TT>
void SmallTile(const float* xp, int64_t t0, const MatrixWeight& w, int64_t r0,
               const Fp8PlainBlocks* plain, const float* xsp, float* y) {
  using T = typename W::T;
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  const T* row[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) row[i] = static_cast<const T*>(w.data) + (r0 + i) * cols;
  [[maybe_unused]] const float* scales[R];
  cpu::ScaleRows<W, R>(w, r0, scales);
  [[maybe_unused]] const float* const xp0 = xp;
  __m256 total[R][TT];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) total[i][t] = _mm256_setzero_ps();
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    __m256 acc[R][TT];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int t = 0; t < TT; ++t) acc[i][t] = _mm256_setzero_ps();
    auto step = [&](const __m256(&wv)[R], const float* xv_at) {
#pragma GCC unroll 4
      for (int t = 0; t < TT; ++t) {
        const __m256 xv = _mm256_load_ps(xv_at + 8 * t);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) acc[i][t] = _mm256_fmadd_ps(wv[i], xv, acc[i][t]);
      }
    };
    int64_t c = cb;
    if constexpr (W::kBlockScaled) {
      if (xsp != nullptr && plain->PlainRows(r0, R, j)) {  // whole lines, no special code
        for (; c < ce; c += 8, xp += 8 * TT) {
          __m256 wv[R];
#pragma GCC unroll 4
          for (int i = 0; i < R; ++i) wv[i] = LinearAvx2::LoadE4m3Plain(row[i] + c);
          step(wv, xsp + (xp - xp0));
        }
      }
    }
    for (; c + 8 <= ce; c += 8, xp += 8 * TT) {
      __m256 wv[R];
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) wv[i] = W::Load(row[i] + c);
      step(wv, xp);
    }
    if (c < ce) {
      __m256 wv[R];
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) wv[i] = W::LoadN(row[i] + c, ce - c);
      step(wv, xp);
      xp += 8 * TT;
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
      for (int t = 0; t < TT; ++t) {
        if constexpr (W::kBlockScaled) {
          total[i][t] = _mm256_fmadd_ps(acc[i][t], _mm256_set1_ps(scales[i][j] * W::kScaleFactor),
                                        total[i][t]);
        } else {
          total[i][t] = _mm256_add_ps(total[i][t], acc[i][t]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < TT; ++t) y[(t0 + t) * w.rows + r0 + i] = VecAvx2::ReduceAdd(total[i][t]);
}

template <class W>
using SmallFn = void (*)(const float*, int64_t, const MatrixWeight&, int64_t, const Fp8PlainBlocks*,
                         const float*, float*);
template <class W, int R, size_t... I>
constexpr std::array<SmallFn<W>, sizeof...(I)> SmallRow(std::index_sequence<I...>) {
  return {&SmallTile<W, R, static_cast<int>(I) + 1>...};
}
// [R - 1][TT - 1]
template <class W>
constexpr std::array<std::array<SmallFn<W>, kSmallTokens>, kSmallRows> kSmallTiles = {
    SmallRow<W, 1>(std::make_index_sequence<kSmallTokens>()),
    SmallRow<W, 2>(std::make_index_sequence<kSmallTokens>()),
    SmallRow<W, 3>(std::make_index_sequence<kSmallTokens>())};

template <class W>
void SmallStepRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                   float* y) {
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  int64_t steps = 0;
  for (int64_t cb = 0; cb < cols; cb += bc) steps += (std::min(bc, cols - cb) + 7) / 8;
  // FP8 plain tiles: x x 2^112 packed alike, unless some |x| >= 2^15.
  const Fp8PlainBlocks* plain = nullptr;
  if constexpr (W::kBlockScaled) plain = cpu::PlainBlocksOf<LinearAvx2>(w);
  thread_local std::vector<float> xs;
  thread_local std::vector<Vec8> xsp_buf;
  if (plain != nullptr) {
    xs.resize(T * cols);
    if (VecAvx2::ScaleForE4m3Plain(x, T * cols, xs.data())) {
      xsp_buf.resize(steps * T);
    } else {
      plain = nullptr;
    }
  }
  // Token groups of at most kSmallTokens, as even as possible (T = 10: 3 + 3 + 4, not 4 + 4 + 2).
  const int64_t groups = (T + kSmallTokens - 1) / kSmallTokens;
  thread_local std::vector<Vec8> xp_buf;
  xp_buf.resize(steps * T);
  int64_t g_t0[kLaneMinTokens], g_tt[kLaneMinTokens];
  for (int64_t g = 0, t0 = 0; g < groups; ++g) {
    g_tt[g] = (T - t0) / (groups - g);
    g_t0[g] = t0;
    PackSmall(x, cols, bc, t0, g_tt[g], xp_buf[steps * t0].v);
    if (plain != nullptr) PackSmall(xs.data(), cols, bc, t0, g_tt[g], xsp_buf[steps * t0].v);
    t0 += g_tt[g];
  }
  for (int64_t r = r0; r < r1; r += kSmallRows) {
    const int n = static_cast<int>(std::min<int64_t>(kSmallRows, r1 - r));
    for (int64_t g = 0; g < groups; ++g) {
      kSmallTiles<W>[n - 1][g_tt[g] - 1](xp_buf[steps * g_t0[g]].v, g_t0[g], w, r, plain,
                                         plain ? xsp_buf[steps * g_t0[g]].v : nullptr, y);
    }
  }
}

template <class W>
void LinearAvx2::BatchRows(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                           float* y) {
  if (T < kLaneMinTokens) {
    // FP8 rows the map does not cover take the f16 remap once per token group here; past two
    // groups the scratch tile, which decodes each row once, is faster for them
    // (docs/PERFORMANCE.md).
    if constexpr (W::kBlockScaled) {
      if (T > 2 * kSmallTokens && cpu::PlainBlocksOf<LinearAvx2>(w) == nullptr) {
        return cpu::DecodedMultiTokenRows<LinearAvx2, W>(x, T, w, r0, r1, y);
      }
    }
    return SmallStepRows<W>(x, T, w, r0, r1, y);
  }
  PrefillRows<W>(x, T, w, r0, r1, y);
}

}  // namespace

void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y) {
  cpu::LinearRowsFor<LinearAvx2>(x, T, w, row_begin, row_end, y);
}

}  // namespace mimo::avx2
