// Owning tensor allocation (aligned, zeroed) and shape printing.
#include "core/tensor.h"

#include <cstring>

namespace mimo {

std::string ShapeToString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

void Tensor::Reset(DType dtype, Shape shape) {
  dtype_ = dtype;
  shape_ = std::move(shape);
  size_t bytes = nbytes();
  size_t alloc = (bytes + 63) / 64 * 64;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(64, alloc);
  MIMO_CHECK(p != nullptr, "out of memory allocating %zu bytes", alloc);
  std::memset(p, 0, alloc);
  buf_.reset(p);
}

Tensor Tensor::Clone() const {
  Tensor t(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data(), data(), nbytes());
  return t;
}

}  // namespace mimo
