// Linear (y = x W^T) for AVX2+FMA+F16C, weights F32/BF16/F16/F8E4M3.
//
// Design: decode (T == 1) is memory-bound, so each weight row is streamed exactly once and decoded
// in registers (bf16: shift; f16: vcvtph2ps; e4m3: a bit remap to f16 then vcvtph2ps, which also
// gets subnormals right), 4 rows at a time for independent accumulator chains. FP8 block scales
// multiply the per-block partial sums, not every element. Prefill (T > 1) decodes 4 rows once
// into an fp32 scratch and runs a 4-row x 3-token register-tiled micro-kernel over it, so the
// decode cost is paid once per row, not once per token.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mimo::avx2 {
namespace {

constexpr int kRows = 4;    // output rows per register tile
constexpr int kTokens = 3;  // tokens per register tile (T > 1)

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Weight decoders. Load(p) returns 8 weights in "raw" units; Raw(p) one weight in the same units.
// kScaleFactor converts raw units to real ones (the e4m3 -> f16 remap leaves a factor 2^8).
struct F32W {
  using T = float;
  static constexpr bool kBlockScaled = false;
  static constexpr float kScaleFactor = 1.0f;
  static __m256 Load(const T* p) { return _mm256_loadu_ps(p); }
  static float Raw(const T* p) { return *p; }
};

struct BF16W {
  using T = uint16_t;
  static constexpr bool kBlockScaled = false;
  static constexpr float kScaleFactor = 1.0f;
  static __m256 Load(const T* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float Raw(const T* p) { return BF16ToF32(*p); }
};

struct F16W {
  using T = uint16_t;
  static constexpr bool kBlockScaled = false;
  static constexpr float kScaleFactor = 1.0f;
  static __m256 Load(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float Raw(const T* p) { return F16ToF32(*p); }
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
  static float Raw(const T* p) { return F8E4M3ToF32(*p) * (1.0f / 256.0f); }
};

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
      float tail[R] = {};
      for (; c < ce; ++c) {
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) tail[i] += W::Raw(row[i] + c) * x[c];
      }
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
        acc[i] = _mm256_add_ps(acc[i], _mm256_setr_ps(tail[i], 0, 0, 0, 0, 0, 0, 0));
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

// dst[c] = W[r, c] in real units.   dst [cols]
template <class W>
void DecodeRow(const MatrixWeight& w, int64_t r, float* dst) {
  const auto* row = static_cast<const typename W::T*>(w.data) + r * w.cols;
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    const float s = BlockScale<W>(w, r, j);
    const __m256 sv = _mm256_set1_ps(s);
    int64_t c = cb;
    for (; c + 8 <= ce; c += 8) {
      const __m256 v = W::Load(row + c);
      _mm256_storeu_ps(dst + c, W::kBlockScaled ? _mm256_mul_ps(v, sv) : v);
    }
    for (; c < ce; ++c) dst[c] = W::kBlockScaled ? W::Raw(row + c) * s : W::Raw(row + c);
  }
}

// y[t0 + t, r0 + i] = dot(x[t0 + t], wd[i]) for i < R, t < TT.   wd [R, cols] decoded rows.
template <int R, int TT>
void GemmTile(const float* x, int64_t t0, const float* wd, int64_t cols, int64_t rows, int64_t r0,
              float* y) {
  __m256 acc[R][TT];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) acc[i][t] = _mm256_setzero_ps();
  const float* xt[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) xt[t] = x + (t0 + t) * cols;
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
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
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) {
      float s = HorizontalSum(acc[i][t]);
      for (int64_t cc = c; cc < cols; ++cc) s += wd[i * cols + cc] * xt[t][cc];
      y[(t0 + t) * rows + r0 + i] = s;
    }
  }
}

template <int R>
void GemmTokens(const float* x, int64_t T, const float* wd, int64_t cols, int64_t rows, int64_t r0,
                float* y) {
  int64_t t = 0;
  for (; t + kTokens <= T; t += kTokens) GemmTile<R, kTokens>(x, t, wd, cols, rows, r0, y);
  switch (T - t) {
    case 2:
      GemmTile<R, 2>(x, t, wd, cols, rows, r0, y);
      break;
    case 1:
      GemmTile<R, 1>(x, t, wd, cols, rows, r0, y);
      break;
    default:
      break;
  }
}

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
  thread_local std::vector<float> scratch;  // [kRows, cols] decoded weight rows
  scratch.resize(kRows * w.cols);
  for (int64_t r = r0; r < r1; r += kRows) {
    const int n = static_cast<int>(std::min<int64_t>(kRows, r1 - r));
    for (int i = 0; i < n; ++i) DecodeRow<W>(w, r + i, scratch.data() + i * w.cols);
    switch (n) {
      case 4:
        GemmTokens<4>(x, T, scratch.data(), w.cols, w.rows, r, y);
        break;
      case 3:
        GemmTokens<3>(x, T, scratch.data(), w.cols, w.rows, r, y);
        break;
      case 2:
        GemmTokens<2>(x, T, scratch.data(), w.cols, w.rows, r, y);
        break;
      default:
        GemmTokens<1>(x, T, scratch.data(), w.cols, w.rows, r, y);
        break;
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
