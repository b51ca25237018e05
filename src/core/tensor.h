// TensorView: a non-owning, row-major view (pointer + dtype + shape). Tensor: an owning,
// 64-byte-aligned buffer that hands out views. Copying a Tensor is explicit (Clone()).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace mimo {

using Shape = std::vector<int64_t>;

inline int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string ShapeToString(const Shape& s);  // "[a, b, c]"

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;

  int64_t numel() const { return NumElements(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  bool empty() const { return data == nullptr; }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

// Frees a Tensor buffer: an anonymous mapping of mapped_bytes, or an aligned_alloc block.
struct TensorBufferDeleter {
  size_t mapped_bytes = 0;
  void operator()(void* p) const;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape) { Reset(dtype, std::move(shape)); }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  // (Re)allocates, zero-filled (buffers of 1 MiB and more lazily, as zero pages).
  void Reset(DType dtype, Shape shape);
  Tensor Clone() const;

  TensorView view() const { return TensorView{buf_.get(), dtype_, shape_}; }
  void* data() const { return buf_.get(); }
  template <typename T>
  T* as() const { return static_cast<T*>(static_cast<void*>(buf_.get())); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }

 private:
  static constexpr size_t kMapThreshold = size_t{1} << 20;
  std::unique_ptr<void, TensorBufferDeleter> buf_;
  DType dtype_ = DType::kF32;
  Shape shape_;
};

}  // namespace mimo
