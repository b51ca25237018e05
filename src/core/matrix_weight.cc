// Scalar element access for MatrixWeight (used by reference kernels and tests).
#include "core/matrix_weight.h"

#include "core/check.h"

namespace mimo {

float MatrixWeight::At(int64_t r, int64_t c) const {
  const int64_t i = r * cols + c;
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kBF16: return BF16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF8E4M3:
      return F8E4M3ToF32(static_cast<const uint8_t*>(data)[i]) *
             scale_inv[ScaleRow(r) * scale_cols + c / block_cols];
    case DType::kInt8:
      return static_cast<float>(Int8Code(r, c)) * Int8Scale(r, c / block_cols);
    case DType::kMxfp4: {
      const uint8_t byte = static_cast<const uint8_t*>(data)[r * RowBytes() + c / 2];
      return E2M1ToF32((c & 1) ? byte >> 4 : byte & 15) *
             E8M0ToF32(scale_e8m0[ScaleRow(r) * scale_cols + c / block_cols]);
    }
    default: MIMO_ABORT("MatrixWeight::At: unsupported dtype %d", static_cast<int>(dtype));
  }
}

}  // namespace mimo
