// Linear on every probed ISA against the scalar reference, over odd shapes and all weight dtypes,
// plus the FP8 decode of all 256 codes against the e4m3 definition and the MXFP4 decode of all 16
// codes (both nibbles) under every kind of E8M0 exponent against the OCP MX definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "core/denormals.h"
#include "core/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_test_util.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref_kernels.h"

namespace mimo {
namespace {

using test::MakeWeight;
using test::OwnedWeight;
using test::RandomVector;

constexpr DType kWeightDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3,
                                   DType::kMxfp4, DType::kInt8};

// The oracle for one (weight, x): reference output and, per output, sum_c |x[t,c] * W[r,c]|.
struct Expected {
  std::vector<float> y;     // [T, rows]
  std::vector<double> mag;  // [T, rows]
};
Expected Reference(const float* x, int64_t T, const MatrixWeight& w) {
  Expected e;
  e.y.resize(T * w.rows);
  e.mag.assign(T * w.rows, 0.0);
  ref::Linear(x, T, w, e.y.data());
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      const double wv = std::fabs(w.At(r, c));
      for (int64_t t = 0; t < T; ++t) e.mag[t * w.rows + r] += std::fabs(x[t * w.cols + c]) * wv;
    }
  }
  return e;
}

// |y - ref| <= 1e-5 * sum_c |x[t,c] * W[r,c]| (accumulation-order differences only).
void ExpectLinearClose(int64_t T, int64_t rows, const float* y, const Expected& e,
                       const std::string& what) {
  int failures = 0;
  for (int64_t i = 0; i < T * rows && failures < 5; ++i) {
    const double got = y[i], want = e.y[i];
    if (!(std::fabs(got - want) <= 1e-5 * e.mag[i] + 1e-30)) {
      ADD_FAILURE() << what << " t=" << i / rows << " r=" << i % rows << ": got " << got << " want "
                    << want << " (sum|xw| " << e.mag[i] << ")";
      ++failures;
    }
  }
}

TEST(Linear, EveryIsaMatchesReferenceOnOddShapes) {
  std::mt19937 rng(1234);
  ThreadPool pool(2);
  for (DType dt : kWeightDTypes) {
    for (int64_t cols : {1, 7, 127, 128, 129, 300}) {
      for (int64_t rows : {1, 3, 17, 129}) {
        OwnedWeight ow = MakeWeight(dt, rows, cols, rng);
        for (int64_t T : {1, 2, 5, 9, 17, 33}) {
          const std::vector<float> x = RandomVector(T * cols, rng);  // [T, cols]
          const Expected want = Reference(x.data(), T, ow.w);
          for (Isa isa : AvailableIsas()) {
            const KernelTable& k = *KernelsFor(isa);
            std::vector<float> got(T * rows, NAN), got_mt(T * rows, NAN);
            ExecContext single;  // pool == nullptr: one thread
            LinearOn(k, single, x.data(), T, ow.w, got.data());
            ExecContext threaded{&pool};
            LinearOn(k, threaded, x.data(), T, ow.w, got_mt.data());
            const std::string what = std::string(IsaName(isa)) + " " + std::string(DTypeName(dt)) +
                                     " [" + std::to_string(rows) + "x" + std::to_string(cols) +
                                     "] T=" + std::to_string(T);
            ExpectLinearClose(T, rows, got.data(), want, what);
            ExpectLinearClose(T, rows, got_mt.data(), want, what + " threaded");
          }
        }
      }
    }
  }
}

// Larger than the parallel threshold, several row granules per thread, FP8 with a block width
// that is not a multiple of any SIMD width.
TEST(Linear, ThreadedLargerShapesAndOddBlockWidth) {
  std::mt19937 rng(99);
  ThreadPool pool(3);
  ExecContext ctx{&pool};
  for (DType dt : kWeightDTypes) {
    for (int64_t block_cols : {128, 50}) {
      if (dt != DType::kF8E4M3 && block_cols != 128) continue;
      OwnedWeight ow = MakeWeight(dt, 203, 1000, rng, block_cols);
      for (int64_t T : {1, 13, 40}) {
        const std::vector<float> x = RandomVector(T * 1000, rng);
        const Expected want = Reference(x.data(), T, ow.w);
        for (Isa isa : AvailableIsas()) {
          std::vector<float> got(T * 203, NAN);
          LinearOn(*KernelsFor(isa), ctx, x.data(), T, ow.w, got.data());
          ExpectLinearClose(T, 203, got.data(), want,
                            std::string(IsaName(isa)) + " " + std::string(DTypeName(dt)) +
                                " block_cols=" + std::to_string(block_cols) +
                                " T=" + std::to_string(T));
        }
      }
    }
  }
}

// Long prefill: more tokens than one x^T chunk, every tile shape's token tail.
TEST(Linear, LongPrefillMatchesReference) {
  std::mt19937 rng(31);
  ThreadPool pool(2);
  ExecContext ctx{&pool};
  for (DType dt : kWeightDTypes) {
    OwnedWeight ow = MakeWeight(dt, 37, 70, rng, 32);
    const int64_t T = 530;
    const std::vector<float> x = RandomVector(T * 70, rng);
    const Expected want = Reference(x.data(), T, ow.w);
    for (Isa isa : AvailableIsas()) {
      std::vector<float> got(T * 37, NAN);
      LinearOn(*KernelsFor(isa), ctx, x.data(), T, ow.w, got.data());
      ExpectLinearClose(T, 37, got.data(), want,
                        std::string(IsaName(isa)) + " " + std::string(DTypeName(dt)) + " T=530");
    }
  }
}

// Batch invariance (docs/ARCHITECTURE.md): on every ISA, token t's output row is bit-identical
// whether it runs alone (T == 1, the GEMV path) or among T tokens (the multi-token tile, any
// position in any token tile or chunk), single- or multi-threaded. NaN-aware: a NaN in one run
// and a number in the other fails, as does any other bit difference.
TEST(Linear, OutputRowsDoNotDependOnTheNumberOfTokens) {
  std::mt19937 rng(2024);
  ThreadPool pool(2);
  for (DType dt : kWeightDTypes) {
    for (int64_t cols : {7, 129, 300}) {
      for (int64_t block_cols : {128, 50}) {
        if (dt != DType::kF8E4M3 && block_cols != 128) continue;
        OwnedWeight ow = MakeWeight(dt, 37, cols, rng, block_cols);
        const int64_t T = 101;  // > one 96-token chunk; token tiles of every width
        const std::vector<float> x = RandomVector(T * cols, rng);  // [T, cols]
        for (Isa isa : AvailableIsas()) {
          const KernelTable& k = *KernelsFor(isa);
          std::vector<ExecContext> contexts = {ExecContext{}, ExecContext{&pool}};
          if (k.linear_rows_int8 != nullptr) {  // --precision int8 (int8 weights; others exact)
            contexts.push_back(ExecContext{nullptr, Precision::kInt8});
            contexts.push_back(ExecContext{&pool, Precision::kInt8});
          }
          for (ExecContext ctx : contexts) {
            std::vector<float> alone(T * 37), batched(T * 37), pair(2 * 37);
            for (int64_t t = 0; t < T; ++t) {
              LinearOn(k, ctx, x.data() + t * cols, 1, ow.w, alone.data() + t * 37);
            }
            LinearOn(k, ctx, x.data(), T, ow.w, batched.data());
            const std::string what =
                std::string(IsaName(isa)) + " " + std::string(DTypeName(dt)) +
                " cols=" + std::to_string(cols) + " block_cols=" + std::to_string(block_cols) +
                (ctx.precision == Precision::kInt8 ? " int8 mode" : "");
            int bad = 0;
            for (int64_t i = 0; i < T * 37 && bad < 3; ++i) {
              if (F32ToBits(alone[i]) != F32ToBits(batched[i])) {
                ADD_FAILURE() << what << " t=" << i / 37 << " r=" << i % 37 << ": alone "
                              << alone[i] << " batched " << batched[i];
                ++bad;
              }
            }
            // A short step (a few decoding requests) reduces like both of the above.
            LinearOn(k, ctx, x.data() + 5 * cols, 2, ow.w, pair.data());
            for (int64_t i = 0; i < 2 * 37; ++i) {
              EXPECT_EQ(F32ToBits(pair[i]), F32ToBits(alone[5 * 37 + i])) << what << " T=2";
            }
            // Small batches (T = 3..17: every register-tile width, one and two token groups,
            // every row tail of 37 rows, and the first size past them) reduce like the rest too.
            for (int64_t tn = 3; tn <= 17; ++tn) {
              std::vector<float> small(tn * 37);
              LinearOn(k, ctx, x.data() + 11 * cols, tn, ow.w, small.data());
              for (int64_t i = 0; i < tn * 37; ++i) {
                ASSERT_EQ(F32ToBits(small[i]), F32ToBits(alone[11 * 37 + i]))
                    << what << " T=" << tn << " t=" << i / 37 << " r=" << i % 37;
              }
            }
          }
        }
      }
    }
  }
}

// Prompt-sized steps on the lane-major prefill tiles: more tokens than one packed chunk (AVX-512:
// 256 tokens, AVX2: 128) and more rows than one decoded row block (AVX-512: 48 unscaled, 24 FP8,
// the bf16 mode's FP8 blocks ending at every scale row, 8 rows here; AVX2: 24), a ragged last
// scale block and a last token group of 12: every output bit-identical to the same token alone
// (the GEMV), single- and multi-threaded, on every ISA, in the exact mode and (AVX512_BF16) the
// bf16 mode.
TEST(Linear, PromptChunksAndRowBlocksMatchTheGemv) {
  std::mt19937 rng(31);
  ThreadPool pool(2);
  constexpr int64_t kRows = 100, kCols = 1000, T = 300;
  for (DType dt : kWeightDTypes) {
    OwnedWeight ow = MakeWeight(dt, kRows, kCols, rng, 128);
    if (dt == DType::kF8E4M3) {  // a uniform grid of 8-row scale blocks
      ow.w.scale_row.clear();
      ow.w.block_rows = 8;
      ow.w.num_scale_rows = (kRows + 7) / 8;
    }
    const std::vector<float> x = RandomVector(T * kCols, rng);  // [T, cols]
    for (Isa isa : AvailableIsas()) {
      const KernelTable& k = *KernelsFor(isa);
      std::vector<ExecContext> contexts = {ExecContext{}, ExecContext{&pool}};
      if (k.linear_rows_bf16 != nullptr) {
        contexts.push_back(ExecContext{nullptr, Precision::kBf16});
        contexts.push_back(ExecContext{&pool, Precision::kBf16});
      }
      if (k.linear_rows_int8 != nullptr) {
        contexts.push_back(ExecContext{nullptr, Precision::kInt8});
        contexts.push_back(ExecContext{&pool, Precision::kInt8});
      }
      for (ExecContext ctx : contexts) {
        std::vector<float> alone(T * kRows), batched(T * kRows);
        for (int64_t t = 0; t < T; ++t) {
          LinearOn(k, ctx, x.data() + t * kCols, 1, ow.w, alone.data() + t * kRows);
        }
        LinearOn(k, ctx, x.data(), T, ow.w, batched.data());
        for (int64_t i = 0; i < T * kRows; ++i) {
          ASSERT_EQ(F32ToBits(alone[i]), F32ToBits(batched[i]))
              << IsaName(isa) << " " << DTypeName(dt) << (ctx.pool ? " threaded" : "")
              << (ctx.precision == Precision::kBf16   ? " bf16"
                  : ctx.precision == Precision::kInt8 ? " int8"
                                                      : "")
              << " t=" << i / kRows
              << " r=" << i % kRows;
        }
      }
    }
  }
}

// The scale lookup itself, checked by hand: 2 rows x 4 cols, block_cols 2, three scale rows;
// row 0 uses scale row 2, row 1 uses scale row 0.
TEST(Linear, Fp8ScaleRowIndirectionByHand) {
  const uint8_t codes[8] = {0x38, 0x40, 0x30, 0x38,      // 1, 2, 0.5, 1
                            0xb8, 0x38, 0x38, 0x44};     // -1, 1, 1, 3
  const float scales[6] = {10, 100, 1000, 10000, 3, 5};  // [3 scale rows, 2 blocks]
  MatrixWeight w;
  w.dtype = DType::kF8E4M3;
  w.rows = 2;
  w.cols = 4;
  w.data = codes;
  w.scale_inv = scales;
  w.num_scale_rows = 3;
  w.scale_cols = 2;
  w.block_cols = 2;
  w.scale_row = {2, 0};
  const float x[4] = {1, 1, 1, 2};
  // row 0: (1 + 2) * 3 + (0.5 + 1*2) * 5 = 21.5; row 1: (-1 + 1) * 10 + (1 + 3*2) * 100 = 700.
  for (Isa isa : AvailableIsas()) {
    float y[2] = {NAN, NAN};
    ExecContext ctx;
    LinearOn(*KernelsFor(isa), ctx, x, 1, w, y);
    EXPECT_FLOAT_EQ(y[0], 21.5f) << IsaName(isa);
    EXPECT_FLOAT_EQ(y[1], 700.0f) << IsaName(isa);
  }
}

// Row r holds code r in one column and zeros elsewhere; x is all ones, so y[t, r] is exactly the
// decoded code times its (power-of-two) scale, on both the T == 1 and the T > 1 paths.
TEST(Linear, Fp8DecodeOfAll256CodesMatchesDefinition) {
  constexpr int64_t kRowsN = 256, kCols = 300;
  std::vector<uint8_t> codes(kRowsN * kCols, 0);
  for (int64_t r = 0; r < kRowsN; ++r)
    codes[r * kCols + (r * 37) % kCols] = static_cast<uint8_t>(r);
  const int64_t scale_cols = (kCols + 127) / 128;
  std::vector<float> scales(3 * scale_cols);
  for (int64_t i = 0; i < 3 * scale_cols; ++i)
    scales[i] = std::ldexp(1.0f, static_cast<int>(i % 5) - 2);
  MatrixWeight w;
  w.dtype = DType::kF8E4M3;
  w.rows = kRowsN;
  w.cols = kCols;
  w.data = codes.data();
  w.scale_inv = scales.data();
  w.num_scale_rows = 3;
  w.scale_cols = scale_cols;
  w.block_cols = 128;
  w.scale_row.resize(kRowsN);
  for (int64_t r = 0; r < kRowsN; ++r) w.scale_row[r] = static_cast<int32_t>((r * 7) % 3);
  // Also under FTZ/DAZ, as every model thread computes (core/denormals.h): the subnormal codes
  // (exponent field 0) decode through f16, which vcvtph2ps widens to normal fp32 regardless of
  // DAZ, so they stay exact.
  for (bool ftz_daz : {false, true}) {
    std::optional<ScopedFlushDenormals> guard;
    if (ftz_daz) guard.emplace();
    for (Isa isa : AvailableIsas()) {
      for (int64_t T : {1, 5, 20}) {
        const std::vector<float> x(T * kCols, 1.0f);
        std::vector<float> y(T * kRowsN);
        ExecContext ctx;
        LinearOn(*KernelsFor(isa), ctx, x.data(), T, w, y.data());
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t r = 0; r < kRowsN; ++r) {
            const int64_t c = (r * 37) % kCols;
            const double want = test::E4M3ByDefinition(static_cast<uint8_t>(r)) *
                                scales[w.scale_row[r] * scale_cols + c / 128];
            const float got = y[t * kRowsN + r];
            if (std::isnan(want)) {
              EXPECT_TRUE(std::isnan(got)) << IsaName(isa) << " code " << r << " T=" << T;
            } else {
              EXPECT_EQ(got, static_cast<float>(want))
                  << IsaName(isa) << " code " << r << " T=" << T << " ftz/daz " << ftz_daz;
            }
          }
        }
      }
    }
  }
}

// int8: row r of 255 holds code r - 127 in one column (every block position, the short last block
// included) and 0 elsewhere, under a per-row, per-block scale; x all ones, so y[t, r] is exactly
// (r - 127) x that block's scale, at T == 1 and on the T > 1 paths, on every ISA.
TEST(Linear, Int8DecodeOfAllCodesMatchesDefinition) {
  constexpr int64_t kRowsN = 255, kCols = 75, kScaleCols = 3;
  std::vector<int8_t> codes(kRowsN * kCols, 0);
  std::vector<float> scales(kRowsN * kScaleCols);
  for (int64_t r = 0; r < kRowsN; ++r) {
    codes[r * kCols + (r * 29) % kCols] = static_cast<int8_t>(r - 127);
    for (int64_t j = 0; j < kScaleCols; ++j)
      scales[r * kScaleCols + j] = std::ldexp(1.0f + 0.125f * static_cast<float>((r + j) % 8),
                                              static_cast<int>((r * 3 + j) % 11) - 5);
  }
  MatrixWeight w;
  w.dtype = DType::kInt8;
  w.rows = kRowsN;
  w.cols = kCols;
  w.data = codes.data();
  w.scale_inv = scales.data();
  w.num_scale_rows = kRowsN;
  w.scale_cols = kScaleCols;
  w.block_cols = 32;
  w.block_rows = 1;
  for (Isa isa : AvailableIsas()) {
    for (int64_t T : {1, 5, 20}) {
      const std::vector<float> x(T * kCols, 1.0f);
      std::vector<float> y(T * kRowsN);
      ExecContext ctx;
      LinearOn(*KernelsFor(isa), ctx, x.data(), T, w, y.data());
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t r = 0; r < kRowsN; ++r) {
          const int64_t c = (r * 29) % kCols;
          const double want = static_cast<double>(r - 127) * scales[r * kScaleCols + c / 32];
          EXPECT_EQ(y[t * kRowsN + r], static_cast<float>(want))
              << IsaName(isa) << " code " << r - 127 << " column " << c << " T=" << T;
        }
      }
    }
  }
}

// --precision int8 (AVX512_VNNI, AVX2): the mode's definition, computed here from its statement in
// double: per token and 32-column block, scale s = amax / 127 in fp32 (1 for an all-zero block)
// and codes q = x / s in fp32 rounded to nearest even within [-127, 127]; per output, the sum
// over blocks of (weight scale x s, one fp32 product) x the exact integer dot product of the
// codes. The kernel's fp32 accumulation order is its own: within 1e-5 of sum |scale x q x w|.
struct Int8ModeExpected {
  std::vector<double> y, mag;  // [T, rows]
};
Int8ModeExpected Int8ModeReference(const float* x, int64_t T, const MatrixWeight& w) {
  const int64_t cols = w.cols, nb = (cols + 31) / 32;
  const auto* codes = static_cast<const int8_t*>(w.data);
  Int8ModeExpected e;
  e.y.assign(T * w.rows, 0.0);
  e.mag.assign(T * w.rows, 0.0);
  std::vector<int> q(cols);
  std::vector<float> s(nb);
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * cols;
    for (int64_t j = 0; j < nb; ++j) {
      float amax = 0;
      for (int64_t c = j * 32; c < std::min(cols, j * 32 + 32); ++c)
        amax = std::max(amax, std::fabs(xt[c]));
      s[j] = amax > 0 ? amax / 127.0f : 1.0f;
      for (int64_t c = j * 32; c < std::min(cols, j * 32 + 32); ++c)
        q[c] = static_cast<int>(std::clamp(std::nearbyint(xt[c] / s[j]), -127.0f, 127.0f));
    }
    for (int64_t r = 0; r < w.rows; ++r) {
      for (int64_t j = 0; j < nb; ++j) {
        int64_t dot = 0, absdot = 0;
        for (int64_t c = j * 32; c < std::min(cols, j * 32 + 32); ++c) {
          dot += static_cast<int64_t>(q[c]) * codes[r * cols + c];
          absdot += std::abs(static_cast<int64_t>(q[c]) * codes[r * cols + c]);
        }
        const float sc = w.scale_inv[w.ScaleRow(r) * w.scale_cols + j] * s[j];
        e.y[t * w.rows + r] += static_cast<double>(sc) * static_cast<double>(dot);
        e.mag[t * w.rows + r] += std::fabs(static_cast<double>(sc)) * static_cast<double>(absdot);
      }
    }
  }
  return e;
}

TEST(Linear, Int8ModeMatchesItsDefinition) {
  std::mt19937 rng(4242);
  ThreadPool pool(2);
  int ran = 0;
  for (int64_t cols : {1, 7, 31, 32, 33, 64, 65, 127, 300, 1000}) {
    for (int64_t rows : {1, 3, 17, 129}) {
      OwnedWeight ow = MakeWeight(DType::kInt8, rows, cols, rng);
      // The same weight in the int8 mode's grouped layout.
      MatrixWeight tiled = ow.w;
      ASSERT_TRUE(InterleaveInt8Rows(&tiled, &pool));
      for (int64_t T : {1, 2, 5, 17}) {
        // Magnitudes spread over 2^-8 .. 2^8 so blocks have very different scales.
        std::vector<float> x = RandomVector(T * cols, rng);
        for (int64_t i = 0; i < T * cols; ++i) x[i] = std::ldexp(x[i], static_cast<int>(i % 17) - 8);
        const Int8ModeExpected want = Int8ModeReference(x.data(), T, ow.w);
        for (Isa isa : AvailableIsas()) {
          const KernelTable& k = *KernelsFor(isa);
          if (k.linear_rows_int8 == nullptr) continue;
          ++ran;
          for (ExecContext ctx : {ExecContext{nullptr, Precision::kInt8},
                                  ExecContext{&pool, Precision::kInt8}}) {
            std::vector<float> got(T * rows, NAN);
            LinearOn(k, ctx, x.data(), T, ow.w, got.data());
            int bad = 0;
            for (int64_t i = 0; i < T * rows && bad < 5; ++i) {
              if (!(std::fabs(got[i] - want.y[i]) <= 1e-5 * want.mag[i] + 1e-30)) {
                ADD_FAILURE() << IsaName(isa) << " [" << rows << "x" << cols << "] T=" << T
                              << (ctx.pool ? " threaded" : "") << " t=" << i / rows
                              << " r=" << i % rows << ": got " << got[i] << " want " << want.y[i]
                              << " (magnitude " << want.mag[i] << ")";
                ++bad;
              }
            }
            // The grouped layout (InterleaveInt8Rows): the same definition in another fp32
            // order, and each token's bits the same alone as in the batch.
            std::vector<float> got_tiled(T * rows, NAN), alone(rows, NAN);
            LinearOn(k, ctx, x.data(), T, tiled, got_tiled.data());
            for (int64_t i = 0; i < T * rows && bad < 5; ++i) {
              if (!(std::fabs(got_tiled[i] - want.y[i]) <= 1e-5 * want.mag[i] + 1e-30)) {
                ADD_FAILURE() << IsaName(isa) << " grouped [" << rows << "x" << cols
                              << "] T=" << T << (ctx.pool ? " threaded" : "")
                              << " t=" << i / rows << " r=" << i % rows << ": got "
                              << got_tiled[i] << " want " << want.y[i];
                ++bad;
              }
            }
            for (int64_t t = 0; t < T; ++t) {
              LinearOn(k, ctx, x.data() + t * cols, 1, tiled, alone.data());
              for (int64_t r = 0; r < rows; ++r) {
                ASSERT_EQ(F32ToBits(alone[r]), F32ToBits(got_tiled[t * rows + r]))
                    << IsaName(isa) << " grouped [" << rows << "x" << cols << "] T=" << T
                    << " t=" << t << " r=" << r;
              }
            }
          }
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no int8 kernels here: --precision int8 runs exact";
}

// InterleaveInt8Rows's grouped layout, by hand on a [6, 70] weight: one group of 512 columns
// (70 real, the rest zero padding), two tiles (rows 0-3, and rows 4-5 from byte 4 x 512);
// column c of block l = c / 32 at 64 x ((c % 32) / 4) + 4 l + c % 4 of its row's 512 bytes. Code
// (r, c) = r * 70 + c wrapped into [-127, 127]; scales [6, 3] -> per row 16, zero past block 2.
TEST(Linear, Int8InterleavedLayoutByHand) {
  constexpr int64_t kRows = 6, kCols = 70, kBlocks = 3;
  auto code = [](int64_t r, int64_t c) {
    return static_cast<int8_t>((r * kCols + c) % 255 - 127);
  };
  // bf16 values (the int8 rule's scales are), distinct in every (row, block).
  auto Scale = [](int64_t r, int64_t j) { return static_cast<float>(32 * r + 2 * j + 1) / 32; };
  std::vector<int8_t> codes(kRows * kCols);
  std::vector<float> scales(kRows * kBlocks);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) codes[r * kCols + c] = code(r, c);
    for (int64_t j = 0; j < kBlocks; ++j) scales[r * kBlocks + j] = Scale(r, j);
  }
  MatrixWeight w;
  w.dtype = DType::kInt8;
  w.rows = kRows;
  w.cols = kCols;
  w.data = codes.data();
  w.scale_inv = scales.data();
  w.num_scale_rows = kRows;
  w.scale_cols = kBlocks;
  w.block_cols = 32;
  w.block_rows = 1;
  MatrixWeight t = w;
  ASSERT_TRUE(InterleaveInt8Rows(&t, nullptr));
  EXPECT_FALSE(InterleaveInt8Rows(&t, nullptr)) << "already interleaved";
  EXPECT_EQ(t.int8_tile_rows, 4);
  EXPECT_EQ(t.DataBytes(), kRows * 512);
  EXPECT_EQ(t.ScaleBytes(), 2 * kRows * 16);  // bf16
  EXPECT_EQ(t.scale_inv, nullptr);
  // Stored as w + 128 (w ^ 0x80): d is the signed code back.
  auto d = [&](int64_t i) { return static_cast<int8_t>(static_cast<const int8_t*>(t.data)[i] ^ 0x80); };
  EXPECT_EQ(static_cast<const uint8_t*>(t.data)[0], code(0, 0) + 128);
  EXPECT_EQ(d(0), code(0, 0));
  EXPECT_EQ(d(3), code(0, 3));
  EXPECT_EQ(d(64), code(0, 4));           // block 0, bytes 4-7: step 1
  EXPECT_EQ(d(4), code(0, 32));           // block 1, bytes 0-3: lane 1 of step 0
  EXPECT_EQ(d(64 + 8 + 1), code(0, 69));  // block 2, byte 5
  EXPECT_EQ(d(512 + 4 * 64 + 3), code(1, 19));
  EXPECT_EQ(d(2048), code(4, 0));         // tile 1
  EXPECT_EQ(d(2048 + 512 + 64 * 7 + 4 * 1 + 2), code(5, 32 + 30));
  int nonzero_padding = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = kCols; c < 512; ++c) {
      const int64_t r0 = r / 4 * 4;
      nonzero_padding += d(r0 * 512 + (r - r0) * 512 + 64 * ((c % 32) / 4) + 4 * (c / 32) + c % 4) != 0;
    }
  }
  EXPECT_EQ(nonzero_padding, 0);
  // Scales: rows 0-3 at 16 r, rows 4-5 at 64 + 16 (r - 4); zero past block 2.
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < 16; ++j) {
      EXPECT_EQ(BF16ToF32(t.int8_scale_bf16[16 * r + j]), j < kBlocks ? Scale(r, j) : 0.0f)
          << r << "," << j;
    }
  }
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) ASSERT_EQ(t.At(r, c), w.At(r, c)) << r << "," << c;
  // Only the int8 mode's kernels read the layout: the exact and bf16 ones refuse it by name.
  std::vector<float> x(kCols, 1.0f), y(kRows);
  ExecContext exact;
  EXPECT_DEATH(LinearOn(*KernelsFor(Isa::kScalar), exact, x.data(), 1, t, y.data()),
               "int8 weight \\[6, 70\\] is interleaved for --precision int8");
  // The mode reads it: all-ones activations give sum_c code(r, c) x scale of c's block.
  const KernelTable* int8k = nullptr;
  for (Isa isa : AvailableIsas())
    if (KernelsFor(isa)->linear_rows_int8) int8k = KernelsFor(isa);
  if (int8k) {
    ExecContext mode{nullptr, Precision::kInt8};
    LinearOn(*int8k, mode, x.data(), 1, t, y.data());
    for (int64_t r = 0; r < kRows; ++r) {
      double want = 0;
      for (int64_t c = 0; c < kCols; ++c)
        want += code(r, c) * static_cast<double>(Scale(r, c / 32));
      EXPECT_NEAR(y[r], want, 1e-5 * std::fabs(want) + 1e-3) << "row " << r;
    }
  }
  // A weight with a per-row scale map (a gathered draft head) is not interleaved.
  MatrixWeight mapped = w;
  mapped.scale_row = {0, 1, 2, 3, 4, 5};
  EXPECT_DEATH(InterleaveInt8Rows(&mapped, nullptr), "needs one scale row per weight row");
  // Nor one whose scale is not a bf16 value (its layout holds them in 16 bits).
  std::vector<float> odd = scales;
  odd[2 * kBlocks + 1] = 1.0f + 0x1p-10f;
  MatrixWeight unrounded = w;
  unrounded.scale_inv = odd.data();
  EXPECT_DEATH(InterleaveInt8Rows(&unrounded, nullptr),
               "the scale 1.00098 of row 2, block 1 is not a bf16 value");
}

// The int8 mode leaves every other weight dtype on the exact kernels (same bits), gives a NaN
// output for a token whose activations hold a NaN or an infinity (exact: NaN or inf), and differs
// from exact on int8 weights (the activations are quantized).
TEST(Linear, Int8ModeOtherDtypesExactAndNonFiniteActivations) {
  std::mt19937 rng(4343);
  bool any = false;
  for (Isa isa : AvailableIsas()) {
    const KernelTable& k = *KernelsFor(isa);
    if (k.linear_rows_int8 == nullptr) continue;
    any = true;
    ExecContext exact, int8{nullptr, Precision::kInt8};
    for (DType dt : kWeightDTypes) {
      OwnedWeight ow = MakeWeight(dt, 9, 100, rng);
      std::vector<float> x = RandomVector(3 * 100, rng);
      std::vector<float> a(3 * 9), b(3 * 9);
      LinearOn(k, exact, x.data(), 3, ow.w, a.data());
      LinearOn(k, int8, x.data(), 3, ow.w, b.data());
      bool same = true;
      for (size_t i = 0; i < a.size(); ++i) same &= F32ToBits(a[i]) == F32ToBits(b[i]);
      EXPECT_EQ(same, dt != DType::kInt8) << DTypeName(dt);
      if (dt != DType::kInt8) continue;
      x[100 + 40] = NAN;                                 // token 1, block 1
      x[200 + 99] = std::numeric_limits<float>::infinity();  // token 2, the short last block
      for (int64_t T : {1, 3}) {
        const int64_t t0 = T == 1 ? 1 : 0;
        LinearOn(k, int8, x.data() + t0 * 100, T, ow.w, b.data());
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t r = 0; r < 9; ++r) {
            EXPECT_EQ(std::isnan(b[t * 9 + r]), t0 + t >= 1) << "T=" << T << " t=" << t << " r=" << r;
          }
        }
      }
    }
  }
  if (!any) GTEST_SKIP() << "no int8 kernels here";
}

// MXFP4: row r of 2 * 16 * 7 rows holds code r % 16 in one column (even and odd columns, so both
// nibbles; blocks 0, 1 and the short last one) with one of 7 exponents in that column's block, the
// other columns code 0 under exponent 127. x is all ones, so y[t, r] is exactly the code's value
// times 2^(e - 127) on both the T == 1 and the T > 1 paths: e = 0 (2^-127, subnormal), 1, 120,
// 127, 130, 254 (6 * 2^127 overflows to inf) and 255 (NaN).
TEST(Linear, Mxfp4DecodeOfAllCodesAndExponentsMatchesDefinition) {
  constexpr int64_t kCols = 75, kRowBytes = (kCols + 1) / 2, kScaleCols = 3;
  const uint8_t kExps[] = {0, 1, 120, 127, 130, 254, 255};
  const int64_t kColumnOf[] = {4, 37, 73};  // even in block 0, odd in block 1, even in the tail
  const int64_t rows = 16 * 7 * 3;
  std::vector<uint8_t> codes(rows * kRowBytes, 0), exps(rows * kScaleCols, 127);
  std::vector<double> want(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t code = static_cast<uint8_t>(r % 16), e = kExps[(r / 16) % 7];
    const int64_t c = kColumnOf[r / (16 * 7)];
    codes[r * kRowBytes + c / 2] = static_cast<uint8_t>((c & 1) ? code << 4 : code);
    exps[r * kScaleCols + c / 32] = e;
    want[r] = test::E2M1ByDefinition(code) * test::E8M0ByDefinition(e);
  }
  // The spare high nibble of each row's last byte is not an element: fill it with a code.
  for (int64_t r = 0; r < rows; ++r) codes[r * kRowBytes + kRowBytes - 1] |= 0x70;
  MatrixWeight w;
  w.dtype = DType::kMxfp4;
  w.rows = rows;
  w.cols = kCols;
  w.data = codes.data();
  w.scale_e8m0 = exps.data();
  w.num_scale_rows = rows;
  w.scale_cols = kScaleCols;
  w.block_cols = 32;
  w.block_rows = 1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c = kColumnOf[r / (16 * 7)];
    if (std::isnan(want[r])) {
      EXPECT_TRUE(std::isnan(w.At(r, c))) << "At row " << r;
    } else {
      EXPECT_EQ(w.At(r, c), static_cast<float>(want[r])) << "At row " << r;
    }
  }
  for (Isa isa : AvailableIsas()) {
    for (int64_t T : {1, 5, 20}) {
      const std::vector<float> x(T * kCols, 1.0f);
      std::vector<float> y(T * rows);
      ExecContext ctx;
      LinearOn(*KernelsFor(isa), ctx, x.data(), T, w, y.data());
      int bad = 0;
      for (int64_t i = 0; i < T * rows && bad < 5; ++i) {
        const int64_t r = i % rows;
        const float got = y[i];
        const bool ok = std::isnan(want[r]) ? std::isnan(got) : got == static_cast<float>(want[r]);
        if (!ok) {
          ADD_FAILURE() << IsaName(isa) << " T=" << T << " code " << r % 16 << " exponent "
                        << int{kExps[(r / 16) % 7]} << " column " << kColumnOf[r / (16 * 7)]
                        << ": got " << got << " want " << want[r];
          ++bad;
        }
      }
    }
  }
}

// Nibble order and the per-row exponent by hand: byte 0x21 holds element 0 = code 1 (0.5) in its
// low nibble and element 1 = code 2 (1.0) in its high nibble.
TEST(Linear, Mxfp4NibbleOrderByHand) {
  const uint8_t codes[2] = {0x21, 0x9c};  // row 0: 0.5, 1; row 1: code 12 (-2), code 9 (-0.5)
  const uint8_t exps[2] = {128, 125};     // row 0 x2, row 1 x1/4
  MatrixWeight w;
  w.dtype = DType::kMxfp4;
  w.rows = 2;
  w.cols = 2;
  w.data = codes;
  w.scale_e8m0 = exps;
  w.num_scale_rows = 2;
  w.scale_cols = 1;
  w.block_cols = 32;
  w.block_rows = 1;
  const float x[2] = {1, 10};
  // row 0: (0.5 * 1 + 1 * 10) * 2 = 21; row 1: (-2 * 1 - 0.5 * 10) / 4 = -1.75.
  for (Isa isa : AvailableIsas()) {
    float y[2] = {NAN, NAN};
    ExecContext ctx;
    LinearOn(*KernelsFor(isa), ctx, x, 1, w, y);
    EXPECT_EQ(y[0], 21.0f) << IsaName(isa);
    EXPECT_EQ(y[1], -1.75f) << IsaName(isa);
  }
}

TEST(Linear, CoreScalarDecodeMatchesDefinition) {
  for (int code = 0; code < 256; ++code) {
    const double want = test::E4M3ByDefinition(static_cast<uint8_t>(code));
    const float got = F8E4M3ToF32(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << code;
    } else {
      EXPECT_EQ(got, static_cast<float>(want)) << code;
    }
  }
}

TEST(Linear, PublicEntryUsesActiveTable) {
  std::mt19937 rng(5);
  OwnedWeight ow = MakeWeight(DType::kBF16, 33, 65, rng);
  const std::vector<float> x = RandomVector(3 * 65, rng);
  std::vector<float> got(3 * 33);
  ExecContext ctx;
  Linear(ctx, x.data(), 3, ow.w, got.data());
  ExpectLinearClose(3, 33, got.data(), Reference(x.data(), 3, ow.w), KernelIsaName());
}

}  // namespace
}  // namespace mimo

namespace mimo {
namespace {

// The uniform grid carries no per-row map (scale_row empty, r / block_rows): every ISA must give
// what the same weight gives with the map written out, and what the reference computes.
TEST(Linear, UniformGridWithoutRowMapEqualsExplicitMap) {
  std::mt19937 rng(5);
  ExecContext ctx{nullptr};
  OwnedWeight ow = MakeWeight(DType::kF8E4M3, 300, 260, rng, 128);
  ow.w.num_scale_rows = 3;  // ceil(300 / 128)
  for (int64_t r = 0; r < 300; ++r) ow.w.scale_row[r] = static_cast<int32_t>(r / 128);
  MatrixWeight implicit = ow.w;
  implicit.scale_row.clear();
  implicit.block_rows = 128;
  for (int64_t T : {1, 6}) {
    const std::vector<float> x = RandomVector(T * 260, rng);
    const Expected want = Reference(x.data(), T, ow.w);
    for (Isa isa : AvailableIsas()) {
      std::vector<float> got(T * 300, NAN);
      LinearOn(*KernelsFor(isa), ctx, x.data(), T, implicit, got.data());
      ExpectLinearClose(T, 300, got.data(), want, std::string(IsaName(isa)) + " implicit grid");
    }
  }
  EXPECT_EQ(implicit.ScaleRow(255), 1);
  EXPECT_EQ(implicit.At(299, 259), ow.w.At(299, 259));
}

}  // namespace
}  // namespace mimo

namespace mimo {
namespace {

// LinearMany (one region for several Linear ops, rows split by work) gives every output exactly
// (bit for bit) what separate Linear calls give, whatever the mix of shapes, dtypes and T, on
// every ISA and thread count.
TEST(Linear, ManyJobsInOneRegionMatchSeparateCalls) {
  std::mt19937 rng(77);
  struct Shape {
    DType dt;
    int64_t rows, cols, T;
  };
  const std::vector<Shape> shapes = {{DType::kF8E4M3, 203, 300, 1}, {DType::kBF16, 64, 300, 1},
                                     {DType::kF8E4M3, 5, 129, 3},   {DType::kF32, 77, 64, 0},
                                     {DType::kMxfp4, 130, 96, 2},   {DType::kF16, 33, 7, 17},
                                     {DType::kF8E4M3, 512, 256, 1}, {DType::kInt8, 70, 100, 3}};
  std::vector<OwnedWeight> ws;
  std::vector<std::vector<float>> xs;
  for (const Shape& s : shapes) {
    ws.push_back(MakeWeight(s.dt, s.rows, s.cols, rng, 128));
    xs.push_back(RandomVector(std::max<int64_t>(s.T, 1) * s.cols, rng));
  }
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    ExecContext ctx{&pool};
    for (Isa isa : AvailableIsas()) {
      const KernelTable& k = *KernelsFor(isa);
      for (size_t n : {size_t{1}, size_t{2}, shapes.size()}) {
        std::vector<std::vector<float>> want(n), got(n);
        std::vector<LinearJob> jobs(n);
        for (size_t j = 0; j < n; ++j) {
          const size_t sz = std::max<int64_t>(shapes[j].T, 1) * shapes[j].rows;
          want[j].assign(sz, -1.0f);
          got[j].assign(sz, -1.0f);
          LinearOn(k, ctx, xs[j].data(), shapes[j].T, ws[j].w, want[j].data());
          jobs[j] = {xs[j].data(), shapes[j].T, &ws[j].w, got[j].data()};
        }
        LinearManyOn(k, ctx, jobs.data(), static_cast<int>(n));
        for (size_t j = 0; j < n; ++j) {
          for (size_t i = 0; i < want[j].size(); ++i) {
            ASSERT_EQ(F32ToBits(want[j][i]), F32ToBits(got[j][i]))
                << IsaName(isa) << " threads=" << threads << " jobs=" << n << " job " << j
                << " i=" << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mimo

namespace mimo {
namespace {

// fp32 -> bf16 -> fp32, round to nearest even, subnormals to a signed zero as vcvtne2ps2bf16
// does (no NaN in these inputs).
float RoundToBf16(float f) {
  if (std::fabs(f) < std::numeric_limits<float>::min()) return std::copysign(0.0f, f);
  const uint32_t b = F32ToBits(f);
  const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  float out;
  std::memcpy(&out, &rounded, sizeof(out));
  return out;
}

// What the bf16 kernels compute, in double: y[t, r] = sum_c W[r, c] * bf16(x[t, c]) for
// unscaled weights; for FP8, sum_c e4m3(code[r, c]) * bf16(x[t, c] * scale(r, c)).
Expected Bf16Reference(const float* x, int64_t T, const OwnedWeight& ow) {
  const MatrixWeight& w = ow.w;
  Expected e;
  e.y.assign(T * w.rows, 0.0f);
  e.mag.assign(T * w.rows, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      double sum = 0, mag = 0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const float xv = x[t * w.cols + c];
        double term;
        if (w.dtype == DType::kF8E4M3) {
          const float s = w.scale_inv[w.ScaleRow(r) * w.scale_cols + c / w.block_cols];
          term = test::E4M3ByDefinition(ow.bytes[r * w.cols + c]) * RoundToBf16(xv * s);
        } else {
          term = static_cast<double>(w.At(r, c)) * RoundToBf16(xv);
        }
        sum += term;
        mag += std::fabs(term);
      }
      e.y[t * w.rows + r] = static_cast<float>(sum);
      e.mag[t * w.rows + r] = mag;
    }
  }
  return e;
}

// The opt-in bf16 kernels (ExecContext::precision = kBf16), every T: the decode GEMV (T = 1),
// the small-batch tiles (2..16: one and two token groups, 3- and 4-row tiles) and the prompt
// tiles (> 16). Their only rounding beyond the exact path's is the activations' to bf16 - x
// itself for BF16 weights, x times the block scale of its (row, column) block for FP8. Oracle:
// those products rounded by hand and summed in double, to fp32 summation order (1e-5 of
// sum |x w|); against the exact result it stays within that rounding (2^-8 of sum |x w|). Other
// weight dtypes keep the exact kernels, and the default context never takes the bf16 path.
TEST(Linear, Bf16KernelsRoundOnlyTheActivations) {
  const KernelTable* k = KernelsFor(Isa::kAvx512);
  if (k == nullptr || k->linear_rows_bf16 == nullptr) {
    GTEST_SKIP() << "no AVX512_BF16 on this CPU (the exact kernels serve bf16 requests)";
  }
  std::mt19937 rng(77);
  ThreadPool pool(2);
  ExecContext bf16{&pool, Precision::kBf16};
  ExecContext exact{&pool};
  for (DType dt : {DType::kBF16, DType::kF8E4M3, DType::kF32}) {
    for (int64_t cols : {7, 70, 129, 300, 1000}) {
      for (int64_t block_cols : {128, 50}) {
        if (dt != DType::kF8E4M3 && block_cols != 128) continue;
        for (int64_t rows : {1, 6, 37}) {
          OwnedWeight ow = MakeWeight(dt, rows, cols, rng, block_cols);
          if (dt == DType::kF8E4M3 && block_cols == 128) {
            // A uniform grid of 8-row scale blocks (4-row tiles within a block; 37 rows leave a
            // straggler); block_cols 50 keeps MakeWeight's random row map (tiles straddle).
            ow.w.scale_row.clear();
            ow.w.block_rows = 8;
            ow.w.num_scale_rows = (rows + 7) / 8;
          }
          for (int64_t T : {1, 2, 4, 5, 8, 9, 16, 17, 20, 100, 203}) {
            const std::vector<float> x = RandomVector(T * cols, rng);  // [T, cols]
            const Expected want_exact = Reference(x.data(), T, ow.w);
            const Expected want_rounded = Bf16Reference(x.data(), T, ow);
            std::vector<float> got(T * rows, NAN), got_exact(T * rows, NAN);
            LinearOn(*k, bf16, x.data(), T, ow.w, got.data());
            LinearOn(*k, exact, x.data(), T, ow.w, got_exact.data());
            const std::string what = std::string(DTypeName(dt)) + " [" + std::to_string(rows) +
                                     "x" + std::to_string(cols) + "] block " +
                                     std::to_string(block_cols) + " T=" + std::to_string(T);
            if (dt == DType::kF32) {  // exact kernels: bit for bit the default context's result
              EXPECT_EQ(0, std::memcmp(got.data(), got_exact.data(), got.size() * sizeof(float)))
                  << what;
              continue;
            }
            ExpectLinearClose(T, rows, got.data(), want_rounded, what + " vs rounded x");
            int differs = 0, failures = 0;
            for (int64_t i = 0; i < T * rows; ++i) {
              differs += got[i] != got_exact[i];
              const double err = std::fabs(double{got[i]} - want_exact.y[i]);
              if (!(err <= (std::ldexp(1.0, -8) + 1e-5) * want_exact.mag[i] + 1e-30) &&
                  failures++ < 5) {
                ADD_FAILURE() << what << " i=" << i << ": " << got[i] << " vs exact "
                              << want_exact.y[i] << " (sum|xw| " << want_exact.mag[i] << ")";
              }
            }
            if (cols >= 70) {
              EXPECT_GT(differs, 0) << what << ": the bf16 path did not run";
            }
          }
        }
      }
    }
  }
}

// Batch invariance within the bf16 mode: a token's outputs are the same bits whether it runs
// alone (the GEMV), in a small batch (T = 2..17: every token-group width, one and two groups,
// 3- and 4-row tiles, every row tail of 37 rows) or in a prompt chunk (T = 101: more than one
// 96-token chunk), threaded or not, for every weight dtype (F32, F16 and MXFP4 run the exact
// kernels, which are invariant on their own). FP8 on a uniform grid of 8-row scale blocks (4-row
// tiles within a block) and on MakeWeight's random row map (tiles straddle scale rows).
TEST(Linear, Bf16OutputRowsDoNotDependOnTheNumberOfTokens) {
  const KernelTable* k = KernelsFor(Isa::kAvx512);
  if (k == nullptr || k->linear_rows_bf16 == nullptr) {
    GTEST_SKIP() << "no AVX512_BF16 on this CPU (the exact kernels serve bf16 requests)";
  }
  std::mt19937 rng(4048);
  ThreadPool pool(2);
  constexpr int64_t kRows = 37;
  for (DType dt : kWeightDTypes) {
    for (int64_t cols : {7, 129, 300, 1000}) {
      for (int64_t block_cols : {128, 50}) {
        if (dt != DType::kF8E4M3 && block_cols != 128) continue;
        for (bool grid : {false, true}) {
          if (grid && dt != DType::kF8E4M3) continue;
          OwnedWeight ow = MakeWeight(dt, kRows, cols, rng, block_cols);
          if (grid) {
            ow.w.scale_row.clear();
            ow.w.block_rows = 8;
            ow.w.num_scale_rows = (kRows + 7) / 8;
          }
          const int64_t T = 101;
          const std::vector<float> x = RandomVector(T * cols, rng);  // [T, cols]
          for (ExecContext ctx :
               {ExecContext{nullptr, Precision::kBf16}, ExecContext{&pool, Precision::kBf16}}) {
            const std::string what = std::string(DTypeName(dt)) + " cols=" + std::to_string(cols) +
                                     " block_cols=" + std::to_string(block_cols) +
                                     (grid ? " grid" : "") + (ctx.pool ? " threaded" : "");
            std::vector<float> alone(T * kRows), batched(T * kRows), exact(T * kRows);
            for (int64_t t = 0; t < T; ++t) {
              LinearOn(*k, ctx, x.data() + t * cols, 1, ow.w, alone.data() + t * kRows);
            }
            LinearOn(*k, ctx, x.data(), T, ow.w, batched.data());
            for (int64_t i = 0; i < T * kRows; ++i) {
              ASSERT_EQ(F32ToBits(alone[i]), F32ToBits(batched[i]))
                  << what << " T=" << T << " t=" << i / kRows << " r=" << i % kRows;
            }
            for (int64_t tn = 2; tn <= 17; ++tn) {
              std::vector<float> small(tn * kRows);
              LinearOn(*k, ctx, x.data() + 11 * cols, tn, ow.w, small.data());
              for (int64_t i = 0; i < tn * kRows; ++i) {
                ASSERT_EQ(F32ToBits(small[i]), F32ToBits(alone[11 * kRows + i]))
                    << what << " T=" << tn << " t=" << i / kRows << " r=" << i % kRows;
              }
            }
            // The mode is a mode: BF16 and FP8 differ from the exact kernels' results.
            ExecContext exact_ctx{ctx.pool};
            LinearOn(*k, exact_ctx, x.data(), T, ow.w, exact.data());
            const bool same =
                std::memcmp(exact.data(), batched.data(), exact.size() * sizeof(float)) == 0;
            const bool rounds = dt == DType::kBF16 || dt == DType::kF8E4M3;
            if (cols >= 129) {
              EXPECT_EQ(!rounds, same) << what;
            }
          }
        }
      }
    }
  }
}

// An FP8 NaN code (S.1111.111) makes its row's outputs NaN in the bf16 mode too, whatever T and
// wherever in the row it sits (a whole 32-column step, the block's partial last step); the
// other rows stay finite.
TEST(Linear, Bf16Fp8NanCodesGiveNan) {
  const KernelTable* k = KernelsFor(Isa::kAvx512);
  if (k == nullptr || k->linear_rows_bf16 == nullptr) {
    GTEST_SKIP() << "no AVX512_BF16 on this CPU (the exact kernels serve bf16 requests)";
  }
  std::mt19937 rng(5);
  ExecContext ctx{nullptr, Precision::kBf16};
  for (int64_t nan_col : {0, 40, 99}) {
    OwnedWeight ow = MakeWeight(DType::kF8E4M3, 9, 100, rng, 50);
    ow.bytes[3 * 100 + nan_col] = nan_col % 2 ? 0xff : 0x7f;
    for (int64_t T : {1, 3, 9, 20}) {
      const std::vector<float> x = RandomVector(T * 100, rng);
      std::vector<float> y(T * 9);
      LinearOn(*k, ctx, x.data(), T, ow.w, y.data());
      for (int64_t i = 0; i < T * 9; ++i) {
        EXPECT_EQ(i % 9 == 3, std::isnan(y[i])) << "col " << nan_col << " T=" << T << " i=" << i;
      }
    }
  }
}

// LinearMany (one region for many jobs, MoE experts) in the bf16 mode: every job as a separate
// Linear call of the same mode, whatever its T (1, a small batch, a prompt chunk).
TEST(Linear, Bf16ManyJobsMatchSeparateCalls) {
  const KernelTable* k = KernelsFor(Isa::kAvx512);
  if (k == nullptr || k->linear_rows_bf16 == nullptr) {
    GTEST_SKIP() << "no AVX512_BF16 on this CPU (the exact kernels serve bf16 requests)";
  }
  std::mt19937 rng(99);
  ThreadPool pool(2);
  ExecContext ctx{&pool, Precision::kBf16};
  std::vector<OwnedWeight> ws;
  ws.push_back(MakeWeight(DType::kBF16, 70, 300, rng, 128));
  ws.push_back(MakeWeight(DType::kF8E4M3, 130, 256, rng, 128));
  ws.push_back(MakeWeight(DType::kF8E4M3, 37, 129, rng, 50));
  ws.push_back(MakeWeight(DType::kMxfp4, 40, 96, rng, 32));
  const int64_t Ts[] = {1, 7, 40, 16};
  std::vector<std::vector<float>> xs, ys, want;
  std::vector<LinearJob> jobs;
  for (size_t j = 0; j < ws.size(); ++j) {
    xs.push_back(RandomVector(Ts[j] * ws[j].w.cols, rng));
    ys.emplace_back(Ts[j] * ws[j].w.rows, NAN);
    want.emplace_back(Ts[j] * ws[j].w.rows, NAN);
    LinearOn(*k, ctx, xs[j].data(), Ts[j], ws[j].w, want[j].data());
  }
  for (size_t j = 0; j < ws.size(); ++j) {
    LinearJob job;
    job.x = xs[j].data();
    job.T = Ts[j];
    job.w = &ws[j].w;
    job.y = ys[j].data();
    jobs.push_back(job);
  }
  LinearManyOn(*k, ctx, jobs.data(), static_cast<int>(jobs.size()));
  for (size_t j = 0; j < ws.size(); ++j) {
    EXPECT_EQ(0, std::memcmp(ys[j].data(), want[j].data(), ys[j].size() * sizeof(float)))
        << "job " << j;
  }
}

// The int8 mode on grouped weights quantizes a threaded call's input once (its threads splitting
// the tokens) and LinearMany once per distinct input (an MLP's gate and up share theirs): every
// output the same bits as one call of the kernel quantizing for itself, whatever the threads,
// for inputs too small to share (quantized by the caller) and large enough (split by token).
TEST(Linear, Int8GroupedCallsQuantizeTheirInputOnce) {
  std::mt19937 rng(5150);
  struct Shape {
    int64_t rows, cols, T;
    int input;  // jobs with the same input read the same x (the first job's shape allocates it)
  };
  // T x cols from 300 values (the caller quantizes) to 130k (all threads, split by token).
  const std::vector<Shape> shapes = {{130, 300, 1, 0},   {64, 2048, 64, 1}, {96, 2048, 64, 1},
                                     {200, 512, 70, 2},  {17, 33, 5, 3},   {40, 1000, 40, 4},
                                     {260, 1000, 40, 4}, {8, 2048, 1, 5},
                                     // the same x as jobs 1 and 2, read as other shapes
                                     {50, 2048, 1, 1},   {30, 1024, 2, 1}};
  std::vector<OwnedWeight> owned;
  std::vector<MatrixWeight> tiled;
  ThreadPool setup(2);
  for (const Shape& sh : shapes) {
    owned.push_back(MakeWeight(DType::kInt8, sh.rows, sh.cols, rng));
    tiled.push_back(owned.back().w);
    ASSERT_TRUE(InterleaveInt8Rows(&tiled.back(), &setup));
  }
  int ran = 0;
  for (Isa isa : AvailableIsas()) {
    const KernelTable& k = *KernelsFor(isa);
    if (k.linear_rows_int8 == nullptr) continue;
    ASSERT_NE(k.quantize_int8_grouped, nullptr) << IsaName(isa);
    ASSERT_NE(k.linear_rows_int8_grouped, nullptr) << IsaName(isa);
    ++ran;
    for (int threads : {1, 2, 3}) {
      // New inputs each time: what an earlier call left in a reused buffer is never right.
      std::vector<std::vector<float>> inputs(6), want;
      for (const Shape& sh : shapes) {
        if (inputs[sh.input].empty()) inputs[sh.input] = RandomVector(sh.T * sh.cols, rng);
      }
      for (size_t j = 0; j < shapes.size(); ++j) {
        want.emplace_back(shapes[j].T * shapes[j].rows, NAN);
        k.linear_rows_int8(inputs[shapes[j].input].data(), shapes[j].T, tiled[j], 0,
                           shapes[j].rows, want[j].data());
      }
      ThreadPool pool(threads);
      ExecContext ctx{&pool, Precision::kInt8};
      std::vector<std::vector<float>> one(shapes.size()), many(shapes.size());
      std::vector<LinearJob> jobs;
      for (size_t j = 0; j < shapes.size(); ++j) {
        one[j].assign(want[j].size(), NAN);
        many[j].assign(want[j].size(), NAN);
        LinearOn(k, ctx, inputs[shapes[j].input].data(), shapes[j].T, tiled[j], one[j].data());
        jobs.push_back({inputs[shapes[j].input].data(), shapes[j].T, &tiled[j], many[j].data()});
      }
      LinearManyOn(k, ctx, jobs.data(), static_cast<int>(jobs.size()));
      for (size_t j = 0; j < shapes.size(); ++j) {
        for (size_t i = 0; i < want[j].size(); ++i) {
          ASSERT_EQ(F32ToBits(want[j][i]), F32ToBits(one[j][i]))
              << IsaName(isa) << " threads=" << threads << " Linear, job " << j << " i=" << i;
          ASSERT_EQ(F32ToBits(want[j][i]), F32ToBits(many[j][i]))
              << IsaName(isa) << " threads=" << threads << " LinearMany, job " << j << " i=" << i;
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no int8 kernels here: --precision int8 runs exact";
}

}  // namespace
}  // namespace mimo
