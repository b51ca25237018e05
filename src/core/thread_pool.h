// A persistent fork-join pool. ParallelFor splits [0, n) into contiguous chunks, one per worker;
// the calling thread takes part. Not re-entrant: a task must not call ParallelFor on the same pool.
// Thread-safety: one caller at a time (the engine thread).
//
// Decode runs 48 (bench-flash) to 288 (MiMo-V2-Flash) short parallel regions per token, so a
// region's start and end are signalled through atomics that the other side spins on for a short
// while (kSpinMicros) before falling back to a condition variable: a futex wake-up per region
// (tens of microseconds on a VM) would otherwise be a visible share of a token. Idle workers
// block, so an idle pool costs nothing.
// A worker reports the end of its chunk in its own cache line (done_), never in a shared counter:
// P workers decrementing one counter move its line between cores P times in a row, which at 64-128
// threads (two sockets) would cost more per region than the region's own memory traffic
// (docs/PERFORMANCE.md, "Synchronisation per token").
// A caller that stops spinning and a worker that finishes meet as in Dekker's algorithm: each
// stores (caller_waiting_ / its done_ slot), then a seq_cst fence, then loads the other's flag, so
// at least one of them sees the other. The fences are explicit rather than seq_cst stores and
// loads: on AArch64 those compile to STLR then LDAR with no barrier between, which hardware
// orders but qemu-user on an x86 host does not (its store can wait in the host's store buffer
// past the load); both sides then missed each other and the caller slept forever, seen as
// one-in-hundreds hangs of the emulated tests (core_tests ThreadPool.* under
// scripts/test-aarch64.sh reproduces it without the fences). A fence is a DMB ISH, which qemu
// emulates with a full host barrier, and on x86 the same MFENCE a seq_cst store costs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mimo {

class ThreadPool {
 public:
  // Total threads including the caller; <= 0 -> hardware. At most MaxThreads() (checked: callers
  // validate what users ask for against it first, e.g. --threads in tools/cli/model_loading.h).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end, thread_index) over disjoint ranges covering [0, n).
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

  // ParallelFor calls with n > 0 so far: the fork-join regions a workload runs, whatever the
  // thread count (a region that runs inline on one thread forks on more). `mimo bench model`
  // multiplies regions per token by the measured cost of an empty region (docs/PERFORMANCE.md,
  // "Synchronisation per token").
  uint64_t regions() const { return regions_; }

  static constexpr int kSpinMicros = 100;

  // The largest pool: kMaxThreads, or the machine's hardware threads where it has more. The
  // biggest two-socket x86 servers have 768 (2 x 192 cores x 2 SMT); a pool beyond the hardware
  // only adds fork-join cost to every region (4096 threads on 2 cores decode at 0.1 tok/s), and
  // tens of thousands exhaust the process's thread limit (std::thread throws, the process aborts).
  static constexpr int kMaxThreads = 1024;
  static int MaxThreads();

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  // Published before generation_ is bumped (release) and read after it is seen (acquire).
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> generation_{0};
  // done_[i].gen == generation_ once worker i + 1 has finished its chunk of that region.
  struct alignas(64) DoneSlot {
    std::atomic<uint64_t> gen{0};
  };
  std::unique_ptr<DoneSlot[]> done_;
  std::atomic<bool> caller_waiting_{false};  // the caller sleeps on cv_done_ (Dekker with done_)
  std::atomic<bool> stop_{false};
  uint64_t regions_ = 0;  // only the caller's thread touches it
};

// How every step multiplies activations by BF16 and FP8 weights (`--precision`).
// kExact: fp32 activations (the default).
// kBf16: activations rounded to bf16 for every such GEMM, decode and prompt alike, where the CPU
// has AVX512_BF16 (vdpbf16ps: twice the multiplies per instruction, half the bytes of x). On the
// trained nano model the argmax is kept at 99.5% of the positions and a logit row moves by a
// median 1.5e-3 of its largest value, but by up to 0.3 at a few percent of positions
// (tests/python/test_bf16_prefill.py, test_bf16_mode.py): opt-in. Each mode is batch invariant
// on its own: a token's output does not depend on the step it ran in, but differs between modes.
// kInt8: for int8 weights (--experts/--dense/--lm-head int8) where the CPU has AVX512_VNNI, each
// token's activations quantized to int8 by the weights' own rule (per 32 columns) and the block
// dot products exact in integers (KernelTable::linear_rows_int8); other weights run exact.
enum class Precision : uint8_t { kExact, kBf16, kInt8 };

// Everything compute needs, passed by reference (never a global).
struct ExecContext {
  ThreadPool* pool = nullptr;
  Precision precision = Precision::kExact;
};

}  // namespace mimo
