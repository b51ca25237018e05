// --weights-memory copy|mmap|auto of the commands that run the whole model through the engine
// (serve, generate, chat): copy the memory-mapped checkpoint into anonymous memory before the
// first request (Checkpoint::ReadThrough: 2 MiB pages, fastest decode), or keep serving it from
// the file mapping, i.e. the page cache (works when the weights exceed memory, slower decode).
// auto copies only when the files, the KV cache plan and a margin fit in the memory available
// to the process (core/memory_info.h: MemAvailable and the cgroup limit less usage).
#pragma once

#include <cstdio>
#include <string>

#include "cli/engine_setup.h"
#include "core/memory_info.h"
#include "core/progress.h"

namespace mimo::cli {

// Decides and applies (copies, or leaves the mapping); prints the decision's message on stderr
// when there is one (auto is the default). always_progress: draw the "reading weights" line
// whatever the size (serve); otherwise only past 1 GB. False: an explicit copy that cannot fit,
// or a bad flag (error printed, nothing copied).
inline bool PlaceWeightsOrReport(const char* cmd, const Args& a, const EngineRuntime& rt,
                                 bool always_progress) {
  auto mode = ParseWeightsMemory(a.Get("weights-memory", "auto"));
  if (!mode.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, mode.status().message().c_str());
    return false;
  }
  // Under tensor parallelism a rank binds only its slices: no read-through of whole files.
  if (a.GetInt("tensor-parallel-size", 1) > 1) return true;
  // --experts/--dense/--lm-head made owned copies of those weights: copying the files would also
  // copy the source weights nothing reads any more, so auto leaves the rest in the page cache.
  if ((a.Has("experts") || a.Has("dense") || a.Has("lm-head")) && *mode == WeightsMemory::kAuto) {
    std::fprintf(stderr,
                 "mimo %s: note: weights quantized at load: the other weights are served from the "
                 "page cache (--weights-memory copy would copy the source weights too)\n",
                 cmd);
    return true;
  }
  const Checkpoint& ck = rt.lm.model->checkpoint();
  const int64_t weights = static_cast<int64_t>(ck.TotalFileBytes());
  const int64_t kv = rt.engine->kv_memory_plan().total_bytes;
  const WeightsMemoryChoice c = ChooseWeightsMemory(*mode, weights, kv, ProbeMemoryInfo());
  if (c.refused) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, c.message.c_str());
    return false;
  }
  if (!c.message.empty()) std::fprintf(stderr, "mimo %s: warning: %s\n", cmd, c.message.c_str());
  if (!c.copy) return true;
  if (!always_progress && weights < int64_t{1000000000}) {
    ck.ReadThrough(rt.lm.pool.get(), nullptr);
    return true;
  }
  ProgressLine pl(std::string("mimo ") + cmd + ": reading weights", static_cast<double>(weights),
                  "GB");
  ck.ReadThrough(rt.lm.pool.get(),
                 [&](uint64_t done, uint64_t) { pl.Update(static_cast<double>(done)); });
  pl.Finish();
  return true;
}

}  // namespace mimo::cli
