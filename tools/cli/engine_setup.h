// Shared by the CLI subcommands that serve requests through the engine (generate, chat, bench):
// model, tokenizer, generation_config and an Engine built from the common flags.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/model_loading.h"
#include "engine/engine.h"
#include "io/generation_config.h"
#include "speculative/dflash_speculator.h"
#include "speculative/mtp_speculator.h"
#include "tokenizer/bpe.h"

namespace mimo::cli {

// Flags of every engine-driving command, with vLLM's names.
inline std::vector<std::string> EngineKeys() {
  std::vector<std::string> k = {"max-num-seqs",
                                "max-num-batched-tokens",
                                "max-model-len",
                                "max-waiting",
                                "threads",
                                "speculative",
                                "num-speculative-tokens",
                                "speculative-draft-vocab",
                                "speculative-draft-model",
                                "dflash-rope",
                                "dflash-context-cache-mb"};
  for (auto& x : KvCacheKeys()) k.push_back(x);
  return k;
}
inline std::vector<std::string> EngineFlags() {
  std::vector<std::string> f = KvCacheFlags();
  f.push_back("no-enable-prefix-caching");
  f.push_back("speculative-chained");
  return f;
}

// --speculative-draft-vocab: N (the first N ids, which byte-level BPE ranks by merge order,
// i.e. roughly by frequency, plus every added token), or a JSON file with a list of ids (or an
// object with "draft_vocab" or "output_ids"). Default: 32768 when the vocabulary is larger.
inline bool DraftVocabOrReport(const char* cmd, const Args& a, const Tokenizer* tok, int vocab,
                               std::vector<int32_t>* out) {
  const std::string v = a.Get("speculative-draft-vocab", vocab > 32768 ? "32768" : "");
  if (v.empty()) return true;
  if (v.find_first_not_of("0123456789") == std::string::npos) {
    const int n = std::min(vocab, std::atoi(v.c_str()));
    for (int i = 0; i < n; ++i) out->push_back(i);
    if (tok) {
      for (const AddedToken& t : tok->added_tokens()) {
        if (t.id >= n && t.id < vocab) out->push_back(t.id);
      }
    }
    return true;
  }
  std::string text;
  nlohmann::json j;
  if (ReadFileToString(v, &text)) j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object()) j = j.contains("draft_vocab") ? j["draft_vocab"] : j.value("output_ids", nlohmann::json());
  if (!j.is_array() || j.empty()) {
    std::fprintf(stderr, "mimo %s: error: --speculative-draft-vocab '%s' is neither a count nor a "
                 "JSON list of token ids\n", cmd, v.c_str());
    return false;
  }
  for (const auto& x : j) {
    if (!x.is_number_integer()) {
      std::fprintf(stderr, "mimo %s: error: %s: draft vocabulary entries must be token ids\n", cmd,
                   v.c_str());
      return false;
    }
    out->push_back(x.get<int32_t>());
  }
  if (tok) {  // the end-of-turn tokens must be draftable
    for (const char* name : {"<|im_end|>", "<|endoftext|>"}) {
      if (tok->TokenToId(name) >= 0) out->push_back(tok->TokenToId(name));
    }
  }
  return true;
}

// The DFlash speculator of --speculative dflash: the drafter of --speculative-draft-model
// (default <model>/dflash), --num-speculative-tokens, --dflash-rope, --speculative-draft-vocab,
// --dflash-context-cache-mb (features of prompt blocks kept for prefix-cache hits; 0: none).
inline bool MakeDFlashOrReport(const char* cmd, const Args& a, MimoV2Model& model,
                               const Tokenizer* tok, std::unique_ptr<DFlashSpeculator>* out) {
  DFlashSpeculatorOptions so;
  so.drafter_dir = a.Get("speculative-draft-model");
  so.num_speculative_tokens = static_cast<int>(a.GetInt("num-speculative-tokens", 0));
  auto rope = ParseDFlashRope(a.Get("dflash-rope", "split"));
  if (!rope.ok()) {
    std::fprintf(stderr, "mimo %s: error: --dflash-rope: %s\n", cmd,
                 rope.status().message().c_str());
    return false;
  }
  so.rope = *rope;
  const int64_t cache_mb = a.GetInt("dflash-context-cache-mb", so.context_cache_bytes >> 20);
  if (cache_mb < 0 || cache_mb > (int64_t{1} << 30)) {
    std::fprintf(stderr, "mimo %s: error: --dflash-context-cache-mb must be >= 0, got %lld\n", cmd,
                 static_cast<long long>(cache_mb));
    return false;
  }
  so.context_cache_bytes = cache_mb << 20;
  if (!DraftVocabOrReport(cmd, a, tok, model.config().vocab_size, &so.draft_vocab)) return false;
  auto spec = DFlashSpeculator::Create(model, a.Get("model"), so);
  if (!spec.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, spec.status().message().c_str());
    return false;
  }
  *out = std::move(spec).value();
  return true;
}

// --max-num-seqs at most: vLLM's default is 256; each resident sequence holds its own
// sliding-window blocks, so far more than this cannot fit any machine's memory anyway.
inline constexpr int64_t kMaxNumSeqs = 1 << 16;

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
  if (a.GetInt("tensor-parallel-size", 1) > 1 && a.Has("speculative")) {
    std::fprintf(stderr, "mimo %s: error: --speculative is not supported with "
                 "--tensor-parallel-size yet\n", cmd);
    return false;
  }
  // Sizes and counts, each within what the engine's int fields hold and a sequence may be
  // (kMaxContextTokens); whether the KV cache they ask for fits is Engine::Create's to say.
  int64_t seqs = 0, batched = 0, model_len = 0, waiting = 0;
  if (!IntFlagOrReport(cmd, a, "max-num-seqs", default_max_num_seqs, 1, kMaxNumSeqs, &seqs) ||
      !IntFlagOrReport(cmd, a, "max-num-batched-tokens", 512, 1, kMaxContextTokens, &batched) ||
      !IntFlagOrReport(cmd, a, "max-model-len", 0, 0, kMaxContextTokens, &model_len) ||
      !IntFlagOrReport(cmd, a, "max-waiting", 1024, 0, INT32_MAX, &waiting)) {
    return false;
  }
  if (!LoadModelOrReport(cmd, dir, static_cast<int>(a.GetInt("threads", 0)), &rt->lm, &a)) {
    return false;
  }
  // After the model: its eos_token_id ids are checked against config.json's vocab_size.
  auto gen = LoadGenerationConfig(dir, rt->lm.model->config().vocab_size);
  if (!gen.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, gen.status().message().c_str());
    return false;
  }
  rt->gen = *gen;
  EngineOptions o;
  if (!KvOptionsFromArgs(cmd, a, &o.kv)) return false;
  o.kv.enable_prefix_caching = !a.Has("no-enable-prefix-caching");
  o.scheduler.max_num_seqs = static_cast<int>(seqs);
  o.scheduler.max_num_batched_tokens = static_cast<int>(batched);
  o.max_model_len = static_cast<int>(model_len);
  const int max_pos = rt->lm.model->config().max_position_embeddings;
  if (max_pos > 0 && o.max_model_len > max_pos) {
    std::fprintf(stderr,
                 "mimo %s: warning: --max-model-len %d exceeds the model's "
                 "max_position_embeddings %d: positions past it were never trained\n",
                 cmd, o.max_model_len, max_pos);
  }
  o.max_waiting = static_cast<int>(waiting);
  o.eos_token_ids = ModelEosIds(rt->lm.model->config(), rt->gen, rt->tok.get());
  if (a.Get("speculative") == "dflash") {
    std::unique_ptr<DFlashSpeculator> spec;
    if (!MakeDFlashOrReport(cmd, a, *rt->lm.model, rt->tok.get(), &spec)) return false;
    o.speculator = std::shared_ptr<Speculator>(std::move(spec));
  } else if (a.Has("speculative")) {
    if (a.Get("speculative") != "mtp") {
      std::fprintf(stderr, "mimo %s: error: --speculative '%s': expected mtp or dflash\n", cmd,
                   a.Get("speculative").c_str());
      return false;
    }
    MtpSpeculatorOptions so;
    so.num_speculative_tokens = static_cast<int>(
        a.GetInt("num-speculative-tokens", std::min(3, rt->lm.model->num_mtp_layers())));
    so.chained = a.Has("speculative-chained");
    if (!DraftVocabOrReport(cmd, a, rt->tok.get(), rt->lm.model->config().vocab_size,
                            &so.draft_vocab)) {
      return false;
    }
    auto spec = MtpSpeculator::Create(*rt->lm.model, so);
    if (!spec.ok()) {
      std::fprintf(stderr, "mimo %s: error: %s\n", cmd, spec.status().message().c_str());
      return false;
    }
    o.speculator = std::shared_ptr<Speculator>(std::move(spec).value());
  }
  auto e = Engine::Create(*rt->lm.model, rt->lm.ctx, rt->tok.get(), o);
  if (!e.ok()) {
    std::fprintf(stderr, "mimo %s: error: %s\n", cmd, e.status().message().c_str());
    return false;
  }
  rt->engine = std::move(e).value();
  return true;
}

}  // namespace mimo::cli
