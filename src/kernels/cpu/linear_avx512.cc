// Linear (y = x W^T) for AVX-512 (F/BW/VL/DQ) + F16C, weights F32/BF16/F16/F8E4M3.
//
// Same design as linear_avx2.cc, 16 lanes wide, with masked loads instead of scalar tails:
// T == 1 streams each weight row once, decoding in registers, 4 rows per tile, FP8 block scales
// applied to per-block partial sums, FP8 NaN codes tested once per cache line. 1 < T < 16
// decodes 4 rows into an fp32 scratch once and runs a 4-row x 6-token register-tiled micro-kernel
// (24 accumulators of the 32 zmm registers). T >= 16 switches to an outer-product form: x is
// transposed to [cols, tokens] once per 256-token chunk and each decoded weight element is
// broadcast against 16-token vectors, 12 rows x 32 tokens per tile, so there is no horizontal
// reduction and x is streamed once per 12 rows instead of once per 4.
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_*; GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mimo::avx512 {
namespace {

constexpr int kRows = 4;
constexpr int kTokens = 6;
constexpr int kOuterRows = 12;        // rows per outer-product tile
constexpr int kOuterMinT = 16;        // use the outer-product form from this many tokens on
constexpr int64_t kTokenChunk = 256;  // tokens per x^T chunk (1 MiB at 1024 cols)

inline __mmask16 TailMask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

struct F32W {
  static constexpr bool kNanCodes = false;
  using T = float;
  static constexpr bool kBlockScaled = false;
  static constexpr float kScaleFactor = 1.0f;
  static __m512 Load(const T* p) { return _mm512_loadu_ps(p); }
  static __m512 LoadMasked(const T* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};

struct BF16W {
  static constexpr bool kNanCodes = false;
  using T = uint16_t;
  static constexpr bool kBlockScaled = false;
  static constexpr float kScaleFactor = 1.0f;
  static __m512 Widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 Load(const T* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 LoadMasked(const T* p, __mmask16 m) {
    return Widen(_mm256_maskz_loadu_epi16(m, p));
  }
};

struct F16W {
  static constexpr bool kNanCodes = false;
  using T = uint16_t;
  static constexpr bool kBlockScaled = false;
  static constexpr float kScaleFactor = 1.0f;
  static __m512 Load(const T* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 LoadMasked(const T* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};

// e4m3 -> f16 bit remap (see linear_avx2.cc): value = 2^-8 * e4m3 value, exact incl. subnormals;
// NaN codes patched to an f16 NaN.
struct F8W {
  using T = uint8_t;
  static constexpr bool kNanCodes = true;  // S.1111.111 is NaN
  static constexpr bool kBlockScaled = true;
  static constexpr float kScaleFactor = 256.0f;
  // Sign-extended b shifted left by 7 holds b in bits 14..7 and its sign in bit 15 as well;
  // clearing bit 14 leaves exactly the f16 bit pattern.
  static __m256i ToF16(__m128i b) {
    return _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
                            _mm256_set1_epi16(static_cast<short>(0xbfff)));
  }
  // Codes with b | 0x80 == 0xff (NaN) become an f16 quiet NaN.
  static __m512 Widen(__m128i b) {
    const __mmask16 nan =
        _mm_cmpeq_epi8_mask(_mm_or_si128(b, _mm_set1_epi8(static_cast<char>(0x80))),
                            _mm_set1_epi8(static_cast<char>(0xff)));
    return _mm512_cvtph_ps(_mm256_mask_mov_epi16(ToF16(b), nan, _mm256_set1_epi16(0x7e00)));
  }
  static __m512 Load(const T* p) {
    return Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m512 LoadMasked(const T* p, __mmask16 m) { return Widen(_mm_maskz_loadu_epi8(m, p)); }
  // Only for bytes known to hold no NaN code.
  static __m512 LoadNoNan(const T* p) {
    return _mm512_cvtph_ps(ToF16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // Bit k set if byte k of the 64 at p is a NaN code.
  static __mmask64 LineNanMask(const T* p) {
    const __m512i v =
        _mm512_or_si512(_mm512_loadu_si512(p), _mm512_set1_epi8(static_cast<char>(0x80)));
    return _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(static_cast<char>(0xff)));
  }
};

// W::Load for data already checked to hold no NaN code.
template <class W>
inline __m512 LoadClean(const typename W::T* p) {
  if constexpr (W::kNanCodes) {
    return W::LoadNoNan(p);
  } else {
    return W::Load(p);
  }
}

template <class W>
inline float BlockScale(const MatrixWeight& w, int64_t r, int64_t j) {
  if constexpr (W::kBlockScaled) {
    return w.scale_inv[w.ScaleRow(r) * w.scale_cols + j] * W::kScaleFactor;
  } else {
    return 1.0f;
  }
}

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
  __m512 total[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    row[i] = base + (r0 + i) * cols;
    next[i] = r0 + R + i < w.rows ? row[i] + R * cols : row[i];
    total[i] = _mm512_setzero_ps();
  }
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    __m512 acc[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
    int64_t c = cb;
    for (; c + kLine <= ce; c += kLine) {
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(next[i] + c), _MM_HINT_T1);
      // FP8: one NaN-code test per cache line and row lets the common case skip the per-vector
      // NaN patch (~8% faster decode); a line holding a NaN code takes the exact path.
      __mmask64 nan_codes = 0;
      if constexpr (W::kNanCodes) {
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) nan_codes |= W::LineNanMask(row[i] + c);
      }
      if (nan_codes == 0) {
#pragma GCC unroll 4
        for (int64_t v = 0; v < kLine; v += 16) {
          const __m512 xv = _mm512_loadu_ps(x + c + v);
#pragma GCC unroll 16
          for (int i = 0; i < R; ++i)
            acc[i] = _mm512_fmadd_ps(LoadClean<W>(row[i] + c + v), xv, acc[i]);
        }
      } else {
        for (int64_t v = 0; v < kLine; v += 16) {
          const __m512 xv = _mm512_loadu_ps(x + c + v);
          for (int i = 0; i < R; ++i) acc[i] = _mm512_fmadd_ps(W::Load(row[i] + c + v), xv, acc[i]);
        }
      }
    }
    for (; c + 16 <= ce; c += 16) {
      const __m512 xv = _mm512_loadu_ps(x + c);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i] = _mm512_fmadd_ps(W::Load(row[i] + c), xv, acc[i]);
    }
    if (c < ce) {
      const __mmask16 m = TailMask(ce - c);
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + c);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i)
        acc[i] = _mm512_fmadd_ps(W::LoadMasked(row[i] + c, m), xv, acc[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      if constexpr (W::kBlockScaled) {
        total[i] = _mm512_fmadd_ps(acc[i], _mm512_set1_ps(BlockScale<W>(w, r0 + i, j)), total[i]);
      } else {
        total[i] = _mm512_add_ps(total[i], acc[i]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) y[r0 + i] = _mm512_reduce_add_ps(total[i]);
}

template <class W>
void DecodeRow(const MatrixWeight& w, int64_t r, float* dst) {
  const auto* row = static_cast<const typename W::T*>(w.data) + r * w.cols;
  const int64_t cols = w.cols;
  const int64_t bc = W::kBlockScaled ? w.block_cols : cols;
  for (int64_t cb = 0, j = 0; cb < cols; cb += bc, ++j) {
    const int64_t ce = std::min(cb + bc, cols);
    const __m512 sv = _mm512_set1_ps(BlockScale<W>(w, r, j));
    int64_t c = cb;
    for (; c + 16 <= ce; c += 16) {
      const __m512 v = W::Load(row + c);
      _mm512_storeu_ps(dst + c, W::kBlockScaled ? _mm512_mul_ps(v, sv) : v);
    }
    if (c < ce) {
      const __mmask16 m = TailMask(ce - c);
      const __m512 v = W::LoadMasked(row + c, m);
      _mm512_mask_storeu_ps(dst + c, m, W::kBlockScaled ? _mm512_mul_ps(v, sv) : v);
    }
  }
}

template <int R, int TT>
void GemmTile(const float* x, int64_t t0, const float* wd, int64_t cols, int64_t rows, int64_t r0,
              float* y) {
  __m512 acc[R][TT];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) acc[i][t] = _mm512_setzero_ps();
  const float* xt[TT];
#pragma GCC unroll 16
  for (int t = 0; t < TT; ++t) xt[t] = x + (t0 + t) * cols;
  auto step = [&](int64_t c, __mmask16 m) {
    __m512 xv[TT];
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, xt[t] + c);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512 wv = _mm512_maskz_loadu_ps(m, wd + i * cols + c);
#pragma GCC unroll 16
      for (int t = 0; t < TT; ++t) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  };
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) step(c, 0xffff);
  if (c < cols) step(c, TailMask(cols - c));
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 16
    for (int t = 0; t < TT; ++t) y[(t0 + t) * rows + r0 + i] = _mm512_reduce_add_ps(acc[i][t]);
  }
}

template <int R>
void GemmTokens(const float* x, int64_t T, const float* wd, int64_t cols, int64_t rows, int64_t r0,
                float* y) {
  int64_t t = 0;
  for (; t + kTokens <= T; t += kTokens) GemmTile<R, kTokens>(x, t, wd, cols, rows, r0, y);
  switch (T - t) {
    case 5:
      GemmTile<R, 5>(x, t, wd, cols, rows, r0, y);
      break;
    case 4:
      GemmTile<R, 4>(x, t, wd, cols, rows, r0, y);
      break;
    case 3:
      GemmTile<R, 3>(x, t, wd, cols, rows, r0, y);
      break;
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

// xt [cols, tpad] = x^T, tokens >= T zero.   x [T, cols]
void TransposeX(const float* x, int64_t T, int64_t cols, int64_t tpad, float* xt) {
  constexpr int64_t kB = 16;
  for (int64_t cb = 0; cb < cols; cb += kB) {
    const int64_t ce = std::min(cb + kB, cols);
    for (int64_t t = 0; t < tpad; ++t) {
      for (int64_t c = cb; c < ce; ++c) xt[c * tpad + t] = t < T ? x[t * cols + c] : 0.0f;
    }
  }
}

// y[t0 + t, r0 + i] for i < R, t < min(16 * NV, T - t0): weight broadcast x token vectors.
// wd [R, cols] decoded rows; xt [cols, tpad].
template <int R, int NV>
void OuterTile(const float* xt, int64_t tpad, int64_t t0, int64_t T, const float* wd, int64_t cols,
               int64_t rows, int64_t r0, float* y) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t c = 0; c < cols; ++c) {
    __m512 xv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) xv[v] = _mm512_loadu_ps(xt + c * tpad + t0 + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512 wb = _mm512_set1_ps(wd[i * cols + c]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(wb, xv[v], acc[i][v]);
    }
  }
  const int64_t nt = std::min<int64_t>(16 * NV, T - t0);
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    alignas(64) float tmp[16 * NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) _mm512_store_ps(tmp + 16 * v, acc[i][v]);
    for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * rows + r0 + i] = tmp[t];
  }
}

using OuterFn = void (*)(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                         int64_t, float*);
template <int NV, size_t... I>
constexpr std::array<OuterFn, sizeof...(I)> OuterTable(std::index_sequence<I...>) {
  return {&OuterTile<static_cast<int>(I) + 1, NV>...};
}
// [NV - 1][R - 1]
constexpr std::array<OuterFn, kOuterRows> kOuter1 =
    OuterTable<1>(std::make_index_sequence<kOuterRows>());
constexpr std::array<OuterFn, kOuterRows> kOuter2 =
    OuterTable<2>(std::make_index_sequence<kOuterRows>());

template <class W>
void LinearRowsOuter(const float* x, int64_t T, const MatrixWeight& w, int64_t r0, int64_t r1,
                     float* y) {
  const int64_t cols = w.cols;
  thread_local std::vector<float> xt, scratch;  // [cols, tpad] x^T; [kOuterRows, cols] decoded
  scratch.resize(kOuterRows * cols);
  // Tokens in chunks so x^T stays cache-sized; weights are decoded once per chunk.
  for (int64_t tc = 0; tc < T; tc += kTokenChunk) {
    const int64_t nt = std::min(kTokenChunk, T - tc), tpad = (nt + 15) / 16 * 16;
    xt.resize(cols * tpad);
    TransposeX(x + tc * cols, nt, cols, tpad, xt.data());
    for (int64_t r = r0; r < r1; r += kOuterRows) {
      const int n = static_cast<int>(std::min<int64_t>(kOuterRows, r1 - r));
      for (int i = 0; i < n; ++i) DecodeRow<W>(w, r + i, scratch.data() + i * cols);
      for (int64_t t0 = 0; t0 < nt; t0 += 32) {
        const OuterFn fn = nt - t0 > 16 ? kOuter2[n - 1] : kOuter1[n - 1];
        fn(xt.data(), tpad, t0, nt, scratch.data(), cols, w.rows, r, y + tc * w.rows);
      }
    }
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
  if (T >= kOuterMinT) return LinearRowsOuter<W>(x, T, w, r0, r1, y);
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
      MIMO_ABORT("avx512::LinearRows: unsupported dtype %d", static_cast<int>(w.dtype));
  }
}

}  // namespace mimo::avx512
