// `mimo bench membw|kernels|e2e|pool` (attention: bench_attention.cc): measured memory read
// bandwidth, Linear (GEMV/GEMM) speed per weight dtype with achieved GB/s against that bandwidth,
// decode against the bandwidth roofline, and the fork-join cost of a ThreadPool region. Results are
// recorded in docs/PERFORMANCE.md. model, batch, spec, grammar, serve, eval and niah (HTTP clients)
// live in bench_*.cc.
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/decode_session.h"
#include "cli/engine_setup.h"
#include "cli/roofline_probe.h"
#include "core/dtype.h"
#include "core/matrix_weight.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kernels/cpu_features.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace mimo::cli {
int RunBenchBatch(const Args& a);  // bench_batch.cc
int RunBenchSpec(const Args& a);   // bench_spec.cc
int RunBenchGrammar(int argc, char** argv);  // bench_grammar.cc
int RunBenchServe(int argc, char** argv);    // bench_serve.cc
int RunBenchEval(int argc, char** argv);     // bench_eval.cc
int RunBenchNiah(int argc, char** argv);     // bench_niah.cc
int RunBenchQuality(int argc, char** argv);  // bench_quality.cc
int RunBenchModel(const Args& a);            // bench_model.cc
int RunBenchAttention(const Args& a);        // bench_attention.cc
namespace {

double Now() { return BenchNow(); }

// Parses --clock wall|cpu; false on anything else.
bool SetClock(const Args& a, int threads) { return SetBenchClock(a.Get("clock", "wall"), threads); }

bool CpuClock() { return BenchClockIsCpu(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, AlignedFree>;

Buffer Allocate(size_t bytes) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
}

// Fills with pseudo-random bytes, in parallel (first touch spreads the pages over the threads).
void FillRandom(ThreadPool& pool, uint8_t* p, size_t bytes, uint64_t seed) {
  const int64_t words = static_cast<int64_t>(bytes / 8);
  pool.ParallelFor(words, [&](int64_t b, int64_t e, int) {
    uint64_t s = seed ^ (0x9e3779b97f4a7c15ull * (b + 1));
    for (int64_t i = b; i < e; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      std::memcpy(p + 8 * i, &s, 8);
    }
  });
  for (size_t i = words * 8; i < bytes; ++i) p[i] = static_cast<uint8_t>(i);
}

// Best-of-reps streaming read bandwidth in GB/s (1e9 bytes): the active table's read probe
// (64-byte loads on AVX-512, independent accumulators) on every thread of the pool.
double MeasureMembw(ThreadPool& pool, size_t bytes, int reps) {
  return MeasureReadBandwidth(pool, ActiveKernels(), bytes, reps, &Now);
}

int RunMembw(const Args& a) {
  const int threads = static_cast<int>(a.GetInt("threads", std::thread::hardware_concurrency()));
  const size_t mib = static_cast<size_t>(a.GetInt("size-mib", 1024));
  const int reps = static_cast<int>(a.GetInt("reps", 5));
  if (threads <= 0 || mib == 0 || reps <= 0) {
    std::fprintf(stderr, "bench membw: --threads, --size-mib and --reps must be positive\n");
    return 2;
  }
  if (!SetClock(a, threads)) {
    std::fprintf(stderr, "bench membw: --clock must be wall or cpu\n");
    return 2;
  }
  ThreadPool pool(threads);
  const double gbs = MeasureMembw(pool, mib << 20, reps);
  std::printf("membw: %.2f GB/s read (best of %d, %zu MiB, %d threads, %s clock)\n", gbs, reps, mib,
              threads, CpuClock() ? "cpu" : "wall");
  return 0;
}

// One dtype's test matrices: `copies` independent weights so GEMV streams from DRAM, not L3.
struct BenchWeights {
  std::vector<Buffer> data;
  std::vector<std::vector<float>> scales;
  std::vector<std::vector<uint8_t>> exps;  // MXFP4 E8M0 exponents
  std::vector<MatrixWeight> w;
  size_t bytes_per_matrix = 0;  // weight + scale bytes one GEMV reads
};

BenchWeights MakeBenchWeights(ThreadPool& pool, DType dt, int64_t rows, int64_t cols,
                              size_t working_set) {
  BenchWeights b;
  const size_t wbytes = dt == DType::kMxfp4 ? static_cast<size_t>(rows * ((cols + 1) / 2))
                                            : static_cast<size_t>(rows * cols) * DTypeSize(dt);
  const int copies = static_cast<int>(std::max<size_t>(1, (working_set + wbytes - 1) / wbytes));
  for (int i = 0; i < copies; ++i) {
    Buffer buf = Allocate(wbytes);
    FillRandom(pool, buf.get(), wbytes, 100 + i);
    MatrixWeight w;
    w.dtype = dt;
    w.rows = rows;
    w.cols = cols;
    // F32 / BF16: random sign and mantissa, exponent in [2^-15, 2^0] like real weights. Random
    // exponent bits also gave fp32 denormals, whose microcode assists on Intel hosts made the
    // F32 / BF16 rows measure the assists rather than the kernels.
    if (dt == DType::kBF16) {
      auto* h = reinterpret_cast<uint16_t*>(buf.get());
      for (size_t k = 0; k < wbytes / 2; ++k)
        h[k] = static_cast<uint16_t>((h[k] & 0x807f) | ((0x70 | ((h[k] >> 7) & 0xf)) << 7));
    } else if (dt == DType::kF16) {  // normal f16 values in [2^-14, 2^1), random sign/mantissa
      auto* h = reinterpret_cast<uint16_t*>(buf.get());
      for (size_t k = 0; k < wbytes / 2; ++k)
        h[k] = static_cast<uint16_t>((h[k] & 0x83ff) | ((1 + ((h[k] >> 10) & 0xf) % 15) << 10));
    } else if (dt == DType::kF32) {
      auto* f = reinterpret_cast<uint32_t*>(buf.get());
      for (size_t k = 0; k < wbytes / 4; ++k)
        f[k] = (f[k] & 0x807fffffu) | ((0x70u | ((f[k] >> 23) & 0xfu)) << 23);
    } else if (dt == DType::kF8E4M3) {
      // Real checkpoints hold no NaN codes (S.1111.111): quantizers saturate to +-448.
      for (size_t k = 0; k < wbytes; ++k) {
        if ((buf.get()[k] & 0x7f) == 0x7f) buf.get()[k] ^= 1;
      }
      w.block_cols = 128;
      w.scale_cols = (cols + 127) / 128;
      w.num_scale_rows = (rows + 127) / 128;
      b.scales.emplace_back(w.num_scale_rows * w.scale_cols, 0.01f);
      w.scale_inv = b.scales.back().data();
      w.scale_row.resize(rows);
      for (int64_t r = 0; r < rows; ++r) w.scale_row[r] = static_cast<int32_t>(r / 128);
    } else if (dt == DType::kMxfp4) {
      // Random codes (all 16 are finite) and exponents around 2^0, laid out as a checkpoint binds
      // them: one exponent row per weight row.
      w.block_cols = 32;
      w.block_rows = 1;
      w.scale_cols = (cols + 31) / 32;
      w.num_scale_rows = rows;
      b.exps.emplace_back(rows * w.scale_cols);
      for (size_t k = 0; k < b.exps.back().size(); ++k) {
        b.exps.back()[k] = static_cast<uint8_t>(122 + (k * 2654435761u >> 7) % 10);
      }
      w.scale_e8m0 = b.exps.back().data();
    } else if (dt == DType::kInt8) {  // random codes in [-127, 127], one scale per 32 of a row
      for (size_t k = 0; k < wbytes; ++k) {
        if (buf.get()[k] == 0x80) buf.get()[k] = 0x81;
      }
      w.block_cols = 32;
      w.block_rows = 1;
      w.scale_cols = (cols + 31) / 32;
      w.num_scale_rows = rows;
      b.scales.emplace_back(rows * w.scale_cols, BF16ToF32(F32ToBF16(0.001f)));  // a bf16 value
      w.scale_inv = b.scales.back().data();
    }
    w.data = buf.get();
    b.data.push_back(std::move(buf));
    b.w.push_back(std::move(w));
  }
  b.bytes_per_matrix = static_cast<size_t>(b.w[0].DataBytes() + b.w[0].ScaleBytes());
  return b;
}

int RunKernels(const Args& a) {
  const int threads = static_cast<int>(a.GetInt("threads", std::thread::hardware_concurrency()));
  const int64_t rows = a.GetInt("rows", 4096), cols = a.GetInt("cols", 4096);
  const int reps = static_cast<int>(a.GetInt("reps", 30));
  const size_t working_set = static_cast<size_t>(a.GetInt("working-set-mib", 256)) << 20;
  if (threads <= 0 || rows <= 0 || cols <= 0 || reps <= 0) {
    std::fprintf(stderr, "bench kernels: --threads, --rows, --cols and --reps must be positive\n");
    return 2;
  }
  if (!SetClock(a, threads)) {
    std::fprintf(stderr, "bench kernels: --clock must be wall or cpu\n");
    return 2;
  }
  std::vector<Isa> isas;
  const std::string isa_arg = a.Get("isa", "");
  if (isa_arg == "all") {
    isas = AvailableIsas();
    isas.erase(isas.begin());  // scalar is the test oracle, far too slow to be interesting here
  } else if (!isa_arg.empty()) {
    Isa isa;
    if (!ParseIsa(isa_arg.c_str(), &isa) || KernelsFor(isa) == nullptr) {
      std::fprintf(stderr,
                   "bench kernels: --isa %s is not available here (all|avx2|avx512|scalar)\n",
                   isa_arg.c_str());
      return 2;
    }
    isas.push_back(isa);
  } else {
    isas.push_back(ActiveKernels().isa);
  }
  ThreadPool pool(threads);
  ExecContext ctx{&pool};
  std::printf("%s", CpuFeatureReport().c_str());
  const double membw =
      a.Has("membw") ? a.GetDouble("membw", 0) : MeasureMembw(pool, size_t{1} << 30, 5);
  std::printf(
      "membw: %.2f GB/s (%s); matrix [%lld x %lld]; %d threads; GEMV working set %zu MiB; "
      "%s clock; median of %d\n",
      membw, a.Has("membw") ? "given" : "measured, 1 GiB, best of 5", static_cast<long long>(rows),
      static_cast<long long>(cols), threads, working_set >> 20, CpuClock() ? "cpu" : "wall", reps);
  // Small batches count as decode: T rows against weights streamed from DRAM (cycling through
  // the copies) should cost about one read of the weights, so GB/s at T = 2..16 should stay near
  // T = 1's. T=64 runs on one L3-resident matrix (compute-bound).
  constexpr int64_t kStreamT[] = {1, 2, 4, 8, 16};
  std::printf("%-7s %-8s %10s %8s %8s %8s %8s %8s %8s %13s\n", "isa", "dtype", "T=1 ms", "GB/s T=1",
              "T=2", "T=4", "T=8", "T=16", "%membw", "T=64 GFLOP/s");
  std::vector<float> x(64 * cols), y(64 * rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1 * i);
  for (Isa isa : isas) {
    const KernelTable& k = *KernelsFor(isa);
    // "F8 plain": FP8 codes without subnormals, marked (MarkFp8PlainBlocks): every decode tile
    // on the branch-free path; the F8_E4M3 row's uniform random codes leave every tile general.
    // "I8 mode": INT8 under --precision int8 (activations quantized; vpdpbusd, AVX2 vpmaddubsw);
    // "I8 tiled": the same with the rows interleaved in tiles (InterleaveInt8Rows), as the
    // engine lays them out for the mode.
    for (int v = 0; v < 9; ++v) {
      const DType dt =
          std::array{DType::kF32,    DType::kBF16, DType::kF16,  DType::kF8E4M3, DType::kF8E4M3,
                     DType::kMxfp4,  DType::kInt8, DType::kInt8, DType::kInt8}[v];
      const bool plain = v == 4, vnni = v >= 7, tiled = v == 8;
      if (vnni && k.linear_rows_int8 == nullptr) continue;
      ctx.precision = vnni ? Precision::kInt8 : Precision::kExact;
      BenchWeights bw = MakeBenchWeights(pool, dt, rows, cols, working_set);
      if (plain) {
        for (size_t i = 0; i < bw.w.size(); ++i) {
          auto* codes = static_cast<uint8_t*>(const_cast<void*>(bw.w[i].data));
          for (size_t k = 0; k < bw.bytes_per_matrix - bw.w[i].ScaleBytes(); ++k) {
            if ((codes[k] & 0x78) == 0) codes[k] |= 0x08;  // exponent 0 -> 1: no subnormals
          }
          MarkFp8PlainBlocks(&bw.w[i], &pool);
        }
      }
      if (tiled) {  // its bytes: padded rows, bf16 scales
        for (MatrixWeight& w : bw.w) InterleaveInt8Rows(&w, &pool);
        bw.bytes_per_matrix = static_cast<size_t>(bw.w[0].DataBytes() + bw.w[0].ScaleBytes());
      }
      const size_t n = bw.w.size();
      for (size_t i = 0; i < n; ++i) LinearOn(k, ctx, x.data(), 1, bw.w[i], y.data());  // warm-up
      double stream_ms[5], stream_gbs[5];
      for (int j = 0; j < 5; ++j) {
        std::vector<double> times;
        const int sreps = j == 0 ? reps : std::max(5, reps / 2);
        for (int r = 0; r < sreps; ++r) {
          const double t0 = Now();
          LinearOn(k, ctx, x.data(), kStreamT[j], bw.w[(r + j) % n], y.data());
          times.push_back(Now() - t0);
        }
        stream_ms[j] = Median(times) * 1e3;
        stream_gbs[j] = bw.bytes_per_matrix / Median(times) / 1e9;
      }
      std::vector<double> tt;
      for (int r = 0; r < std::max(3, reps / 10); ++r) {
        const double t0 = Now();
        LinearOn(k, ctx, x.data(), 64, bw.w[0], y.data());
        tt.push_back(Now() - t0);
      }
      const double gflops64 = 2.0 * rows * cols * 64 / Median(tt) / 1e9;
      std::printf("%-7s %-8s %10.3f %8.2f %8.2f %8.2f %8.2f %8.2f %7.0f%% %13.1f\n", IsaName(isa),
                  plain   ? "F8 plain"
                  : tiled ? "I8 tiled"
                  : vnni  ? "I8 mode"
                          : std::string(DTypeName(dt)).c_str(),
                  stream_ms[0],
                  stream_gbs[0], stream_gbs[1], stream_gbs[2], stream_gbs[3], stream_gbs[4],
                  100.0 * stream_gbs[0] / membw, gflops64);
      std::fflush(stdout);
    }
  }
  return 0;
}

// End to end decode against the bandwidth roofline (calm's habit): measure the machine's read
// bandwidth, then greedy-decode and report tok/s, active weight bytes per token, the achieved
// GB/s and its ratio to the measured bandwidth, plus a hash of the last logits row.
int RunE2e(const Args& a) {
  const int threads = static_cast<int>(a.GetInt("threads", std::thread::hardware_concurrency()));
  const int tokens = static_cast<int>(a.GetInt("tokens", 32));
  const int prompt = static_cast<int>(a.GetInt("prompt", 16));
  if (threads <= 0 || tokens <= 1 || prompt <= 0 || !a.Has("model")) {
    std::fprintf(stderr, "bench e2e: need --model; --threads, --prompt > 0, --tokens > 1\n");
    return 2;
  }
  LoadedModel lm;
  if (!LoadModelOrReport("bench e2e", a.Get("model"), threads, &lm, &a)) return 1;
  // --membw GBS skips the measurement (tests that only want the byte count).
  const double membw =
      a.Has("membw") ? a.GetDouble("membw", 0) : MeasureMembw(*lm.pool, size_t{1} << 30, 3);
  const ModelConfig& cfg = lm.model->config();
  auto kv = MakeKvCacheOrReport("bench e2e", a, *lm.model, 1, prompt + tokens, prompt);
  if (!kv) return 1;
  std::vector<int32_t> ids(prompt);
  for (int i = 0; i < prompt; ++i) ids[i] = (1 + 7919 * i) % cfg.vocab_size;
  DecodeSession session(lm, *kv, 1);
  const double t0 = Now();
  Status st = session.Prefill(ids, prompt);
  const double t1 = Now();
  Communicator* comm = lm.model->communicator();
  if (comm) comm->ResetStats();
  for (int i = 0; i < tokens && st.ok(); ++i) st = session.DecodeGreedy();
  const double t2 = Now();
  if (!st.ok()) {
    std::fprintf(stderr, "bench e2e: error: %s\n", st.message().c_str());
    return 1;
  }
  const float* logits = session.logits(0);  // [vocab] of the last step
  uint64_t hash = 1469598103934665603ull;   // FNV-1a over the last logits row
  for (const float* p = logits; p != logits + cfg.vocab_size; ++p) {
    const float f = *p;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    hash = (hash ^ u) * 1099511628211ull;
  }
  const double bytes = lm.model->ActiveWeightBytesPerToken();
  const double tps = tokens / (t2 - t1), gbs = tps * bytes / 1e9;
  std::printf("e2e: prefill %d tokens %.1f tok/s; decode %d tokens %.2f tok/s\n", prompt,
              prompt / (t1 - t0), tokens, tps);
  std::printf("e2e: %.1f MB active weights/token (%.0f bytes) -> %.2f GB/s achieved; %s membw "
              "%.2f GB/s; %.0f%% of roofline (roofline %.2f tok/s); %d threads; logits hash "
              "%016llx\n",
              bytes / 1e6, bytes, gbs, a.Has("membw") ? "given" : "measured", membw,
              100.0 * gbs / membw, membw * 1e9 / bytes, threads,
              static_cast<unsigned long long>(hash));
  const TpSlice& tp = lm.model->tp_slice();
  std::printf("e2e: %d rank(s)%s: rank 0 holds %.1f MB of weights and %.1f MB of KV cache\n",
              tp.size, tp.expert_parallel ? " (expert parallel)" : "",
              lm.model->WeightBytes() / 1e6, kv->memory_plan().total_bytes / 1e6);
  if (comm && tp.active()) {
    const CollectiveStats& cs = comm->stats();
    std::printf("e2e: collectives on rank 0 per decode token: %.1f calls, %.2f ms (%.0f%% of the "
                "token), %.1f KB received\n",
                static_cast<double>(cs.calls) / tokens, 1e3 * cs.seconds / tokens,
                100.0 * cs.seconds / (t2 - t1), cs.bytes / 1e3 / tokens);
  }
  return 0;
}

// Microseconds per ParallelFor region over `regions` back-to-back regions of n = threads items,
// each item spinning `work` multiply-adds, the caller doing work/4 more between regions (the
// shape of decode: many small regions with a little serial work in between).
int RunPool(const Args& a) {
  const int threads = static_cast<int>(a.GetInt("threads", 2));
  const int regions = static_cast<int>(a.GetInt("regions", 20000));
  if (threads <= 0 || regions <= 0) {
    std::fprintf(stderr, "bench pool: --threads and --regions must be positive\n");
    return 2;
  }
  ThreadPool pool(threads);
  std::vector<float> data(1 << 14, 1.0f);
  std::vector<float> sink(threads, 0.0f);
  float serial = 0.0f;
  for (int work : {0, 2000, 20000}) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < regions; ++r) {
      pool.ParallelFor(threads, [&](int64_t b, int64_t e, int t) {
        float s = 0.0f;
        for (int64_t i = b; i < e; ++i)
          for (int k = 0; k < work; ++k) s += data[k & 16383] * 1.0001f;
        sink[t] += s;
      });
      for (int k = 0; k < work / 4; ++k) serial += data[k & 16383];
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        regions;
    std::printf("pool: %d threads, %6d multiply-adds per item: %.2f us per region\n", threads, work,
                us);
  }
  for (float s : sink) serial += s;
  return serial == -1.0f ? 1 : 0;  // keeps the work observable
}

// Each mode's usage: `mimo bench MODE --help` prints its own (stdout, exit 0); `mimo bench
// --help` and an unknown mode print them all.
struct ModeUsage {
  const char* mode;
  const char* usage;  // from "mimo bench MODE"; continuation lines indented under it
};
constexpr ModeUsage kModeUsage[] = {
    {"membw", "mimo bench membw [--threads N] [--size-mib 1024] [--reps 5] [--clock wall|cpu]\n"},
    {"kernels",
     "mimo bench kernels [--threads N] [--rows 4096] [--cols 4096] [--reps 30]\n"
     "                   [--isa all|avx512|avx2|scalar] [--membw GB/s]\n"
     "                   [--working-set-mib 256] [--clock wall|cpu]\n"},
    {"model",
     "mimo bench model --model DIR [--prompt-len 512] [--gen-len 32] [--batch 1]\n"
     "                 [--threads N] [--json] [--clock wall|cpu] [--probe-mib 1024]\n"
     "                 [--precision exact|bf16|int8] [--ab-fp8-plain]\n"
     "                 [KV flags]\n"},
    {"attention",
     "mimo bench attention [--context 32768] [--threads N] [--kv-cache-dtype bf16]\n"
     "                     [--heads 32] [--kv-heads 4] [--head-dim 192]\n"
     "                     [--v-head-dim 128] [--block-size 16] [--queries 1]\n"
     "                     [--reps 20] [--probe-mib 1024]\n"
     "                     [--backend cpu_paged|reference] [--json]\n"},
    {"e2e",
     "mimo bench e2e --model DIR [--threads N] [--prompt 16] [--tokens 32]\n"
     "               [--membw GB/s] [--tensor-parallel-size N [--expert-parallel]]\n"
     "               [KV flags]\n"},
    {"pool", "mimo bench pool [--threads 2] [--regions 20000]\n"},
    {"batch",
     "mimo bench batch --model DIR [--concurrency 1,4,8,16] [--prompt-len 32]\n"
     "                 [--gen-len 32] [--seed S] [--threads N] [engine and KV flags]\n"},
    {"spec",
     "mimo bench spec --model DIR [--speculative mtp|dflash] [--num-speculative-tokens K]\n"
     "                [--prompt-len 64] [--gen-len 128] [--reps N] [--prompt TEXT]\n"
     "                [--speculative-draft-vocab N|FILE] [--speculative-draft-model DIR]\n"
     "                [--dflash-rope R] [--threads N] [engine and KV flags]\n"},
    {"grammar",
     "mimo bench grammar --model DIR [--schemas DIR] [--tokenizer DIR] [--walks 10]\n"
     "                   [--threads N] [--decode-tokens N] [--whitespace W]\n"
     "                   [--max-string-length N] [--budget-requests N] [--budget-tokens N]\n"
     "                   [--tools F[,F2...]] [KV flags]\n"},
    {"serve",
     "mimo bench serve --base-url URL --model NAME [--dataset random|FILE.jsonl]\n"
     "                 [--input-len 128] [--output-len 128] [--num-prompts 100]\n"
     "                 [--max-concurrency 1] [--request-rate inf] [--ignore-eos]\n"
     "                 [--seed 0] [--result-json F] [--endpoint completions|chat]\n"
     "                 [--api-key K] [--random-vocab-size 32000] [--temperature 0]\n"
     "                 [--sessions F1,F2,... [--label L]]  (replays multi-turn agent\n"
     "                 sessions, scripts/bench/agent_sessions.py: TTFT and reuse per turn)\n"},
    {"eval",
     "mimo bench eval --base-url URL --model NAME --dataset FILE.jsonl\n"
     "                [--endpoint chat|completions] [--num-fewshot 0] [--num-items N]\n"
     "                [--concurrency 4] [--extract gsm8k|last-number|exact|regex:RE|json:F]\n"
     "                [--temperature 0] [--max-tokens 256] [--output ITEMS.jsonl]\n"
     "                [--result-json F] [--api-key K]\n"
     "                [--compare-base-url URL2 [--compare-model NAME2] [--compare-api-key K2]]\n"},
    {"niah",
     "mimo bench niah --base-url URL --model NAME [--lengths 1024,2048,4096]\n"
     "                [--depths 0,0.25,0.5,0.75,1] [--trials 2] [--seed 0]\n"
     "                [--endpoint chat|completions] [--max-tokens 16] [--output F.json]\n"
     "                [--svg F.svg] [--api-key K]\n"},
    {"quality",
     "mimo bench quality --model A --reference B\n"
     "                   (--text FILE [--ctx 512] [--chunks N] [--parse-special] |\n"
     "                    --dataset FILE.jsonl) [--threads N] [--json OUT] [KV flags]\n"},
};

std::string AllUsage() {
  std::string out;
  for (const ModeUsage& m : kModeUsage) {
    // Continuation lines keep their place under the first: "usage: " and its blank twin are as
    // wide.
    std::string u = m.usage;
    for (size_t p = u.find('\n'); p != std::string::npos && p + 1 < u.size();
         p = u.find('\n', p + 1)) {
      u.insert(p + 1, "       ");
    }
    out += (out.empty() ? "usage: " : "       ") + u;
  }
  return out;
}

// `--help` / `-h` anywhere after the mode: that mode's usage on stdout. True when it was asked.
bool PrintedHelp(int argc, char** argv) {
  bool asked = false;
  for (int i = 1; i < argc; ++i)
    asked |= std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0;
  if (!asked) return false;
  const std::string sub = argc >= 2 ? argv[1] : "";
  for (const ModeUsage& m : kModeUsage) {
    if (sub == m.mode) {
      std::printf("usage: %s", m.usage);
      return true;
    }
  }
  std::printf("%s", AllUsage().c_str());
  return true;
}

int RunBench(int argc, char** argv) {
  if (PrintedHelp(argc, argv)) return 0;
  const std::string sub = argc >= 2 ? argv[1] : "";
  Args a;
  std::string err;
  if (sub == "batch") {
    std::vector<std::string> keys = {"model", "concurrency", "prompt-len", "gen-len", "seed"};
    for (auto& k : EngineKeys()) keys.push_back(k);
    if (!a.Parse(argc - 1, argv + 1, keys, EngineFlags(), &err)) {
      std::fprintf(stderr, "bench batch: %s\n", err.c_str());
      return 2;
    }
    return RunBenchBatch(a);
  }
  if (sub == "spec") {
    std::vector<std::string> keys = {"model", "prompt-len", "gen-len", "reps", "prompt"};
    for (auto& k : EngineKeys()) keys.push_back(k);
    if (!a.Parse(argc - 1, argv + 1, keys, EngineFlags(), &err)) {
      std::fprintf(stderr, "bench spec: %s\n", err.c_str());
      return 2;
    }
    return RunBenchSpec(a);
  }
  if (sub == "membw") {
    if (!a.Parse(argc - 1, argv + 1, {"threads", "size-mib", "reps", "clock"}, {}, &err)) {
      std::fprintf(stderr, "bench membw: %s\n", err.c_str());
      return 2;
    }
    return RunMembw(a);
  }
  if (sub == "model") {
    std::vector<std::string> keys = {"model", "threads",   "prompt-len", "gen-len",
                                     "batch", "probe-mib", "clock"};
    for (auto& k : KvCacheKeys()) keys.push_back(k);
    std::vector<std::string> flags = KvCacheFlags();
    flags.push_back("json");
    flags.push_back("ab-fp8-plain");
    if (!a.Parse(argc - 1, argv + 1, keys, flags, &err)) {
      std::fprintf(stderr, "bench model: %s\n", err.c_str());
      return 2;
    }
    return RunBenchModel(a);
  }
  if (sub == "e2e") {
    std::vector<std::string> keys = {"model", "threads", "tokens", "prompt", "membw"};
    for (auto& k : KvCacheKeys()) keys.push_back(k);
    if (!a.Parse(argc - 1, argv + 1, keys, KvCacheFlags(), &err)) {
      std::fprintf(stderr, "bench e2e: %s\n", err.c_str());
      return 2;
    }
    return RunE2e(a);
  }
  if (sub == "grammar") return RunBenchGrammar(argc - 1, argv + 1);
  if (sub == "serve") return RunBenchServe(argc - 1, argv + 1);
  if (sub == "eval") return RunBenchEval(argc - 1, argv + 1);
  if (sub == "niah") return RunBenchNiah(argc - 1, argv + 1);
  if (sub == "quality") return RunBenchQuality(argc - 1, argv + 1);
  if (sub == "pool") {
    if (!a.Parse(argc - 1, argv + 1, {"threads", "regions"}, {}, &err)) {
      std::fprintf(stderr, "bench pool: %s\n", err.c_str());
      return 2;
    }
    return RunPool(a);
  }
  if (sub == "attention") {
    if (!a.Parse(argc - 1, argv + 1,
                 {"context", "threads", "heads", "kv-heads", "head-dim", "v-head-dim", "block-size",
                  "queries", "reps", "backend", "kv-cache-dtype", "probe-mib"},
                 {"json"}, &err)) {
      std::fprintf(stderr, "bench attention: %s\n", err.c_str());
      return 2;
    }
    return RunBenchAttention(a);
  }
  if (sub == "kernels") {
    if (!a.Parse(argc - 1, argv + 1,
                 {"threads", "rows", "cols", "reps", "isa", "membw", "working-set-mib", "clock"},
                 {}, &err)) {
      std::fprintf(stderr, "bench kernels: %s\n", err.c_str());
      return 2;
    }
    return RunKernels(a);
  }
  std::fprintf(stderr, "%s", AllUsage().c_str());
  return 2;
}

}  // namespace

MIMO_CLI_COMMAND(
    "bench",
    "membw|kernels|attention|model|e2e|pool|batch|spec|grammar|serve|eval|niah|quality "
    "[--threads N] "
    "... (bandwidth, Linear, long-context attention, prefill/decode vs the machine's limits, "
    "decode roofline, fork-join cost, engine throughput, MTP costs, structured-output masks, an "
    "OpenAI-compatible server under load, a model's accuracy and long-context retrieval through "
    "a server, a quantized model's KL divergence from its reference)",
    RunBench);

}  // namespace mimo::cli
