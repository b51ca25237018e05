// Shared by the CLI subcommands that run the model: load it, make the thread pool and the paged
// KV cache from the common flags, report errors as one line on stderr.
#pragma once

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/memory_plan.h"
#include "core/memory_info.h"
#include "core/thread_pool.h"
#include "engine/model_runner.h"
#include "kernels/dispatch.h"
#include "kv/kv_cache.h"
#include "kv/kv_memory_plan.h"
#include "model/mimo_v2.h"
#include "parallel/communicator.h"

namespace mimo::cli {

// Rank 0 of a tensor-parallel job stops the followers when its model goes (the end of the
// command); declared before anything that runs steps on the model, so destroyed after it.
struct LoadedModel {
  LoadedModel() = default;
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  ~LoadedModel() {
    if (model) StopTpFollowers(*model);
  }
  std::unique_ptr<MimoV2Model> model;
  std::unique_ptr<ThreadPool> pool;
  ExecContext ctx;
  int64_t fp8_plain_tiles = 0, fp8_tiles = 0;  // MarkFp8PlainBlocks at load (0 of 0: not run)
  int int8_interleaved = 0;  // int8 weights InterleaveInt8Weights re-laid at load
};

// Tensor/expert parallelism (`mpirun -np N mimo CMD --tensor-parallel-size N [--expert-parallel]`):
// MPI's world communicator when --tensor-parallel-size > 1, after checking it matches the world.
// *comm stays null for one process. False: error printed.
inline bool TensorParallelOrReport(const char* cmd, const Args* a, TensorParallelOptions* tp) {
  if (!a) return true;
  const int64_t n = a->GetInt("tensor-parallel-size", 1);
  tp->expert_parallel = a->Has("expert-parallel");
  if (n < 1) {
    std::fprintf(stderr, "mimo %s: error: --tensor-parallel-size must be >= 1\n", cmd);
    return false;
  }
  if (n == 1) {
    if (tp->expert_parallel) {
      std::fprintf(stderr, "mimo %s: error: --expert-parallel needs --tensor-parallel-size N > 1\n",
                   cmd);
      return false;
    }
    if (LaunchedByMpi()) {
      const char* w = std::getenv("OMPI_COMM_WORLD_SIZE");
      if (w && std::atoi(w) > 1) {
        std::fprintf(stderr, "mimo %s: error: started by mpirun with %s ranks but without "
                     "--tensor-parallel-size %s: every rank would run the whole model alone\n",
                     cmd, w, w);
        return false;
      }
    }
    return true;
  }
  MpiOptions o;
  o.collective_timeout_s = a->GetDouble("collective-timeout", 300);
  auto world = InitMpiWorld(o);
  if (!world.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, world.status().message().c_str());
    return false;
  }
  if ((*world)->size() != n) {
    std::fprintf(stderr, "mimo %s: error: --tensor-parallel-size %lld must equal the number of MPI "
                 "ranks (mpirun -np %lld), got %d\n", cmd, static_cast<long long>(n),
                 static_cast<long long>(n), (*world)->size());
    return false;
  }
  tp->comm = *world;
  return true;
}

// --precision exact|bf16|int8, or its older name --prefill-precision (ExecContext::precision;
// exact when absent; both given must agree). False: error printed. bf16 on a CPU without
// AVX512_BF16, and int8 on the scalar kernels (MIMO_ISA=scalar), run exact, with a note.
inline bool PrecisionFromArgs(const char* cmd, const Args& a, ExecContext* ctx) {
  const char* flag = a.Has("precision") ? "--precision" : "--prefill-precision";
  const std::string p =
      a.Has("precision") ? a.Get("precision") : a.Get("prefill-precision", "exact");
  if (a.Has("precision") && a.Has("prefill-precision") && a.Get("prefill-precision") != p) {
    std::fprintf(stderr,
                 "mimo %s: error: --precision %s and --prefill-precision %s disagree (the second "
                 "is the first's older name)\n",
                 cmd, p.c_str(), a.Get("prefill-precision").c_str());
    return false;
  }
  if (p == "exact") {
    ctx->precision = Precision::kExact;
  } else if (p == "bf16") {
    ctx->precision = Precision::kBf16;
    if (ActiveKernels().linear_rows_bf16 == nullptr) {
      std::fprintf(stderr,
                   "mimo %s: note: %s bf16 needs AVX512_BF16, which the %s kernels here lack; "
                   "every step runs exact\n",
                   cmd, flag, IsaName(ActiveKernels().isa));
    }
  } else if (p == "int8") {
    ctx->precision = Precision::kInt8;
    if (ActiveKernels().linear_rows_int8 == nullptr) {
      std::fprintf(stderr,
                   "mimo %s: note: %s int8 needs the %s kernels' integer dot products, which "
                   "the scalar ones lack; every step runs exact\n",
                   cmd, flag, "avx2, avx512 or neon");
    } else if (!a.Has("experts") && !a.Has("dense") && !a.Has("lm-head")) {
      std::fprintf(stderr,
                   "mimo %s: note: %s int8 applies to int8 weights (--experts/--dense/--lm-head "
                   "int8); the others run exact\n",
                   cmd, flag);
    }
  } else {
    std::fprintf(stderr, "mimo %s: error: %s must be exact, bf16 or int8, got '%s'\n", cmd, flag,
                 p.c_str());
    return false;
  }
  return true;
}

// An integer flag that must lie in [lo, hi] (absent: def), read in 64 bits so that no value
// wraps on its way to an int. False: an error naming the flag and its range was printed.
inline bool IntFlagOrReport(const char* cmd, const Args& a, const char* key, int64_t def,
                            int64_t lo, int64_t hi, int64_t* out) {
  const int64_t v = a.GetInt(key, def);
  if (v < lo || v > hi) {
    std::fprintf(stderr, "mimo %s: error: --%s %lld is out of range [%lld, %lld]\n", cmd, key,
                 static_cast<long long>(v), static_cast<long long>(lo),
                 static_cast<long long>(hi));
    return false;
  }
  *out = v;
  return true;
}

// --experts / --dense / --lm-head FORMAT (fp8 | int8 | mxfp4): the load-time form of `mimo quantize`,
// by group of weights (MimoV2Model::QuantizeWeights). A follower rank exits on a bad flag (rank
// 0 reports it).
inline bool QuantizeAtLoadOrReport(const char* cmd, const Args& a, bool follower,
                                   LoadedModel* out) {
  auto formats = WeightFormatsFromArgs(a);
  if (!formats.ok()) {
    if (follower) std::exit(2);
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, formats.status().message().c_str());
    return false;
  }
  if (!formats->any()) return true;
  MimoV2Model::QuantizePlan plan;
  static_cast<WeightFormats&>(plan) = *formats;
  const auto t0 = std::chrono::steady_clock::now();
  MimoV2Model::QuantizeReport rep;
  const Status q = out->model->QuantizeWeights(plan, out->pool.get(), &rep);
  if (!q.ok()) {
    if (follower) std::exit(1);
    std::fprintf(stderr, "mimo %s: error: quantizing at load: %s\n", cmd, q.message().c_str());
    return false;
  }
  if (follower) return true;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const struct {
    WeightFormat format;
    const char* what;
    const MimoV2Model::QuantizeGroupReport& report;
  } groups[] = {{plan.experts, "routed expert weights", rep.experts},
                {plan.dense, "dense projection weights", rep.dense},
                {plan.lm_head, "lm_head weights", rep.lm_head}};
  for (const auto& g : groups) {
    if (g.format == WeightFormat::kKeep) continue;
    std::fprintf(stderr,
                 "mimo %s: %d %s quantized to %s at load (relative RMS error %.5f; %d kept as "
                 "stored)\n",
                 cmd, g.report.converted, g.what,
                 g.format == WeightFormat::kMxfp4  ? "MXFP4"
                 : g.format == WeightFormat::kInt8 ? "INT8"
                                                   : "FP8",
                 g.report.RelativeRmsError(), g.report.kept);
  }
  std::fprintf(stderr, "mimo %s: load-time quantization took %.1f s\n", cmd, s);
  return true;
}

// Loads the model (this rank's slices under tensor parallelism). A follower rank (1..N-1) does
// not return: it follows rank 0's steps and exits when rank 0 is done. `threads` (0: one per
// hardware thread) is what the caller read from --threads, which is read again from `a` when
// given, unwrapped, to check it against ThreadPool::MaxThreads().
inline bool LoadModelOrReport(const char* cmd, const std::string& dir, int threads,
                              LoadedModel* out, const Args* a = nullptr) {
  int64_t num_threads = threads;
  if (a && a->Has("threads") &&
      !IntFlagOrReport(cmd, *a, "threads", 0, 0, ThreadPool::MaxThreads(), &num_threads)) {
    return false;
  }
  if (num_threads < 0 || num_threads > ThreadPool::MaxThreads()) {
    std::fprintf(stderr, "mimo %s: error: --threads %lld is out of range [0, %d]\n", cmd,
                 static_cast<long long>(num_threads), ThreadPool::MaxThreads());
    return false;
  }
  threads = static_cast<int>(num_threads);
  if (a && !PrecisionFromArgs(cmd, *a, &out->ctx)) return false;
  TensorParallelOptions tp;
  if (!TensorParallelOrReport(cmd, a, &tp)) return false;
  auto m = MimoV2Model::Load(dir, tp);
  const bool follower = tp.comm && !tp.comm->leader();
  if (!m.ok()) {
    if (!follower) std::fprintf(stderr, "mimo %s: error: %s\n", cmd, m.status().message().c_str());
    if (follower) std::exit(1);  // rank 0 reports which rank failed and why
    return false;
  }
  out->model = std::move(m).value();
  out->pool = std::make_unique<ThreadPool>(threads);
  out->ctx.pool = out->pool.get();
  // --experts / --dense / --lm-head fp8|int8|mxfp4: load-time quantization (every rank its slices).
  if (a && !QuantizeAtLoadOrReport(cmd, *a, follower, out)) return false;
  // The FP8 decode GEMV's plain tiles (kernels.h): one read of the FP8 weights, so only where the
  // checkpoint fits in the memory available; weights served from a page cache smaller than they
  // are would be read from disk once more for a decode that is bound by the disk anyway.
  // --no-fp8-plain keeps every tile on the general path (A/B of the two in one benchmark run).
  const int64_t room = ProbeMemoryInfo().available();
  if (!(a && a->Has("no-fp8-plain")) &&
      (room < 0 || static_cast<int64_t>(out->model->checkpoint().TotalFileBytes()) < room)) {
    out->fp8_plain_tiles = out->model->MarkFp8PlainBlocks(out->pool.get(), &out->fp8_tiles);
  }
  // --precision int8 on kernels that have it: the int8 weights' rows interleaved in tiles, which
  // the mode's GEMV streams faster (the same outputs, bit for bit). --no-int8-interleave keeps
  // them row-major (A/B of the two layouts).
  if (out->ctx.precision == Precision::kInt8 && ActiveKernels().linear_rows_int8 != nullptr &&
      !(a && a->Has("no-int8-interleave"))) {
    out->int8_interleaved = out->model->InterleaveInt8Weights(out->pool.get());
    if (!follower && out->int8_interleaved > 0) {
      std::fprintf(stderr,
                   "mimo %s: %d int8 weights interleaved in tiles of 4 rows for --precision int8\n",
                   cmd, out->int8_interleaved);
    }
  }
  if (follower) {
    const Status st = RunTpFollower(*out->model, out->ctx);
    if (!st.ok()) tp.comm->Abort(2, st.message());
    std::exit(0);
  }
  return true;
}

// Flags every model-running command accepts for its KV cache, for tensor/expert parallelism, and
// --precision (alias --prefill-precision).
inline std::vector<std::string> KvCacheKeys() {
  return {"attention-backend",  "block-size",
          "kv-cache-dtype",     "kv-cache-memory",
          "num-kv-blocks",      "tensor-parallel-size",
          "collective-timeout", "precision",
          "prefill-precision",  "experts",
          "dense",              "lm-head"};
}
inline std::vector<std::string> KvCacheFlags() {
  return {"strict-attention-backend", "expert-parallel", "no-fp8-plain", "no-int8-interleave"};
}

// The KV-cache flags as PagedKvOptions (sequence counts and lengths left to the caller).
inline bool KvOptionsFromArgs(const char* cmd, const Args& a, PagedKvOptions* o) {
  o->attention_backend = a.Get("attention-backend");
  o->strict_backend = a.Has("strict-attention-backend");
  int64_t block_size = 16, blocks = 0;
  if (!IntFlagOrReport(cmd, a, "block-size", 16, 1, 4096, &block_size) ||
      !IntFlagOrReport(cmd, a, "num-kv-blocks", 0, 0, INT32_MAX - 1, &blocks)) {
    return false;
  }
  o->block_size = static_cast<int>(block_size);
  o->num_full_blocks_override = blocks;
  auto dt = ParseKvCacheDType(a.Get("kv-cache-dtype", "f32"));
  if (!dt.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, dt.status().message().c_str());
    return false;
  }
  o->kv_dtype = *dt;
  // --kv-cache-memory: bytes ("8000000000", "8e9"), or a fraction of physical RAM when given as
  // 0 < x <= 1 with a point ("0.5"). More bytes than RAM + swap could never be backed: refused
  // here, naming the flag (the cache's mmap would fail, or the OOM killer end the process).
  const std::string mem_text = a.Get("kv-cache-memory");
  const double mem = a.GetDouble("kv-cache-memory", 0.0);
  if (mem > 0 && mem <= 1.0 && mem_text.find('.') != std::string::npos) {
    o->kv_cache_memory_fraction = mem;
  } else if (!mem_text.empty()) {
    const int64_t memory = PhysicalMemoryAndSwapBytes();
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    if (mem < 0 || mem != std::floor(mem)) {
      std::fprintf(stderr,
                   "mimo %s: error: --kv-cache-memory '%s' is neither a byte count nor a "
                   "fraction in (0, 1]\n",
                   cmd, mem_text.c_str());
      return false;
    }
    if (memory > 0 && mem > static_cast<double>(memory)) {
      std::fprintf(stderr,
                   "mimo %s: error: --kv-cache-memory %s bytes (%.2f GiB) is more than this "
                   "machine's memory: %.2f GiB of RAM and swap\n",
                   cmd, mem_text.c_str(), mem / kGiB, static_cast<double>(memory) / kGiB);
      return false;
    }
    o->kv_cache_memory_bytes = static_cast<int64_t>(mem);
  }
  return true;
}

// Builds the paged KV cache (main + MTP layers) for `max_sequences` of up to `max_context`.
inline std::unique_ptr<KvCache> MakeKvCacheOrReport(const char* cmd, const Args& a,
                                                    const MimoV2Model& model, int max_sequences,
                                                    int64_t max_context, int max_chunk_tokens) {
  PagedKvOptions o;
  if (!KvOptionsFromArgs(cmd, a, &o)) return nullptr;
  o.max_sequences = max_sequences;
  o.max_context = max_context;
  o.max_chunk_tokens = max_chunk_tokens;
  ModelConfig kv_config = model.config();
  kv_config.layers = model.KvLayerConfigs();  // MTP layers get KV layer ids after the main ones
  auto kv = KvCache::Create(kv_config, o);
  if (!kv.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, kv.status().message().c_str());
    return nullptr;
  }
  return std::move(kv).value();
}

}  // namespace mimo::cli
