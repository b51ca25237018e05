// Per-thread scratch memory for one forward step's temporaries (activations, q/k/v, expert
// inputs). A step's buffers are tens of MB at prefill sizes; as std::vector<float> they were
// zero-filled and, above glibc's mmap threshold, mapped and page-faulted anew in every layer
// (~8% of a 1024-token prefill in `perf`). Here they come from blocks that are kept and reused:
// in the steady state a step allocates nothing, touches no fresh pages and zeroes nothing.
//
//   ScratchFrame frame;                      // releases everything below at scope exit
//   float* q = frame.Floats(T * nh * dqk);   // [T, nh, dqk], uninitialized, 64-byte aligned
//
// Frames nest (a layer's frame inside the step's); memory is handed out stack-wise, so a frame
// must end before the frame it was opened in (scope order guarantees that). Growth never moves a
// live buffer: a request that does not fit opens a new block, and when the outermost frame ends
// the blocks are merged into one of their total size for the next step.
// Thread-safety: each thread has its own arena; a buffer must not outlive its frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace mimo {

class ScratchArena {
 public:
  static ScratchArena& ForThisThread();

  // n bytes, 64-byte aligned, uninitialized; valid until the frame that asked for it ends.
  void* Allocate(size_t n);
  size_t capacity() const;  // bytes held in all blocks (tests)
  int blocks() const { return static_cast<int>(blocks_.size()); }

 private:
  friend class ScratchFrame;
  struct Mark {
    size_t block = 0, offset = 0;
  };
  struct Free {
    void operator()(std::byte* p) const;
  };
  struct Block {
    std::unique_ptr<std::byte, Free> mem;
    size_t size = 0;
  };
  static Block NewBlock(size_t size);
  Mark mark() const { return {current_, offset_}; }
  void Release(Mark m);

  std::vector<Block> blocks_;
  size_t current_ = 0, offset_ = 0;  // next free byte: blocks_[current_] + offset_
  int depth_ = 0;                    // open frames
};

// A scope of the calling thread's arena: everything allocated through it (or through frames
// opened inside it) is released when it ends.
class ScratchFrame {
 public:
  ScratchFrame() : arena_(ScratchArena::ForThisThread()), mark_(arena_.mark()) { ++arena_.depth_; }
  ~ScratchFrame() {
    --arena_.depth_;
    arena_.Release(mark_);
  }
  ScratchFrame(const ScratchFrame&) = delete;
  ScratchFrame& operator=(const ScratchFrame&) = delete;

  template <class T>
  T* Alloc(int64_t n) {
    return static_cast<T*>(arena_.Allocate(static_cast<size_t>(n) * sizeof(T)));
  }
  float* Floats(int64_t n) { return Alloc<float>(n); }

 private:
  ScratchArena& arena_;
  ScratchArena::Mark mark_;
};

}  // namespace mimo
