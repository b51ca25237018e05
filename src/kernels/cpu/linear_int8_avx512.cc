// The int8-activation mode (KernelTable::linear_rows_int8, --precision int8) for int8 weights
// (DType::kInt8) on AVX512_VNNI: each token's activations are quantized once per call by the
// weights' own rule (per 32 columns: scale amax / 127 in fp32, codes rint(x / scale) within
// [-127, 127]), and each 32-column block's integer dot product is exact on vpdpbusd, 64 columns
// (two blocks) per instruction, where the exact kernels spend a decode and four FMAs per 64.
//
// vpdpbusd multiplies unsigned by signed bytes, so the weight codes w are read as u = w ^ 0x80 =
// w + 128 (one xor per 64 bytes) against the activation codes q, and each lane's accumulator
// starts from -128 x the sum of its 4 activation codes (computed once per token):
// sum (w + 128) q - 128 sum q = sum w q, exactly (products fit int16, sums int32).
// Per 64-column chunk and row: lanes 0-7 hold block 2c's dot product, 8-15 block 2c + 1's; they
// are converted to fp32 and added into the row's running total with one FMA against the product
// of the two blocks' scales (weight scale x activation scale, one fp32 multiply), a lane-pair
// permute of a 16-block scale vector. One ReduceAdd at the end.
//
// Batch invariance within the mode: a (row, token) is reduced in exactly that order whatever T
// and whichever tile (R rows x TT tokens) runs it: the integer parts are exact, and the fp32 steps
// are the same operations on the same operands. Weights of any other dtype run the exact kernels.
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_*; GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"

#define MIMO_VNNI_TARGET __attribute__((target("avx512vnni")))

namespace mimo::avx512 {
namespace {

constexpr int64_t kBlock = 32;   // columns per scale (the int8 weight format's block)
constexpr int64_t kChunk = 64;   // columns per vpdpbusd: two blocks
constexpr int64_t kGroup = 8;    // chunks sharing one 16-block scale vector
constexpr int kMaxRows = 4;      // rows per tile
constexpr int kMaxTokens = 4;    // tokens per tile (R x TT totals in registers)
constexpr int64_t kPrefetchBytes = 8 << 10;

// A step's activations, quantized per token.
struct QuantizedX {
  int64_t chunks = 0;         // ceil(cols / 64)
  int64_t blocks_padded = 0;  // ceil(cols / 32) rounded up to whole groups of 16 blocks
  std::vector<int8_t> q;      // [T, chunks * 64] codes, +0 past cols
  std::vector<int32_t> init;  // [T, chunks, 16] -128 x the sum of each lane's 4 codes
  std::vector<float> scale;   // [T, blocks_padded] per-block scale, 0 past the row's blocks
};

__mmask16 Mask16(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}
__mmask64 Mask64(int64_t n) { return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1; }

// Codes of one block of n <= 32 values: scale amax / 127 (1 for an all-zero block, NaN when a
// value is not finite, so the outputs it feeds are NaN as in the exact mode).
MIMO_VNNI_TARGET float QuantizeBlock(const float* x, int64_t n, int8_t* q) {
  const __mmask16 m0 = Mask16(n), m1 = Mask16(n - 16 > 0 ? n - 16 : 0);
  const __m512 a = _mm512_maskz_loadu_ps(m0, x), b = _mm512_maskz_loadu_ps(m1, x + 16);
  // QNaN, SNaN, +inf, -inf
  if ((_mm512_fpclass_ps_mask(a, 0x99) | _mm512_fpclass_ps_mask(b, 0x99)) != 0) {
    std::memset(q, 0, kBlock);
    return NAN;
  }
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float s = amax > 0 ? amax / 127.0f : 1.0f;
  const __m512 sv = _mm512_set1_ps(s), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  auto codes = [&](__m512 v) {
    const __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v, sv),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi)));
  };
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), codes(a));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), codes(b));
  return s;
}

MIMO_VNNI_TARGET void Quantize(const float* x, int64_t T, int64_t cols, QuantizedX* out) {
  const int64_t nb = (cols + kBlock - 1) / kBlock;
  out->chunks = (cols + kChunk - 1) / kChunk;
  out->blocks_padded = (nb + 2 * kGroup - 1) / (2 * kGroup) * (2 * kGroup);
  const int64_t qc = out->chunks * kChunk;
  out->q.assign(static_cast<size_t>(T * qc), 0);
  out->init.resize(static_cast<size_t>(T * out->chunks * 16));
  out->scale.assign(static_cast<size_t>(T * out->blocks_padded), 0.0f);
  const __m512i u128 = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t t = 0; t < T; ++t) {
    int8_t* q = out->q.data() + t * qc;
    float* s = out->scale.data() + t * out->blocks_padded;
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t n = std::min(kBlock, cols - j * kBlock);
      alignas(64) int8_t codes[kBlock];
      s[j] = QuantizeBlock(x + t * cols + j * kBlock, n, codes);
      std::memcpy(q + j * kBlock, codes, static_cast<size_t>(n));
    }
    int32_t* init = out->init.data() + t * out->chunks * 16;
    for (int64_t c = 0; c < out->chunks; ++c) {
      const __m512i qv = _mm512_loadu_si512(q + c * kChunk);
      const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, qv);
      _mm512_storeu_si512(init + c * 16, _mm512_sub_epi32(_mm512_setzero_si512(), sum));
    }
  }
}

// Lane-pair index of chunk c % 8 of a group: lanes 0-7 block 2c, 8-15 block 2c + 1.
const std::array<std::array<int32_t, 16>, kGroup> kPairIndex = [] {
  std::array<std::array<int32_t, 16>, kGroup> t{};
  for (int c = 0; c < kGroup; ++c)
    for (int l = 0; l < 16; ++l) t[c][l] = 2 * c + (l >= 8);
  return t;
}();

// y[t0 + t, r0 + i] for i < R, t < TT.
template <int R, int TT>
MIMO_VNNI_TARGET void Int8Tile(const QuantizedX& qx, int64_t t0, const MatrixWeight& w, int64_t r0,
                               float* y) {
  const int64_t cols = w.cols, chunks = qx.chunks, nb = w.scale_cols;
  const int64_t qc = chunks * kChunk;
  const int64_t ahead = std::max<int64_t>(1, (kPrefetchBytes + R * cols - 1) / (R * cols)) * R;
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
  const int32_t* init[TT];
  const float* sx[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) {
    q[t] = qx.q.data() + (t0 + t) * qc;
    init[t] = qx.init.data() + (t0 + t) * chunks * 16;
    sx[t] = qx.scale.data() + (t0 + t) * qx.blocks_padded;
  }
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 total[R][TT];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) total[i][t] = _mm512_setzero_ps();
  for (int64_t g = 0; g < chunks; g += kGroup) {
    // The products of weight and activation scales of blocks [2g, 2g + 16).
    const int64_t b0 = 2 * g;
    const __mmask16 bm = Mask16(nb - b0);
    alignas(64) float scales[R][TT][16];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512 s = _mm512_maskz_loadu_ps(bm, sw[i] + b0);
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t)
        _mm512_store_ps(scales[i][t], _mm512_mul_ps(s, _mm512_loadu_ps(sx[t] + b0)));
    }
    const int64_t ge = std::min(chunks, g + kGroup);
    for (int64_t c = g; c < ge; ++c) {
      const int64_t c0 = c * kChunk;
      const __mmask64 wm = Mask64(cols - c0);
      __m512i u[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(next[i] + c0), _MM_HINT_T1);
        u[i] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(wm, row[i] + c0), flip);
      }
      const __m512i idx = _mm512_loadu_si512(kPairIndex[c - g].data());
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) {
        const __m512i qv = _mm512_loadu_si512(q[t] + c0);
        const __m512i iv = _mm512_loadu_si512(init[t] + c * 16);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
          const __m512 d = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(iv, u[i], qv));
          const __m512 sc = _mm512_permutexvar_ps(idx, _mm512_load_ps(scales[i][t]));
          total[i][t] = _mm512_fmadd_ps(d, sc, total[i][t]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) y[(t0 + t) * w.rows + r0 + i] = _mm512_reduce_add_ps(total[i][t]);
}

using TileFn = void (*)(const QuantizedX&, int64_t, const MatrixWeight&, int64_t, float*);
template <int R, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> TileRow(std::index_sequence<I...>) {
  return {&Int8Tile<R, static_cast<int>(I) + 1>...};
}
// [R - 1][TT - 1]
constexpr std::array<std::array<TileFn, kMaxTokens>, kMaxRows> kTiles = {
    TileRow<1>(std::make_index_sequence<kMaxTokens>()),
    TileRow<2>(std::make_index_sequence<kMaxTokens>()),
    TileRow<3>(std::make_index_sequence<kMaxTokens>()),
    TileRow<4>(std::make_index_sequence<kMaxTokens>())};

}  // namespace

MIMO_VNNI_TARGET void LinearRowsInt8(const float* x, int64_t T, const MatrixWeight& w,
                                     int64_t row_begin, int64_t row_end, float* y) {
  if (w.dtype != DType::kInt8) return LinearRows(x, T, w, row_begin, row_end, y);
  MIMO_CHECK(w.block_cols == kBlock, "LinearRowsInt8: block_cols %lld",
             static_cast<long long>(w.block_cols));
  thread_local QuantizedX qx;
  Quantize(x, T, w.cols, &qx);
  // Balanced token groups of at most kMaxTokens; each row tile runs every group while its rows
  // are in L1.
  const int64_t groups = (T + kMaxTokens - 1) / kMaxTokens;
  for (int64_t r = row_begin; r < row_end; r += kMaxRows) {
    const int n = static_cast<int>(std::min<int64_t>(kMaxRows, row_end - r));
    for (int64_t g = 0, t0 = 0; g < groups; ++g) {
      const int64_t tt = (T - t0) / (groups - g);
      kTiles[n - 1][tt - 1](qx, t0, w, r, y);
      t0 += tt;
    }
  }
}

MIMO_VNNI_TARGET bool ProbeVnni() {
  volatile int32_t in[2] = {200, -3};
  // Every lane: 4 x (200 x -3) + 7 = -2393.
  const __m512i a = _mm512_set1_epi8(static_cast<char>(in[0]));
  const __m512i b = _mm512_set1_epi8(static_cast<char>(in[1]));
  const __m512i r = _mm512_dpbusd_epi32(_mm512_set1_epi32(7), a, b);
  return _mm512_reduce_add_epi32(r) == 16 * -2393;
}

}  // namespace mimo::avx512
