// Shared by the CLI subcommands that run the model: load it, make the thread pool and the paged
// KV cache from the common flags, report errors as one line on stderr.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/thread_pool.h"
#include "kv/paged_kv_attention.h"
#include "model/mimo_v2.h"

namespace mimo::cli {

struct LoadedModel {
  std::unique_ptr<MimoV2Model> model;
  std::unique_ptr<ThreadPool> pool;
  ExecContext ctx;
};

inline bool LoadModelOrReport(const char* cmd, const std::string& dir, int threads,
                              LoadedModel* out) {
  auto m = MimoV2Model::Load(dir);
  if (!m.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, m.status().message().c_str());
    return false;
  }
  out->model = std::move(m).value();
  out->pool = std::make_unique<ThreadPool>(threads);
  out->ctx.pool = out->pool.get();
  return true;
}

// Flags every model-running command accepts for its KV cache.
inline std::vector<std::string> KvCacheKeys() {
  return {"attention-backend", "block-size", "kv-cache-dtype", "kv-cache-memory", "num-kv-blocks"};
}
inline std::vector<std::string> KvCacheFlags() { return {"strict-attention-backend"}; }

// The KV-cache flags as PagedKvOptions (sequence counts and lengths left to the caller).
inline bool KvOptionsFromArgs(const char* cmd, const Args& a, PagedKvOptions* o) {
  o->attention_backend = a.Get("attention-backend");
  o->strict_backend = a.Has("strict-attention-backend");
  o->block_size = static_cast<int>(a.GetInt("block-size", 16));
  auto dt = ParseKvCacheDType(a.Get("kv-cache-dtype", "f32"));
  if (!dt.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, dt.status().message().c_str());
    return false;
  }
  o->kv_dtype = *dt;
  // --kv-cache-memory: bytes, or a fraction of physical RAM when given as 0 < x <= 1 ("0.5").
  const double mem = a.GetDouble("kv-cache-memory", 0.0);
  if (mem > 0 && mem <= 1.0 && a.Get("kv-cache-memory").find('.') != std::string::npos) {
    o->kv_cache_memory_fraction = mem;
  } else {
    o->kv_cache_memory_bytes = a.GetInt("kv-cache-memory", 0);
  }
  o->num_full_blocks_override = a.GetInt("num-kv-blocks", 0);
  return true;
}

// Builds the paged KV cache (main + MTP layers) for `max_sequences` of up to `max_context`.
inline std::unique_ptr<PagedKvAttention> MakeKvCacheOrReport(const char* cmd, const Args& a,
                                                             const MimoV2Model& model,
                                                             int max_sequences,
                                                             int64_t max_context,
                                                             int max_chunk_tokens) {
  PagedKvOptions o;
  if (!KvOptionsFromArgs(cmd, a, &o)) return nullptr;
  o.max_sequences = max_sequences;
  o.max_context = max_context;
  o.max_chunk_tokens = max_chunk_tokens;
  ModelConfig kv_config = model.config();
  kv_config.layers = model.KvLayerConfigs();  // MTP layers get KV layer ids after the main ones
  auto kv = PagedKvAttention::Create(kv_config, o);
  if (!kv.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, kv.status().message().c_str());
    return nullptr;
  }
  return std::move(kv).value();
}

}  // namespace mimo::cli
