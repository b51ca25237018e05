// Linear (y = x W^T) for AVX2+FMA+F16C, weights F32/BF16/F16/F8E4M3/MXFP4: the width-templated
// bodies at 8 lanes (linear_tiles.h: GEMV tiles for T == 1, MultiTile, a 4-row x 3-token register
// tile over decoded rows, for MXFP4 and for FP8 rows without a plain map above 8 tokens;
// linear_small_batch.h: small steps with weights decoded in registers, 2 <= T < kLaneMinTokens;
// linear_prefill.h: lane-major prompt tiles), this width's tuning and its MXFP4 decoder.
#include <immintrin.h>

#include <array>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/linear_prefill.h"
#include "kernels/cpu/linear_small_batch.h"
#include "kernels/cpu/linear_tiles.h"
#include "kernels/cpu/vec_avx2.h"

namespace mimo::avx2 {
namespace {

// MXFP4 at 8 lanes: codes become 2x their value as int8 through a 16-entry pshufb table, then
// fp32 (exact); the factor 2 is folded into the block's E8M0 scale.
struct Mxfp4Avx2 : cpu::Mxfp4DoubledCodes<VecAvx2> {
  static constexpr int kVecs = 4;           // a 32-column block in vectors of 8
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
  // A block of n < 32 columns (TailBytes: lanes >= n decode to +0).
  void DecodeTail(const uint8_t* p, int64_t n, __m256 out[4]) const {
    alignas(16) uint8_t buf[16];
    TailBytes(p, n, buf);
    DecodeBytes(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)), out);
  }
};

struct LinearAvx2 : VecAvx2 {
  static constexpr int kMultiTokens = 3;        // 12 accumulators of the 16 ymm registers
  static constexpr int64_t kPrefetchBytes = 0;  // prefetch the next tile only
  static constexpr const char* kName = "avx2";
  using Mx = Mxfp4Avx2;
  // Prompts (linear_prefill.h): 6 rows x 16 tokens, 12 accumulators + 2 x + 1 broadcast weight.
  static constexpr int64_t kLaneMinTokens = 16;
  static constexpr int kLaneRowsUnscaled = 6;
  static constexpr int kLaneRowsScaled = 6;
  static constexpr int64_t kLaneScratchBytes = 192 << 10;  // decoded rows of one row block (L2)
  static constexpr int64_t kLaneXBytes = 1 << 20;          // packed x of one token chunk (L2 + L3)
  // Small steps (linear_small_batch.h): 3 rows x 4 tokens + 3 weights of the 16 ymm; no
  // prefetch; FP8 rows without a plain map past two token groups on MultiTile, which decodes each
  // row once (docs/PERFORMANCE.md).
  static constexpr int kSmallTokens = 4;
  static constexpr int SmallRowsFor(int64_t) { return 3; }
  static constexpr int kSmallTotalsInRegs = 12;
  static constexpr bool kSmallPrefetch = false;
  static constexpr int64_t kSmallFp8ScratchAbove = 2 * kSmallTokens;
};

}  // namespace

void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y) {
  cpu::LinearRowsFor<LinearAvx2>(x, T, w, row_begin, row_end, y);
}

}  // namespace mimo::avx2
