// Row -> scale-row maps of the FP8 grids in spec section 4.
#include "io/fp8_layout.h"

#include "core/check.h"

namespace mimo {

std::string_view Fp8LayoutName(Fp8Layout layout) {
  switch (layout) {
    case Fp8Layout::kUniform:
      return "uniform";
    case Fp8Layout::kKvTpSection:
      return "kv-tp-section";
    case Fp8Layout::kFusedQkvTpSection:
      return "fused-qkv-tp-section";
    case Fp8Layout::kFusedQkvUniform:
      return "fused-qkv-uniform";
    default:
      return "?";
  }
}

int64_t QkvSections::first_block(QkvPart p) const {
  // The first block whose start row (a multiple of block_rows) is >= the part's first row.
  switch (p) {
    case QkvPart::kQ:
      return 0;
    case QkvPart::kK:
      return CeilDiv(q_rows, block_rows);
    case QkvPart::kV:
      return CeilDiv(q_rows + k_rows, block_rows);
  }
  return 0;
}

int64_t QkvSections::blocks_owned(QkvPart p) const {
  switch (p) {
    case QkvPart::kQ:
      return first_block(QkvPart::kK);
    case QkvPart::kK:
      return first_block(QkvPart::kV) - first_block(QkvPart::kK);
    case QkvPart::kV:
      return blocks_per_section() - first_block(QkvPart::kV);
  }
  return 0;
}

namespace {

int64_t PartOffset(const QkvSections& g, QkvPart p) {
  return p == QkvPart::kQ ? 0 : p == QkvPart::kK ? g.q_rows : g.q_rows + g.k_rows;
}

// Row within its section of row r of part p, and the section index.
void Locate(const QkvSections& g, QkvPart p, int64_t r, int64_t* section, int64_t* local) {
  const int64_t pr = g.rows(p);
  *section = r / pr;
  *local = PartOffset(g, p) + r % pr;
}

}  // namespace

int64_t SectionScaleRowCount(const QkvSections& g, QkvPart part) {
  return g.tp * g.blocks_owned(part);
}

std::vector<ScaleRowRef> SectionScaleRows(const QkvSections& g, QkvPart part) {
  MIMO_CHECK(g.tp > 0 && g.block_rows > 0 && g.rows(part) > 0, "bad QkvSections");
  const int64_t n = g.tp * g.rows(part);
  std::vector<ScaleRowRef> out(n);
  const int64_t first_k = g.first_block(QkvPart::kK), first_v = g.first_block(QkvPart::kV);
  for (int64_t r = 0; r < n; ++r) {
    int64_t s, local;
    Locate(g, part, r, &s, &local);
    const int64_t b = local / g.block_rows;
    QkvPart owner = b < first_k ? QkvPart::kQ : b < first_v ? QkvPart::kK : QkvPart::kV;
    const int64_t idx = s * g.blocks_owned(owner) + (b - g.first_block(owner));
    out[r] = ScaleRowRef{owner, static_cast<int32_t>(idx)};
  }
  return out;
}

int64_t FusedRowOf(const QkvSections& g, QkvPart part, int64_t r) {
  int64_t s, local;
  Locate(g, part, r, &s, &local);
  return s * g.section_rows() + local;
}

std::vector<int32_t> FusedSectionScaleRows(const QkvSections& g, QkvPart part) {
  const int64_t n = g.tp * g.rows(part);
  std::vector<int32_t> out(n);
  for (int64_t r = 0; r < n; ++r) {
    int64_t s, local;
    Locate(g, part, r, &s, &local);
    out[r] = static_cast<int32_t>(s * g.blocks_per_section() + local / g.block_rows);
  }
  return out;
}

std::vector<int32_t> FusedUniformScaleRows(const QkvSections& g, QkvPart part) {
  const int64_t n = g.tp * g.rows(part);
  std::vector<int32_t> out(n);
  for (int64_t r = 0; r < n; ++r) {
    out[r] = static_cast<int32_t>(FusedRowOf(g, part, r) / g.block_rows);
  }
  return out;
}

std::vector<int32_t> UniformScaleRows(int64_t rows, int64_t block_rows) {
  std::vector<int32_t> out(rows);
  for (int64_t r = 0; r < rows; ++r) out[r] = static_cast<int32_t>(r / block_rows);
  return out;
}

}  // namespace mimo
