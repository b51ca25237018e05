// MatrixWeight: a [rows=out_features, cols=in_features] weight in its stored dtype, as bound from
// a checkpoint (usually pointing into the mmap). Block-quantized weights carry their block scales
// and, per output row, which scale row applies: that one indirection expresses the uniform
// 128x128 FP8 grid, the per-TP-section grid of Flash full-attention K/V, de-interleaved fused
// qkv_proj, and MXFP4's one exponent row per weight row alike.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace mimo {

// Which FP8 tiles the T == 1 GEMV may decode without a fix-up (kernels' MarkFp8PlainBlocks): bit
// j % 64 of word g * words_per_group + j / 64 is set when rows [4g, 4g + 4) x scale block j hold
// no subnormal and no NaN e4m3 code and the block's width is a multiple of 64. Valid only for the
// data, shape and block width it was computed for (the kernel checks them: a sliced or re-laid-out
// copy of the weight carries a stale pointer, not stale bits).
struct Fp8PlainBlocks {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0, block_cols = 0;
  int64_t words_per_group = 0;
  std::vector<uint64_t> bits;  // [ceil(rows / 4), words_per_group]
  bool Plain(int64_t g, int64_t j) const {
    return (bits[g * words_per_group + (j >> 6)] >> (j & 63)) & 1;
  }
  // Rows [r0, r0 + n) x block j, n <= 4: plain if both groups the rows touch are.
  bool PlainRows(int64_t r0, int n, int64_t j) const {
    return Plain(r0 >> 2, j) && Plain((r0 + n - 1) >> 2, j);
  }
};

struct MatrixWeight {
  DType dtype = DType::kF32;  // kF32, kBF16, kF16, kF8E4M3, kMxfp4 or kInt8
  int64_t rows = 0;           // out_features
  int64_t cols = 0;           // in_features
  // [rows, cols] row-major in the stored dtype; kMxfp4: [rows, RowBytes()] bytes, element 2i of a
  // row in the low nibble of byte i and element 2i+1 in the high nibble (spec section 4).
  const void* data = nullptr;

  // F8E4M3: w[r][c] = fp8[r][c] * scale_inv[ScaleRow(r) * scale_cols + c / block_cols].
  // kInt8: w[r][c] = int8[r][c] * scale_inv[...] alike, block_cols 32 and block_rows 1 (one scale
  // row per weight row; codes in [-127, 127]; every scale a bf16 value); in the grouped layout
  // below the scales are int8_scale_bf16's instead (Int8Scale reads either).
  const float* scale_inv = nullptr;  // [num_scale_rows, scale_cols]
  // kMxfp4: w[r][c] = E2M1(code[r][c]) * 2^(scale_e8m0[ScaleRow(r) * scale_cols + c / 32] - 127);
  // block_cols is 32 and block_rows 1 (one exponent row per weight row, no per-row map).
  const uint8_t* scale_e8m0 = nullptr;  // [num_scale_rows, scale_cols]
  int64_t num_scale_rows = 0;
  int64_t scale_cols = 0;
  int64_t block_cols = 128;
  // Which scale row applies to each output row: empty for the uniform grid (r / block_rows),
  // so the ~100k uniform weights of a real checkpoint carry no per-row map.
  std::vector<int32_t> scale_row;  // [rows] or empty
  int64_t block_rows = 128;        // uniform grid only

  int64_t ScaleRow(int64_t r) const { return scale_row.empty() ? r / block_rows : scale_row[r]; }

  // Keeps re-laid-out data (e.g. split fused qkv rows) alive; empty when data is in the mmap.
  std::shared_ptr<void> owned;
  // F8E4M3 only, optional: the tiles the decode GEMV reads branch-free (see Fp8PlainBlocks).
  std::shared_ptr<const Fp8PlainBlocks> fp8_plain;
  // kInt8 only: 0 = codes and scales row-major as above; kInt8TileRows = the int8 mode's grouped
  // layout (kernels.h InterleaveInt8Rows; only the mode's kernels read it), in which a tile of
  // rows is one sequential stream and each int32 lane of a dot-product instruction sums one
  // block. Rows are padded with zero codes and zero scales to cp = Int8PaddedCols() columns (a
  // multiple of 512, a group: 16 blocks of 32) and taken in tiles of R = min(4, rows - r0) rows
  // from each r0 % 4 == 0. A tile's codes are [r0 * cp, (r0 + R) * cp): group g after group, each
  // the R rows' 512 codes one row after the other, in which column 32 l + 4 k + b (block l of the
  // group, byte 4 k + b of the block) is at 64 k + 4 l + b. Its scales are int8_scale_bf16
  // [r0 * cp / 32, (r0 + R) * cp / 32) (scale_inv is null): per group, the R rows' 16 block
  // scales one row after the other, each the bf16 bits of the row-major fp32 scale (exact: the
  // int8 rule's scales are bf16 values), so a weight streams 8.5 bits a weight, not 9. Needs
  // one scale row per weight row (block_rows 1, no scale_row map). The codes are stored as
  // unsigned bytes u = w + 128 (w ^ 0x80; padding 128), the operand vpdpbusd takes as is.
  int32_t int8_tile_rows = 0;
  const uint16_t* int8_scale_bf16 = nullptr;
  static constexpr int32_t kInt8TileRows = 4;
  static constexpr int64_t kInt8GroupCols = 512, kInt8GroupBlocks = 16;
  int64_t Int8PaddedCols() const {
    return (cols + kInt8GroupCols - 1) / kInt8GroupCols * kInt8GroupCols;
  }
  // Code (r, c) of a kInt8 weight, in either layout.
  int8_t Int8Code(int64_t r, int64_t c) const {
    const int8_t b = static_cast<const int8_t*>(data)[Int8CodeIndex(r, c)];
    return int8_tile_rows ? static_cast<int8_t>(b ^ 0x80) : b;
  }
  // Where code (r, c) and the scale of (r, block j) of a kInt8 weight are, in either layout.
  int64_t Int8CodeIndex(int64_t r, int64_t c) const {
    if (!int8_tile_rows) return r * cols + c;
    const int64_t r0 = r / kInt8TileRows * kInt8TileRows, R = TileRowsAt(r0);
    const int64_t g = c / kInt8GroupCols, l = c % kInt8GroupCols / 32, k = c % 32 / 4;
    return r0 * Int8PaddedCols() + (g * R + r - r0) * kInt8GroupCols + 64 * k + 4 * l + c % 4;
  }
  int64_t Int8ScaleIndex(int64_t r, int64_t j) const {
    if (!int8_tile_rows) return ScaleRow(r) * scale_cols + j;
    const int64_t r0 = r / kInt8TileRows * kInt8TileRows, R = TileRowsAt(r0);
    const int64_t g = j / kInt8GroupBlocks;
    return r0 * (Int8PaddedCols() / 32) + (g * R + r - r0) * kInt8GroupBlocks +
           j % kInt8GroupBlocks;
  }
  // The scale of (r, block j) of a kInt8 weight, in either layout.
  float Int8Scale(int64_t r, int64_t j) const {
    const int64_t i = Int8ScaleIndex(r, j);
    return int8_tile_rows ? BF16ToF32(int8_scale_bf16[i]) : scale_inv[i];
  }
  // Rows of the grouped layout's tile starting at r0.
  int64_t TileRowsAt(int64_t r0) const {
    return rows - r0 < kInt8TileRows ? rows - r0 : kInt8TileRows;
  }

  bool empty() const { return data == nullptr; }
  // Bytes of one stored row (MXFP4: ceil(cols / 2)).
  int64_t RowBytes() const {
    return dtype == DType::kMxfp4 ? (cols + 1) / 2 : cols * static_cast<int64_t>(DTypeSize(dtype));
  }
  // Bytes a pass over the whole weight reads: the stored rows, and its scales (FP8 and int8 fp32
  // scales, the grouped layout's bf16 ones, MXFP4 one byte per 32 elements).
  int64_t DataBytes() const { return int8_tile_rows ? rows * Int8PaddedCols() : rows * RowBytes(); }
  int64_t ScaleBytes() const {
    if (int8_tile_rows) return 2 * rows * (Int8PaddedCols() / 32);
    if (dtype == DType::kF8E4M3 || dtype == DType::kInt8) return 4 * num_scale_rows * scale_cols;
    if (dtype == DType::kMxfp4) return num_scale_rows * scale_cols;
    return 0;
  }
  // Dequantized element (slow path: references and tests).
  float At(int64_t r, int64_t c) const;
};

}  // namespace mimo
