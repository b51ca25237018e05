// ScratchArena / ScratchFrame: buffers are aligned, never overlap while live, are not moved by
// growth, are released stack-wise, and after one step the arena serves the same step again from
// one block without growing.
#include "core/scratch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

namespace mimo {
namespace {

struct Buf {
  float* p;
  int64_t n;
  float tag;
};

void Fill(const Buf& b) {
  for (int64_t i = 0; i < b.n; ++i) b.p[i] = b.tag + static_cast<float>(i % 1000);
}
bool Intact(const Buf& b) {
  for (int64_t i = 0; i < b.n; ++i) {
    if (b.p[i] != b.tag + static_cast<float>(i % 1000)) return false;
  }
  return true;
}

// One "step": an outer frame with nested frames, sizes from 100 floats to 3M (12 MB, beyond the
// first block), every buffer written and checked after the others were written.
size_t Step(std::vector<const void*>* addresses) {
  ScratchFrame step;
  std::vector<Buf> live;
  auto take = [&](ScratchFrame& f, int64_t n) {
    Buf b{f.Floats(n), n, static_cast<float>(live.size() * 10000)};
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.p) % 64, 0u);
    Fill(b);
    live.push_back(b);
    if (addresses) addresses->push_back(b.p);
  };
  take(step, 100);
  take(step, 300000);
  {
    ScratchFrame layer;
    take(layer, 3000000);
    take(layer, 7);
    {
      ScratchFrame inner;
      take(inner, 500000);
      for (const Buf& b : live) EXPECT_TRUE(Intact(b));
    }
    live.pop_back();
    take(layer, 1000000);  // reuses the inner frame's memory
    for (const Buf& b : live) EXPECT_TRUE(Intact(b));
  }
  live.resize(2);
  take(step, 2000000);
  for (const Buf& b : live) EXPECT_TRUE(Intact(b));
  return ScratchArena::ForThisThread().capacity();
}

TEST(Scratch, FramesNestGrowWithoutMovingAndReuseOneBlock) {
  std::thread([] {  // a fresh thread: a fresh arena
    ScratchArena& a = ScratchArena::ForThisThread();
    EXPECT_EQ(a.blocks(), 0);
    std::vector<const void*> first, second, third;
    Step(&first);
    EXPECT_EQ(a.blocks(), 1) << "blocks merged when the outermost frame ended";
    const size_t cap = a.capacity();
    // Most bytes live at once: 100 + 300000 + 3000000 + 7 + 1000000 floats (each rounded to 64 B).
    EXPECT_GE(cap, (100 + 300000 + 3000000 + 7 + 1000000) * sizeof(float));
    Step(&second);
    EXPECT_EQ(a.blocks(), 1);
    EXPECT_EQ(a.capacity(), cap) << "the same step again does not grow the arena";
    Step(&third);
    EXPECT_EQ(second, third) << "steady state: the same addresses every step";
  })
      .join();
}

}  // namespace
}  // namespace mimo
