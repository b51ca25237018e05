// DraftHead (see draft_head.h).
#include "speculative/draft_head.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace mimo {

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
