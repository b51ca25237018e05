// Scale-row arithmetic of spec section 4 at the real MiMo-V2 sizes: the scale shapes the spec
// lists for Flash, V2.5 and V2.5-Pro, and the Flash K/V straddle mapping spelled out in the spec.
#include "io/fp8_layout.h"

#include <gtest/gtest.h>

namespace mimo {
namespace {

// Per-section geometry from heads (section = nh/tp Q heads, nkv/tp K and V heads).
QkvSections Geometry(int tp, int nh, int nkv, int dqk = 192, int dv = 128) {
  QkvSections g;
  g.tp = tp;
  g.q_rows = static_cast<int64_t>(nh / tp) * dqk;
  g.k_rows = static_cast<int64_t>(nkv / tp) * dqk;
  g.v_rows = static_cast<int64_t>(nkv / tp) * dv;
  g.block_rows = 128;
  return g;
}

TEST(Fp8Layout, FlashSeparateScaleShapes) {
  // Spec table: full layers q [96,32], k [8,32] (NOT 6), v [4,32]; SWA k [12,32], v [8,32].
  const QkvSections full = Geometry(4, 64, 4);
  EXPECT_EQ(SectionScaleRowCount(full, QkvPart::kQ), 96);
  EXPECT_EQ(SectionScaleRowCount(full, QkvPart::kK), 8);
  EXPECT_EQ(SectionScaleRowCount(full, QkvPart::kV), 4);
  const QkvSections swa = Geometry(4, 64, 8);
  EXPECT_EQ(SectionScaleRowCount(swa, QkvPart::kK), 12);
  EXPECT_EQ(SectionScaleRowCount(swa, QkvPart::kV), 8);
}

TEST(Fp8Layout, FusedScaleShapes) {
  // Spec: V2.5 full [108] = 4 x 27, V2.5 SWA [116] = 4 x 29, Pro [216] = 8 x 27.
  EXPECT_EQ(Geometry(4, 64, 4).tp * Geometry(4, 64, 4).blocks_per_section(), 108);
  EXPECT_EQ(Geometry(4, 64, 8).tp * Geometry(4, 64, 8).blocks_per_section(), 116);
  EXPECT_EQ(Geometry(8, 128, 8).tp * Geometry(8, 128, 8).blocks_per_section(), 216);
  EXPECT_EQ(Geometry(4, 64, 4).section_rows() * 4, 13568);   // V2.5 full qkv_proj rows
  EXPECT_EQ(Geometry(4, 64, 8).section_rows() * 4, 14848);   // V2.5 SWA
  EXPECT_EQ(Geometry(8, 128, 8).section_rows() * 8, 27136);  // Pro
}

TEST(Fp8Layout, FlashKvStraddleMatchesSpec) {
  // Spec: for KV head h, K rows 0..127 -> k_s[2h]; K 128..191 and V 0..63 -> k_s[2h+1];
  // V 64..127 -> v_s[h].
  const QkvSections g = Geometry(4, 64, 4);
  const auto k = SectionScaleRows(g, QkvPart::kK);
  const auto v = SectionScaleRows(g, QkvPart::kV);
  ASSERT_EQ(k.size(), 768u);
  ASSERT_EQ(v.size(), 512u);
  for (int h = 0; h < 4; ++h) {
    for (int r = 0; r < 192; ++r) {
      const ScaleRowRef ref = k[192 * h + r];
      EXPECT_EQ(ref.part, QkvPart::kK);
      EXPECT_EQ(ref.row, r < 128 ? 2 * h : 2 * h + 1) << "k head " << h << " row " << r;
    }
    for (int r = 0; r < 128; ++r) {
      const ScaleRowRef ref = v[128 * h + r];
      EXPECT_EQ(ref.part, r < 64 ? QkvPart::kK : QkvPart::kV) << "v head " << h << " row " << r;
      EXPECT_EQ(ref.row, r < 64 ? 2 * h + 1 : h) << "v head " << h << " row " << r;
    }
  }
  // Q of a section is block-aligned: plain per-tensor blocks.
  const auto q = SectionScaleRows(g, QkvPart::kQ);
  for (int r = 0; r < 12288; r += 97) {
    EXPECT_EQ(q[r].part, QkvPart::kQ);
    EXPECT_EQ(q[r].row, r / 128);
  }
}

TEST(Fp8Layout, AlignedSectionsEqualUniform) {
  // Flash SWA and MTP projections are block-aligned: the section grid is the uniform grid.
  const QkvSections g = Geometry(4, 64, 8);
  for (QkvPart p : {QkvPart::kQ, QkvPart::kK, QkvPart::kV}) {
    const auto refs = SectionScaleRows(g, p);
    const auto uni = UniformScaleRows(g.tp * g.rows(p), 128);
    for (size_t r = 0; r < refs.size(); ++r) {
      ASSERT_EQ(refs[r].part, p);
      ASSERT_EQ(refs[r].row, uni[r]);
    }
  }
}

TEST(Fp8Layout, FusedRowsAndScales) {
  const QkvSections g = Geometry(4, 64, 4);  // sections of 3392 rows, 27 scale rows
  // K row of kv head 2, row 150: section 2, local row 3072 + 150.
  EXPECT_EQ(FusedRowOf(g, QkvPart::kK, 2 * 192 + 150), 2 * 3392 + 3072 + 150);
  EXPECT_EQ(FusedRowOf(g, QkvPart::kQ, 3072 + 5), 3392 + 5);
  EXPECT_EQ(FusedRowOf(g, QkvPart::kV, 3 * 128 + 127), 3 * 3392 + 3264 + 127);
  const auto v = FusedSectionScaleRows(g, QkvPart::kV);
  EXPECT_EQ(v[3 * 128 + 0], 3 * 27 + 25);   // V 0..63 share K's last block
  EXPECT_EQ(v[3 * 128 + 64], 3 * 27 + 26);  // V 64..127: the block with phantom rows
  const auto flat = FusedUniformScaleRows(g, QkvPart::kV);
  EXPECT_EQ(flat[128 + 0], (3392 + 3264) / 128);
}

}  // namespace
}  // namespace mimo
