// Owning tensor allocation (aligned, zeroed) and shape printing.
#include "core/tensor.h"

#include <sys/mman.h>

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

void TensorBufferDeleter::operator()(void* p) const {
  if (mapped_bytes > 0) {
    munmap(p, mapped_bytes);
  } else {
    std::free(p);
  }
}

void Tensor::Reset(DType dtype, Shape shape) {
  dtype_ = dtype;
  shape_ = std::move(shape);
  size_t bytes = nbytes();
  size_t alloc = (bytes + 63) / 64 * 64;
  if (alloc == 0) alloc = 64;
  // Large buffers (KV-cache pools sized for the worst case) are anonymous mappings: zero pages
  // are committed only when first written, so an unused budget costs no memory.
  if (alloc >= kMapThreshold) {
    void* p = mmap(nullptr, alloc, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    MIMO_CHECK(p != MAP_FAILED, "out of memory mapping %zu bytes", alloc);
    // 2 MiB pages where the kernel grants them: decode at long context reads every cached key's
    // K/V rows (one kv head's few hundred bytes per 4 KiB page otherwise: a TLB miss each, and
    // prefetches that stop at page walks). Pages are still committed only when first written.
    madvise(p, alloc, MADV_HUGEPAGE);
    buf_ = std::unique_ptr<void, TensorBufferDeleter>(p, TensorBufferDeleter{alloc});
    return;
  }
  void* p = std::aligned_alloc(64, alloc);
  MIMO_CHECK(p != nullptr, "out of memory allocating %zu bytes", alloc);
  std::memset(p, 0, alloc);
  buf_ = std::unique_ptr<void, TensorBufferDeleter>(p, TensorBufferDeleter{0});
}

Tensor Tensor::Clone() const {
  Tensor t(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data(), data(), nbytes());
  return t;
}

}  // namespace mimo
