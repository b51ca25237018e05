// DraftHead: the output head a drafter scores its proposals with - the target's lm_head, or only
// its rows for a draft vocabulary (the tokens a model actually writes), which makes each draft row
// cost |draft vocab| / vocab of a full lm_head. Row j of the head scores token token(j). Used by
// the MTP and DFlash speculators alike.
#pragma once

#include <cstdint>
#include <vector>

#include "core/matrix_weight.h"
#include "core/status.h"

namespace mimo {

class DraftHead {
 public:
  // vocab empty: the whole lm_head (no copy). Otherwise the sorted, de-duplicated ids' rows are
  // gathered into memory the head owns (FP8 rows keep their scale rows; rows of an int8 head
  // interleaved in tiles are gathered row-major with their scales); an id outside the
  // vocabulary is an error.
  static StatusOr<DraftHead> Create(const MatrixWeight& lm_head, std::vector<int32_t> vocab);

  const MatrixWeight& weight() const { return head_; }  // [size(), hidden]
  int64_t size() const { return head_.rows; }
  int32_t token(int64_t row) const { return ids_.empty() ? static_cast<int32_t>(row) : ids_[row]; }

 private:
  static DraftHead GatherInt8Tiled(const MatrixWeight& lm_head, std::vector<int32_t> ids);

  std::vector<int32_t> ids_;  // [size()] or empty for the whole vocabulary
  MatrixWeight head_;
};

}  // namespace mimo
