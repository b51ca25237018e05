// Linear (y = x W^T) for AVX-512 (F/BW/VL/DQ) + F16C, weights F32/BF16/F16/F8E4M3/MXFP4: the
// width-templated bodies at 16 lanes (linear_tiles.h: GEMV tiles for T == 1, FP8 NaN codes tested
// once per cache line, MXFP4 T > 1 on a 4-row x 6-token register tile over decoded rows, 24
// accumulators of the 32 zmm registers; linear_small_batch.h: small steps, T = 2..16;
// linear_prefill.h: lane-major prompt tiles), the opt-in bf16 GEMM (gemm_bf16.h, every T under
// --precision bf16, on AVX512_BF16), this width's tuning and its MXFP4 decoder. Every exact tile
// reduces each (row, token) in exactly the order of the T == 1 path, and every bf16 tile in the
// order of the bf16 T == 1 path, so outputs are batch-invariant within a mode
// (docs/ARCHITECTURE.md).
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_*; GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_avx512.h"
// The bf16 GEMM's functions take AVX512_BF16 on top of the unit's flags (probed at run time).
#define MIMO_BF16_TARGET __attribute__((target("avx512bf16")))
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/linear_prefill.h"
#include "kernels/cpu/linear_small_batch.h"
#include "kernels/cpu/linear_tiles.h"

namespace mimo::avx512 {
namespace {

// ---- MXFP4 at 16 lanes -----------------------------------------------------------------------
// Codes are decoded to their exact fp32 values by a 16-entry vpermps lookup; a row of 4096
// columns is 2 KiB of codes plus 128 exponent bytes.
const std::array<float, 256> kE8M0 = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[e] = E8M0ToF32(static_cast<uint8_t>(e));
  return t;
}();

struct Mxfp4Avx512 {
  static constexpr int kVecs = 2;  // a 32-column block as two vectors of 16 lanes
  // Lanes in "nibble order": vector k, lane L = 4q + d holds column 8d + q + 4k, i.e. nibble
  // q + 4k of the block's dword d. The 16 code bytes are broadcast to the 4 dword quarters of a
  // zmm (a load-port op), a per-lane shift (vpsrlvd) brings each lane's nibble to bits 0-3, and
  // vpermps (which reads only those bits of an index) looks the value up: 2 shuffles per 32
  // codes, where widening the codes to column order took 6 (the GEMV was bound by them:
  // docs/PERFORMANCE.md). x is permuted to the same order once per call (PermuteBlock), and the
  // T > 1 tile runs on rows decoded in this order, so every path still reduces a (row, token)
  // identically (batch invariance).
  static constexpr bool kPermuted = true;
  const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                      -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
  const __m512i shift0 = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
  const __m512i shift1 =
      _mm512_setr_epi32(16, 16, 16, 16, 20, 20, 20, 20, 24, 24, 24, 24, 28, 28, 28, 28);

  static constexpr int kMxColumns = 32;
  // Column of the block held by lane L of vector k.
  static constexpr int Column(int k, int lane) { return 8 * (lane % 4) + lane / 4 + 4 * k; }
  static __m512i Index(int k) {
    alignas(64) int32_t i[16];
    for (int lane = 0; lane < 16; ++lane) i[lane] = Column(k, lane);
    return _mm512_load_si512(i);
  }

  void DecodeBytes(__m128i bytes, __m512 out[2]) const {
    const __m512i b = _mm512_broadcast_i32x4(bytes);
    out[0] = _mm512_permutexvar_ps(_mm512_srlv_epi32(b, shift0), table);
    out[1] = _mm512_permutexvar_ps(_mm512_srlv_epi32(b, shift1), table);
  }
  void Decode(const uint8_t* p, __m512 out[2]) const {
    DecodeBytes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), out);
  }
  // A block of n < 32 columns: only its ceil(n / 2) bytes are read, and lanes holding columns
  // >= n are +0 (also the spare high nibble of an odd n).
  void DecodeTail(const uint8_t* p, int64_t n, __m512 out[2]) const {
    DecodeBytes(_mm_maskz_loadu_epi8(VecAvx512::TailMask((n + 1) / 2), p), out);
    for (int k = 0; k < 2; ++k) {
      __mmask16 m = 0;
      for (int lane = 0; lane < 16; ++lane) m |= Column(k, lane) < n ? __mmask16(1u << lane) : 0;
      out[k] = _mm512_maskz_mov_ps(m, out[k]);
    }
  }
  // xp[16 k + L] = x[Column(k, L)] for the n <= 32 columns of one block; columns >= n are +0.
  static void PermuteBlock(const float* x, int64_t n, float* xp) {
    if (n == kMxColumns) {
      static const __m512i idx0 = Index(0), idx1 = Index(1);
      const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
      _mm512_storeu_ps(xp, _mm512_permutex2var_ps(lo, idx0, hi));
      _mm512_storeu_ps(xp + 16, _mm512_permutex2var_ps(lo, idx1, hi));
      return;
    }
    alignas(64) float b[32] = {};
    std::memcpy(b, x, static_cast<size_t>(n) * sizeof(float));
    for (int k = 0; k < 2; ++k)
      for (int lane = 0; lane < 16; ++lane) xp[16 * k + lane] = b[Column(k, lane)];
  }
  static float Scale(uint8_t e) { return kE8M0[e]; }
};

struct LinearAvx512 : VecAvx512 {
  static constexpr int kMultiTokens = 6;  // 24 accumulators of the 32 zmm registers
  // The GEMV prefetch requests lines at least this far ahead (~0.2 us at 40 GB/s, a few DRAM
  // latencies).
  static constexpr int64_t kPrefetchBytes = 8 << 10;
  static constexpr const char* kName = "avx512";
  using Mx = Mxfp4Avx512;
  // Prompts (linear_prefill.h, gemm_bf16.h), T > 16: 12 rows x 32 tokens (24 accumulators), FP8
  // 6 rows (12 accumulators + 12 per-block totals), bf16 12 rows.
  static constexpr int64_t kLaneMinTokens = 17;
  static constexpr int kLaneRowsUnscaled = 12;
  static constexpr int kLaneRowsScaled = 6;
  static constexpr int kLaneRowsBf16 = 12;
  static constexpr int64_t kLaneScratchBytes = 384 << 10;  // decoded rows of one row block (L2)
  static constexpr int64_t kLaneXBytes = 2 << 20;          // packed x of one token chunk (L2)
  // Small steps (linear_small_batch.h, gemm_bf16.h): up to 8 tokens per tile; R x TT accumulators
  // + R weight vectors + one x vector within the 32 zmm registers; FP8 running totals in
  // registers up to 8 of them; the rows ahead prefetched (the weights stream from DRAM once).
  static constexpr int kSmallTokens = 8;
  static constexpr int SmallRowsFor(int64_t tt) { return tt <= 4 ? 4 : 3; }
  static constexpr int kSmallTotalsInRegs = 8;
  static constexpr bool kSmallPrefetch = true;
  static constexpr int64_t kSmallFp8ScratchAbove = kLaneMinTokens;  // never: the plain map or not
};

}  // namespace

void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y) {
  cpu::LinearRowsFor<LinearAvx512>(x, T, w, row_begin, row_end, y);
}

MIMO_BF16_TARGET void LinearRowsBf16(const float* x, int64_t T, const MatrixWeight& w,
                                     int64_t row_begin, int64_t row_end, float* y) {
  cpu::LinearRowsBf16For<LinearAvx512>(x, T, w, row_begin, row_end, y);
}

MIMO_BF16_TARGET bool ProbeBf16() {
  volatile float in[2] = {1.5f, 2.0f};
  const __m512bh p = _mm512_cvtne2ps_pbh(_mm512_set1_ps(in[0]), _mm512_set1_ps(in[1]));
  // Lanes 0-7 pair two 2.0s (8), lanes 8-15 two 1.5s (4.5).
  return _mm512_reduce_add_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), p, p)) == 100.0f;
}

}  // namespace mimo::avx512
