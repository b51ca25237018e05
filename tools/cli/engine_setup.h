// Shared by the CLI subcommands that serve requests through the engine (generate, chat, bench):
// model, tokenizer, generation_config and an Engine built from the common flags.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/model_loading.h"
#include "engine/engine.h"
#include "io/generation_config.h"
#include "tokenizer/bpe.h"

namespace mimo::cli {

// Flags of every engine-driving command, with vLLM's names.
inline std::vector<std::string> EngineKeys() {
  std::vector<std::string> k = {"max-num-seqs", "max-num-batched-tokens", "max-model-len",
                                "max-waiting", "threads"};
  for (auto& x : KvCacheKeys()) k.push_back(x);
  return k;
}
inline std::vector<std::string> EngineFlags() {
  std::vector<std::string> f = KvCacheFlags();
  f.push_back("no-enable-prefix-caching");
  return f;
}

struct EngineRuntime {
  LoadedModel lm;
  std::unique_ptr<Tokenizer> tok;  // null when the model directory has none and none is needed
  GenerationConfig gen;
  std::unique_ptr<Engine> engine;
};

inline bool FileExists(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f) std::fclose(f);
  return f != nullptr;
}

// Loads everything and builds the engine; on failure prints one line and returns false.
// need_tokenizer: fail when dir/tokenizer.json is missing (else it is loaded when present).
inline bool MakeEngineOrReport(const char* cmd, const Args& a, bool need_tokenizer,
                               int default_max_num_seqs, EngineRuntime* rt) {
  const std::string dir = a.Get("model");
  const std::string tok_path = dir + "/tokenizer.json";
  if (need_tokenizer || FileExists(tok_path)) {
    auto t = Tokenizer::FromFile(tok_path);
    if (!t.ok()) {
      std::fprintf(stderr, "mimo %s: error: %s\n", cmd, t.status().message().c_str());
      return false;
    }
    rt->tok = std::move(t).value();
  }
  auto gen = LoadGenerationConfig(dir);
  if (!gen.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, gen.status().message().c_str());
    return false;
  }
  rt->gen = *gen;
  if (!LoadModelOrReport(cmd, dir, static_cast<int>(a.GetInt("threads", 0)), &rt->lm)) return false;
  EngineOptions o;
  if (!KvOptionsFromArgs(cmd, a, &o.kv)) return false;
  o.kv.enable_prefix_caching = !a.Has("no-enable-prefix-caching");
  o.scheduler.max_num_seqs = static_cast<int>(a.GetInt("max-num-seqs", default_max_num_seqs));
  o.scheduler.max_num_batched_tokens = static_cast<int>(a.GetInt("max-num-batched-tokens", 512));
  o.max_model_len = static_cast<int>(a.GetInt("max-model-len", 0));
  o.max_waiting = static_cast<int>(a.GetInt("max-waiting", 1024));
  o.eos_token_ids = ModelEosIds(rt->lm.model->config(), rt->gen, rt->tok.get());
  auto e = Engine::Create(*rt->lm.model, rt->lm.ctx, rt->tok.get(), o);
  if (!e.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, e.status().message().c_str());
    return false;
  }
  rt->engine = std::move(e).value();
  return true;
}

}  // namespace mimo::cli
