// Tensor-parallel slicing (model/tensor_parallel.h): row ranges, head slices with kv-head
// replication, and row slices of FP8 / MXFP4 weights whose dequantized elements must equal the
// unsliced weight's (any scale grid, any alignment).
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <random>

namespace mimo {
namespace {

TEST(EvenSplitTest, CeilChunksCoverEveryRowOnce) {
  for (int64_t n : {1, 7, 64, 130}) {
    for (int size : {1, 2, 3, 4, 8}) {
      int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        const RowRange rr = EvenSplit(n, r, size);
        EXPECT_EQ(rr.begin, next);
        EXPECT_LE(rr.count, (n + size - 1) / size);
        next += rr.count;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(SliceHeadsTest, SplitsKvHeadsOrReplicatesThem) {
  LayerConfig l;
  l.num_attention_heads = 64;
  l.num_key_value_heads = 4;  // Flash full attention
  for (int size : {2, 4}) {
    for (int r = 0; r < size; ++r) {
      auto s = SliceHeads(l, r, size);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(s->num_q, 64 / size);
      EXPECT_EQ(s->q_begin, r * 64 / size);
      EXPECT_EQ(s->num_kv, 4 / size);
      EXPECT_EQ(s->kv_begin, r * 4 / size);
    }
  }
  // N = 8 > 4 kv heads: ranks 2k and 2k+1 share kv head k (16 query heads per kv head).
  for (int r = 0; r < 8; ++r) {
    auto s = SliceHeads(l, r, 8);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->num_q, 8);
    EXPECT_EQ(s->num_kv, 1);
    EXPECT_EQ(s->kv_begin, r / 2);
  }
  EXPECT_FALSE(SliceHeads(l, 0, 3).ok());  // 64 query heads do not split 3 ways
  l.num_key_value_heads = 8;
  EXPECT_TRUE(SliceHeads(l, 0, 16).ok());  // 16 ranks over 8 kv heads: replicated
}

// An FP8 weight on a per-row scale map (as the TP-section grids bind) and on the uniform grid.
TEST(SliceRowsTest, Fp8SliceDequantizesToTheSameElements) {
  const int64_t rows = 300, cols = 160, br = 128, bc = 128;
  std::mt19937 rng(1);
  std::vector<uint8_t> data(rows * cols);
  for (auto& b : data) b = static_cast<uint8_t>(rng() % 0x7E);
  const int64_t srows = 5, scols = 2;
  std::vector<float> scale(srows * scols);
  for (auto& s : scale) s = 0.5f + static_cast<float>(rng() % 100) / 37.0f;
  for (bool mapped : {false, true}) {
    MatrixWeight w;
    w.dtype = DType::kF8E4M3;
    w.rows = rows;
    w.cols = cols;
    w.data = data.data();
    w.scale_inv = scale.data();
    w.num_scale_rows = srows;
    w.scale_cols = scols;
    w.block_cols = bc;
    w.block_rows = br;
    if (mapped) {
      w.scale_row.resize(rows);
      for (int64_t r = 0; r < rows; ++r) w.scale_row[r] = static_cast<int32_t>((r * 7 + 3) % srows);
    }
    for (auto [b, n] : {std::pair<int64_t, int64_t>{0, 128}, {100, 57}, {128, 172}, {299, 1}}) {
      const MatrixWeight s = SliceRows(w, b, n);
      ASSERT_EQ(s.rows, n);
      EXPECT_LE(s.num_scale_rows, srows);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < cols; c += 13) ASSERT_EQ(s.At(r, c), w.At(b + r, c)) << b << " " << r;
      }
    }
  }
}

TEST(SliceRowsTest, Mxfp4SliceKeepsItsExponentRows) {
  const int64_t rows = 12, cols = 64;
  std::vector<uint8_t> data(rows * cols / 2), e8(rows * 2);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37);
  for (size_t i = 0; i < e8.size(); ++i) e8[i] = static_cast<uint8_t>(120 + i % 11);
  MatrixWeight w;
  w.dtype = DType::kMxfp4;
  w.rows = rows;
  w.cols = cols;
  w.data = data.data();
  w.scale_e8m0 = e8.data();
  w.num_scale_rows = rows;
  w.scale_cols = 2;
  w.block_cols = 32;
  w.block_rows = 1;
  const MatrixWeight s = SliceRows(w, 5, 4);
  EXPECT_TRUE(s.scale_row.empty());
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(s.At(r, c), w.At(5 + r, c));
  }
}

TEST(GatherColumnsTest, OneRankIsACopy) {
  auto comm = MakeSingleRankCommunicator();
  std::vector<float> local = {1, 2, 3, 4, 5, 6}, out(6);
  GatherColumns(*comm, local.data(), 2, {3}, out.data(), "test");
  EXPECT_EQ(out, local);
}

}  // namespace
}  // namespace mimo
