// DraftHead (see draft_head.h).
#include "speculative/draft_head.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace mimo {

// An int8 lm_head interleaved in tiles (kernels.h InterleaveInt8Rows): the chosen rows' codes and
// scales gathered into a row-major head of their own (one scale row per row), which the int8
// mode's kernels read as well.
DraftHead DraftHead::GatherInt8Tiled(const MatrixWeight& lm, std::vector<int32_t> ids) {
  DraftHead h;
  h.head_ = lm;
  struct Buffers {
    std::vector<int8_t> codes;  // [ids, cols]
    std::vector<float> scales;  // [ids, scale_cols]
  };
  auto buf = std::make_shared<Buffers>();
  const int64_t n = static_cast<int64_t>(ids.size()), cols = lm.cols, nb = lm.scale_cols;
  buf->codes.resize(static_cast<size_t>(n * cols));
  buf->scales.resize(static_cast<size_t>(n * nb));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < cols; ++c) buf->codes[j * cols + c] = lm.Int8Code(ids[j], c);
    for (int64_t b = 0; b < nb; ++b) buf->scales[j * nb + b] = lm.Int8Scale(ids[j], b);
  }
  h.head_.data = buf->codes.data();
  h.head_.scale_inv = buf->scales.data();
  h.head_.owned = buf;
  h.head_.rows = n;
  h.head_.num_scale_rows = n;
  h.head_.scale_row.clear();
  h.head_.int8_tile_rows = 0;
  h.head_.int8_scale_bf16 = nullptr;
  h.ids_ = std::move(ids);
  return h;
}

StatusOr<DraftHead> DraftHead::Create(const MatrixWeight& lm, std::vector<int32_t> ids) {
  DraftHead h;
  h.head_ = lm;
  if (ids.empty()) return h;
  if (lm.dtype == DType::kMxfp4) {
    return InvalidArgument("a draft vocabulary over an MXFP4 lm_head is not supported");
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int32_t id : ids) {
    if (id < 0 || id >= lm.rows) {
      return InvalidArgument("draft vocabulary: token id %d is outside the vocabulary [0, %lld)",
                             id, static_cast<long long>(lm.rows));
    }
  }
  if (lm.dtype == DType::kInt8 && lm.int8_tile_rows != 0) return GatherInt8Tiled(lm, std::move(ids));
  const size_t row_bytes = static_cast<size_t>(lm.cols) * DTypeSize(lm.dtype);
  auto bytes = std::shared_ptr<uint8_t[]>(new uint8_t[ids.size() * row_bytes]);
  for (size_t j = 0; j < ids.size(); ++j) {
    std::memcpy(bytes.get() + j * row_bytes,
                static_cast<const uint8_t*>(lm.data) + static_cast<size_t>(ids[j]) * row_bytes,
                row_bytes);
  }
  h.head_.data = bytes.get();
  h.head_.owned = bytes;
  h.head_.rows = static_cast<int64_t>(ids.size());
  if (lm.dtype == DType::kF8E4M3 || lm.dtype == DType::kInt8) {
    // each gathered row keeps the scale row of its source row
    std::vector<int32_t> scale_row(ids.size());
    for (size_t j = 0; j < ids.size(); ++j)
      scale_row[j] = static_cast<int32_t>(lm.ScaleRow(ids[j]));
    h.head_.scale_row = std::move(scale_row);
  }
  h.ids_ = std::move(ids);
  return h;
}

}  // namespace mimo
