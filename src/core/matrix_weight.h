// MatrixWeight: a [rows=out_features, cols=in_features] weight in its stored dtype, as bound from
// a checkpoint (usually pointing into the mmap). FP8 weights carry their block scales and, per
// output row, which scale row applies: that one indirection expresses the uniform 128x128 grid,
// the per-TP-section grid of Flash full-attention K/V, and de-interleaved fused qkv_proj alike.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace mimo {

struct MatrixWeight {
  DType dtype = DType::kF32;  // kF32, kBF16, kF16 or kF8E4M3
  int64_t rows = 0;           // out_features
  int64_t cols = 0;           // in_features
  const void* data = nullptr;  // [rows, cols] row-major, stored dtype

  // F8E4M3 only: w[r][c] = fp8[r][c] * scale_inv[ScaleRow(r) * scale_cols + c / block_cols].
  const float* scale_inv = nullptr;  // [num_scale_rows, scale_cols]
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

  bool empty() const { return data == nullptr; }
  // Dequantized element (slow path: references and tests).
  float At(int64_t r, int64_t c) const;
};

}  // namespace mimo
