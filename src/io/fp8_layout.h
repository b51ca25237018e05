// FP8 block-scale grids (spec section 4) as pure row arithmetic: for every output row of a weight,
// which scale row applies. No file access; io/checkpoint.cc decides the grid from tensor shapes
// and uses these maps to fill MatrixWeight::scale_row.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace mimo {

// How a checkpoint laid out the FP8 scales of a weight (reported by `mimo inspect`).
enum class Fp8Layout : uint8_t {
  kUniform,            // one scale row per block_rows rows of the tensor itself
  kKvTpSection,        // separate q/k/v quantized as fused [Q_r; K_r; V_r] per TP section (Flash
                       // full-attention K/V: a block may straddle K and V)
  kFusedQkvTpSection,  // fused qkv_proj, ceil(section_rows / block_rows) scale rows per section
  kFusedQkvUniform,    // fused qkv_proj quantized as one plain tensor (no TP sections)
  kCount
};
std::string_view Fp8LayoutName(Fp8Layout layout);

enum class QkvPart : uint8_t { kQ = 0, kK = 1, kV = 2 };

// Row geometry of q/k/v split into `tp` tensor-parallel sections of [Q_r; K_r; V_r] rows.
struct QkvSections {
  int64_t tp = 1;
  int64_t q_rows = 0;  // Q_r = (num_attention_heads / tp) * head_dim
  int64_t k_rows = 0;  // K_r = (num_key_value_heads / tp) * head_dim
  int64_t v_rows = 0;  // V_r = (num_key_value_heads / tp) * v_head_dim
  int64_t block_rows = 128;

  int64_t rows(QkvPart p) const {
    return p == QkvPart::kQ ? q_rows : p == QkvPart::kK ? k_rows : v_rows;
  }
  int64_t section_rows() const { return q_rows + k_rows + v_rows; }
  int64_t blocks_per_section() const { return CeilDiv(section_rows(), block_rows); }
  // First 128-row block of a section whose first row lies in part p (blocks are "owned" by the
  // part in which they start; the owner's scale tensor stores the block's scale row).
  int64_t first_block(QkvPart p) const;
  int64_t blocks_owned(QkvPart p) const;  // per section

  static int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
};

// Scale row of a row under a grid that may point into another part's scale tensor.
struct ScaleRowRef {
  QkvPart part;  // whose weight_scale_inv holds the row
  int32_t row;   // row in that tensor
};

// Per-TP-section grid of separate q/k/v tensors: scale rows each tensor stores
// (tp * blocks_owned), and for each row of `part` (rows in head order, i.e. section by section)
// where its scale row lives. Flash full layers (Q_r 3072, K_r 192, V_r 128): k stores 2 rows per
// section, v 1; V rows 0..63 of a section use k's second row, V rows 64..127 use v's row.
int64_t SectionScaleRowCount(const QkvSections& g, QkvPart part);
std::vector<ScaleRowRef> SectionScaleRows(const QkvSections& g, QkvPart part);

// Fused qkv_proj [tp * section_rows, cols]: the fused row holding row r of `part`, and for each
// row of `part` the row of the fused scale tensor (tp * blocks_per_section rows in all).
int64_t FusedRowOf(const QkvSections& g, QkvPart part, int64_t r);
std::vector<int32_t> FusedSectionScaleRows(const QkvSections& g, QkvPart part);
// Fused qkv_proj quantized as one plain tensor: fused_row / block_rows.
std::vector<int32_t> FusedUniformScaleRows(const QkvSections& g, QkvPart part);

// Plain grid: row r uses scale row r / block_rows.
std::vector<int32_t> UniformScaleRows(int64_t rows, int64_t block_rows);

}  // namespace mimo
