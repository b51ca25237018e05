// The FP8 decode GEMV's plain tiles (kernels.h MarkFp8PlainBlocks, linear_tiles.h GemvTile):
// the map against the e4m3 definition of the codes it must exclude, and the GEMV with the map
// against the same weight without it, bit for bit, on every ISA and row split, with tiles of
// every kind (plain, subnormal, NaN, zero codes, short blocks, short last tile), x too large for
// the 2^112 scaling, and a copy of the weight whose data no longer matches the map.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
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

// By the e4m3 definition (OCP FP8): exponent field 0 with a mantissa is subnormal, S.1111.111 is
// NaN; these are the codes the branch-free decode may not see.
bool Special(uint8_t b) {
  const double v = test::E4M3ByDefinition(b);
  return std::isnan(v) || (v != 0 && std::fabs(v) < std::ldexp(1.0, -6));
}

// Codes of a realistic FP8 weight (no subnormal, no NaN: every tile plain), then per tile
// (4 rows x block) one of: left plain, one subnormal code, one NaN code, zero codes only
// (plain: zeros decode exactly), chosen by the tile's index.
OwnedWeight MixedWeight(int64_t rows, int64_t cols, int64_t block_cols, std::mt19937& rng) {
  OwnedWeight ow = MakeWeight(DType::kF8E4M3, rows, cols, rng, block_cols);
  for (uint8_t& b : ow.bytes) {
    if ((b & 0x78) == 0) b |= 0x08;  // no subnormals (and no zeros) to begin with
  }
  const int64_t blocks = (cols + block_cols - 1) / block_cols;
  for (int64_t g = 0; g * 4 < rows; ++g) {
    for (int64_t j = 0; j < blocks; ++j) {
      const int64_t r = std::min(rows - 1, g * 4 + (j % 4));
      const int64_t c = std::min(cols - 1, j * block_cols + 17 * (g % 7));
      switch ((g * 5 + j) % 6) {
        case 1:
          ow.bytes[r * cols + c] = static_cast<uint8_t>(0x80 * (g & 1) + 1 + (j % 7));  // subnormal
          break;
        case 2:
          ow.bytes[r * cols + c] = static_cast<uint8_t>(0x7f | (0x80 * (j & 1)));  // NaN
          break;
        case 3:
          ow.bytes[r * cols + c] = static_cast<uint8_t>(0x80 * (j & 1));  // +-0
          break;
        default:
          break;
      }
    }
  }
  return ow;
}

TEST(Fp8Plain, MapMatchesTheCodesOfEveryTile) {
  std::mt19937 rng(7);
  ThreadPool pool(3);
  for (int64_t block_cols : {128, 64, 50}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 300}, {64, 1024}, {5, 128}}) {
      OwnedWeight ow = MixedWeight(rows, cols, block_cols, rng);
      int64_t tiles = 0;
      const int64_t plain = MarkFp8PlainBlocks(&ow.w, &pool, &tiles);
      ASSERT_NE(ow.w.fp8_plain, nullptr);
      const Fp8PlainBlocks& p = *ow.w.fp8_plain;
      const int64_t blocks = (cols + block_cols - 1) / block_cols;
      EXPECT_EQ(tiles, (rows + 3) / 4 * blocks);
      int64_t count = 0;
      for (int64_t g = 0; g * 4 < rows; ++g) {
        for (int64_t j = 0; j < blocks; ++j) {
          const int64_t cb = j * block_cols, ce = std::min(cols, cb + block_cols);
          bool want = (g + 1) * 4 <= rows && (ce - cb) % 64 == 0;
          for (int64_t r = g * 4; r < std::min(rows, g * 4 + 4); ++r) {
            for (int64_t c = cb; c < ce; ++c) want = want && !Special(ow.bytes[r * cols + c]);
          }
          EXPECT_EQ(p.Plain(g, j), want)
              << rows << "x" << cols << " block " << block_cols << " g=" << g << " j=" << j;
          count += want;
        }
      }
      EXPECT_EQ(plain, count);
      if (block_cols != 50 && rows >= 4) {
        EXPECT_GT(plain, 0) << "some tiles must stay plain";
      }
    }
  }
  // Other dtypes are left alone.
  OwnedWeight bf = MakeWeight(DType::kBF16, 8, 64, rng);
  int64_t tiles = -1;
  EXPECT_EQ(MarkFp8PlainBlocks(&bf.w, &pool, &tiles), 0);
  EXPECT_EQ(tiles, 0);
  EXPECT_EQ(bf.w.fp8_plain, nullptr);
}

// y with the map against y without it, every ISA, one and three threads, and LinearMany's row
// splits (not multiples of 4 when a job starts mid-tile): the same bits, NaN for NaN.
void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 3; ++i) {
    if (F32ToBits(a[i]) != F32ToBits(b[i])) {
      ADD_FAILURE() << what << " row " << i << ": plain " << a[i] << " general " << b[i];
      ++bad;
    }
  }
}

TEST(Fp8Plain, GemvGivesTheGeneralPathsBits) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  for (int64_t block_cols : {128, 64, 50}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 300}, {203, 1024}, {64, 4096}}) {
      OwnedWeight ow = MixedWeight(rows, cols, block_cols, rng);
      const MatrixWeight general = ow.w;
      MarkFp8PlainBlocks(&ow.w, &pool);
      std::vector<float> x = RandomVector(cols, rng, -4.0f, 4.0f);
      x[3] = 1e-30f;    // products far below the normal range: flushed alike
      x[5] = 30000.0f;  // large but below 2^15: still the plain path
      for (int big = 0; big < 2; ++big) {
        if (big) x[cols - 1] = 70000.0f;  // >= 2^15: the whole call takes the general path
        std::vector<float> want(rows);
        ref::Linear(x.data(), 1, general, want.data());
        for (Isa isa : AvailableIsas()) {
          const KernelTable& k = *KernelsFor(isa);
          for (ExecContext ctx : {ExecContext{}, ExecContext{&pool}}) {
            std::vector<float> a(rows, NAN), b(rows, NAN);
            LinearOn(k, ctx, x.data(), 1, ow.w, a.data());
            LinearOn(k, ctx, x.data(), 1, general, b.data());
            const std::string what = std::string(IsaName(isa)) + " " + std::to_string(rows) + "x" +
                                     std::to_string(cols) + " block " + std::to_string(block_cols) +
                                     (big ? " big x" : "") + (ctx.pool ? " threaded" : "");
            ExpectSameBits(a, b, what);
            for (int64_t r = 0; r < rows; ++r) {
              if (std::isnan(want[r])) {
                EXPECT_TRUE(std::isnan(a[r])) << what << " row " << r;
              } else {
                EXPECT_NEAR(a[r], want[r], 1e-4 * (std::fabs(want[r]) + 1)) << what;
              }
            }
            // A job that starts mid-tile (LinearMany splits rows by work) and a T = 1 row after
            // a T > 1 job: the same bits again.
            std::vector<float> many(rows + 7, NAN), small(7, NAN);
            OwnedWeight other = MakeWeight(DType::kBF16, 7, cols, rng);
            const LinearJob jobs[2] = {{x.data(), 1, &other.w, small.data()},
                                       {x.data(), 1, &ow.w, many.data()}};
            LinearManyOn(k, ctx, jobs, 2);
            ExpectSameBits(std::vector<float>(many.begin(), many.begin() + rows), b,
                           what + " LinearMany");
          }
        }
      }
    }
  }
}

// Small batches (T = 2..4 run 4-row tiles, 5..16 3-row tiles that straddle the map's 4-row
// groups, and single-row tails; all read the map) and a prefill chunk: with the map, each token's
// row is bit-identical to the general path's and to the same token alone (T = 1 with the map):
// batch invariance holds with plain tiles.
TEST(Fp8Plain, SmallBatchesGiveTheGeneralPathsBits) {
  std::mt19937 rng(19);
  ThreadPool pool(3);
  for (int64_t block_cols : {128, 64}) {
    const int64_t rows = 203, cols = 1024;
    OwnedWeight ow = MixedWeight(rows, cols, block_cols, rng);
    const MatrixWeight general = ow.w;
    MarkFp8PlainBlocks(&ow.w, &pool);
    for (int64_t T : {2, 3, 4, 5, 9, 16, 40}) {
      std::vector<float> x = RandomVector(T * cols, rng, -4.0f, 4.0f);
      for (int big = 0; big < 2; ++big) {
        if (big) x[(T - 1) * cols + 7] = -70000.0f;  // the whole step takes the general path
        for (Isa isa : AvailableIsas()) {
          const KernelTable& k = *KernelsFor(isa);
          for (ExecContext ctx : {ExecContext{}, ExecContext{&pool}}) {
            std::vector<float> a(T * rows, NAN), b(T * rows, NAN), alone(T * rows, NAN);
            LinearOn(k, ctx, x.data(), T, ow.w, a.data());
            LinearOn(k, ctx, x.data(), T, general, b.data());
            for (int64_t t = 0; t < T; ++t) {
              LinearOn(k, ctx, x.data() + t * cols, 1, ow.w, alone.data() + t * rows);
            }
            const std::string what = std::string(IsaName(isa)) + " block " +
                                     std::to_string(block_cols) + " T=" + std::to_string(T) +
                                     (big ? " big x" : "") + (ctx.pool ? " threaded" : "");
            ExpectSameBits(a, b, what);
            ExpectSameBits(a, alone, what + " vs alone");
          }
        }
      }
    }
  }
}

// A copy whose data pointer or shape no longer matches the map (a slice of rows, as tensor
// parallelism takes) must not read the map: its outputs are the reference's.
TEST(Fp8Plain, StaleMapIsIgnored) {
  std::mt19937 rng(13);
  OwnedWeight ow = MixedWeight(64, 512, 128, rng);
  MarkFp8PlainBlocks(&ow.w, nullptr);
  MatrixWeight slice = ow.w;  // rows 2..33: tiles shifted by two rows against the map
  slice.data = ow.bytes.data() + 2 * 512;
  slice.rows = 32;
  slice.scale_row.assign(ow.w.scale_row.begin() + 2, ow.w.scale_row.begin() + 34);
  MatrixWeight fresh = slice;
  fresh.fp8_plain.reset();
  const std::vector<float> x = RandomVector(512, rng);
  for (Isa isa : AvailableIsas()) {
    std::vector<float> a(32, NAN), b(32, NAN);
    ExecContext ctx;
    LinearOn(*KernelsFor(isa), ctx, x.data(), 1, slice, a.data());
    LinearOn(*KernelsFor(isa), ctx, x.data(), 1, fresh, b.data());
    ExpectSameBits(a, b, std::string(IsaName(isa)) + " sliced copy");
  }
  // Same shape, other data (a re-laid-out copy): a NaN code where the map says plain.
  std::vector<uint8_t> other = ow.bytes;
  ASSERT_TRUE(ow.w.fp8_plain->Plain(0, 0));
  other[9] = 0xff;  // row 0 holds no special code of its own
  MatrixWeight moved = ow.w;
  moved.data = other.data();
  for (Isa isa : AvailableIsas()) {
    std::vector<float> y(64, 0.0f);
    ExecContext ctx;
    LinearOn(*KernelsFor(isa), ctx, x.data(), 1, moved, y.data());
    EXPECT_TRUE(std::isnan(y[0])) << IsaName(isa) << ": the map of other data was read";
  }
}

// The map is read: a map that (wrongly) calls a tile holding a NaN code plain makes every path
// that reads it decode that code as a finite number (the general path gives NaN): the GEMV of
// every ISA with plain tiles (AVX2, AVX-512, NEON), their small steps (T = 2), and the AVX2 and
// NEON prompt tiles (T = 20; AVX-512's prompt tiles decode rows without the map at 128 columns). Without this, the tests above
// would pass with kernels that never take the plain path.
TEST(Fp8Plain, VectorIsasReadTheMap) {
  int checked = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    if (KernelsFor(isa) == nullptr) continue;
    ++checked;
    for (int64_t T : {1, 2, 20}) {
      if (T == 20 && isa == Isa::kAvx512) continue;
      std::mt19937 rng(17);
      OwnedWeight ow = MixedWeight(8, 128, 128, rng);
      ow.bytes[1 * 128 + 5] = 0x7f;  // row 1 of tile 0
      auto forged = std::make_shared<Fp8PlainBlocks>();
      forged->data = ow.w.data;
      forged->rows = 8;
      forged->cols = 128;
      forged->block_cols = 128;
      forged->words_per_group = 1;
      forged->bits = {1, 1};
      ow.w.fp8_plain = forged;
      const std::vector<float> x = RandomVector(T * 128, rng);
      std::vector<float> y(T * 8, NAN);
      ExecContext ctx;
      LinearOn(*KernelsFor(isa), ctx, x.data(), T, ow.w, y.data());
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_FALSE(std::isnan(y[t * 8 + 1]))
            << IsaName(isa) << " T=" << T << " t=" << t << ": the forged map was not read";
      }
      ow.w.fp8_plain.reset();
      LinearOn(*KernelsFor(isa), ctx, x.data(), T, ow.w, y.data());
      for (int64_t t = 0; t < T; ++t) EXPECT_TRUE(std::isnan(y[t * 8 + 1])) << IsaName(isa);
    }
  }
  if (checked == 0) GTEST_SKIP() << "no AVX2, AVX-512 or NEON here";
}

}  // namespace
}  // namespace mimo
