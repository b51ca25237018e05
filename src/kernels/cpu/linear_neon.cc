// Linear (y = x W^T) for AArch64 NEON, weights F32/BF16/F16/F8E4M3/MXFP4: the width-templated
// bodies at 4 lanes (linear_tiles.h: GEMV tiles for T == 1, the FP8 plain tiles included,
// MultiTile for MXFP4; linear_small_batch.h: small steps with weights decoded in registers;
// linear_prefill.h: lane-major prompt tiles), this width's tuning and its MXFP4 decoder. No
// NEON-only algorithm: what differs from linear_avx2.cc is the vector type and the register
// budget (32 vector registers). The tuning is sized by register count, not yet measured on ARM
// hardware.
#include <arm_neon.h>

#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/linear_prefill.h"
#include "kernels/cpu/linear_small_batch.h"
#include "kernels/cpu/linear_tiles.h"
#include "kernels/cpu/vec_neon.h"

namespace mimo::neon {
namespace {

// MXFP4 at 4 lanes: codes become 2x their value as int8 through a 16-entry table lookup (TBL),
// then fp32 (exact); the factor 2 is folded into the block's E8M0 scale.
struct Mxfp4Neon : cpu::Mxfp4DoubledCodes<VecNeon> {
  static constexpr int kVecs = 8;           // a 32-column block in vectors of 4
  static constexpr bool kPermuted = false;  // lanes in column order

  // The 32 codes held by 16 bytes as eight vectors (raw units: 2 x the E2M1 value).
  static void DecodeBytes(uint8x16_t bytes, float32x4_t out[8]) {
    static constexpr int8_t kTable[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const int8x16_t table = vld1q_s8(kTable);
    const uint8x16_t lo = vandq_u8(bytes, vdupq_n_u8(0x0f));        // codes 0, 2, 4, ...
    const uint8x16_t hi = vshrq_n_u8(bytes, 4);                     // codes 1, 3, 5, ...
    const int8x16_t v[2] = {vqtbl1q_s8(table, vzip1q_u8(lo, hi)),   // columns 0-15
                            vqtbl1q_s8(table, vzip2q_u8(lo, hi))};  // columns 16-31
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int16x8_t w0 = vmovl_s8(vget_low_s8(v[h])), w1 = vmovl_s8(vget_high_s8(v[h]));
      out[4 * h] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w0)));
      out[4 * h + 1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(w0)));
      out[4 * h + 2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w1)));
      out[4 * h + 3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(w1)));
    }
  }
  void Decode(const uint8_t* p, float32x4_t out[8]) const { DecodeBytes(vld1q_u8(p), out); }
  // A block of n < 32 columns (TailBytes: lanes >= n decode to +0).
  void DecodeTail(const uint8_t* p, int64_t n, float32x4_t out[8]) const {
    alignas(16) uint8_t buf[16];
    TailBytes(p, n, buf);
    DecodeBytes(vld1q_u8(buf), out);
  }
};

struct LinearNeon : VecNeon {
  static constexpr int kMultiTokens = 6;        // 24 accumulators + 6 x + 1 w of 32 registers
  static constexpr int64_t kPrefetchBytes = 0;  // prefetch the next tile only
  static constexpr const char* kName = "neon";
  using Mx = Mxfp4Neon;
  // Prompts (linear_prefill.h): 8 rows x 8 tokens (16 accumulators + 2 x + 1 broadcast weight),
  // FP8 6 rows (12 accumulators + 12 per-block totals).
  static constexpr int64_t kLaneMinTokens = 16;
  static constexpr int kLaneRowsUnscaled = 8;
  static constexpr int kLaneRowsScaled = 6;
  static constexpr int64_t kLaneScratchBytes = 192 << 10;  // decoded rows of one row block (L2)
  static constexpr int64_t kLaneXBytes = 1 << 20;          // packed x of one token chunk
  // Small steps (linear_small_batch.h): 4 rows x 4 tokens + 4 weights + one x of the 32
  // registers; FP8 running totals in registers up to 8; the rows ahead prefetched.
  static constexpr int kSmallTokens = 4;
  static constexpr int SmallRowsFor(int64_t) { return 4; }
  static constexpr int kSmallTotalsInRegs = 8;
  static constexpr bool kSmallPrefetch = true;
  static constexpr int64_t kSmallFp8ScratchAbove = 2 * kSmallTokens;
};

}  // namespace

void LinearRows(const float* x, int64_t T, const MatrixWeight& w, int64_t row_begin,
                int64_t row_end, float* y) {
  cpu::LinearRowsFor<LinearNeon>(x, T, w, row_begin, row_end, y);
}

}  // namespace mimo::neon
