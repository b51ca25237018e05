#include "core/scratch.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace mimo {
namespace {
constexpr size_t kAlign = 64;
constexpr size_t kMinBlock = size_t{1} << 20;
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void ScratchArena::Free::operator()(std::byte* p) const { std::free(p); }

ScratchArena::Block ScratchArena::NewBlock(size_t size) {
  Block b;
  b.size = size;  // a multiple of kAlign, as aligned_alloc requires
  b.mem.reset(static_cast<std::byte*>(std::aligned_alloc(kAlign, size)));
  if (!b.mem) throw std::bad_alloc();
  return b;
}

ScratchArena& ScratchArena::ForThisThread() {
  thread_local ScratchArena arena;
  return arena;
}

size_t ScratchArena::capacity() const {
  size_t c = 0;
  for (const Block& b : blocks_) c += b.size;
  return c;
}

void* ScratchArena::Allocate(size_t n) {
  n = RoundUp(std::max<size_t>(n, 1));
  while (current_ < blocks_.size() && offset_ + n > blocks_[current_].size) {
    ++current_;  // the rest of this block stays unused until the frame that filled it ends
    offset_ = 0;
  }
  if (current_ == blocks_.size()) {
    const size_t last = blocks_.empty() ? 0 : blocks_.back().size;
    blocks_.push_back(NewBlock(std::max({n, kMinBlock, last})));
    offset_ = 0;
  }
  void* p = blocks_[current_].mem.get() + offset_;
  offset_ += n;
  return p;
}

void ScratchArena::Release(Mark m) {
  current_ = m.block;
  offset_ = m.offset;
  if (depth_ != 0 || blocks_.size() <= 1) return;
  // The outermost frame ended with more than one block: replace them by one block of their total
  // size, which holds everything the step had live at once, so the next step fits without growing.
  const size_t total = capacity();
  blocks_.clear();
  blocks_.push_back(NewBlock(total));
  current_ = 0;
  offset_ = 0;
}

}  // namespace mimo
