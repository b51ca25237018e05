// Shared by the CLI subcommands that serve requests through the engine (generate, chat, bench):
// model, tokenizer, generation_config and an Engine built from the common flags.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/model_loading.h"
#include "core/memory_info.h"
#include "engine/engine.h"
#include "io/checkpoint_fingerprint.h"
#include "kernels/kernels.h"
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
                                "dflash-context-cache-mb",
                                "prefix-cache-ram",
                                "prefix-cache-dir",
                                "prefix-cache-disk"};
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

// "8G", "512M", "64K" (binary units), "1T", or a plain byte count; -1 when malformed.
inline int64_t ParseByteSize(const std::string& text) {
  if (text.empty()) return -1;
  size_t end = 0;
  double v = 0;
  try {
    v = std::stod(text, &end);
  } catch (...) {
    return -1;
  }
  std::string unit = text.substr(end);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (!unit.empty() && (unit.back() == 'i')) unit.pop_back();
  double scale = 1;
  if (unit == "K" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) return -1;
  if (!(v >= 0) || v * scale > 9.0e18) return -1;
  return static_cast<int64_t>(v * scale);
}

// --prefix-cache-ram SIZE (default: an eighth of the memory available now, at most 8 GiB; 0
// turns the tier off), --prefix-cache-dir DIR and --prefix-cache-disk SIZE (default 16 GiB).
// The disk fingerprint covers the checkpoint's files and every flag that changes the K/V
// bytes (precision, experts, the kernels' ISA, the attention backend).
inline bool PrefixTierOptionsOrReport(const char* cmd, const Args& a, const std::string& model_dir,
                                      PrefixCacheTierOptions* o) {
  const bool tp = a.GetInt("tensor-parallel-size", 1) > 1;
  for (const char* flag : {"prefix-cache-ram", "prefix-cache-disk"}) {
    if (a.Has(flag) && ParseByteSize(a.Get(flag)) < 0) {
      std::fprintf(stderr, "mimo %s: error: --%s '%s': expected a size such as 4G, 512M or a "
                   "byte count\n", cmd, flag, a.Get(flag).c_str());
      return false;
    }
  }
  if (tp && (a.Has("prefix-cache-dir") || ParseByteSize(a.Get("prefix-cache-ram", "0")) > 0)) {
    std::fprintf(stderr, "mimo %s: error: --prefix-cache-ram/--prefix-cache-dir are not "
                 "supported with --tensor-parallel-size yet\n", cmd);
    return false;
  }
  if (a.Has("no-enable-prefix-caching")) return true;
  if (a.Has("prefix-cache-ram")) {
    o->ram_bytes = ParseByteSize(a.Get("prefix-cache-ram"));
  } else if (!tp) {
    const int64_t avail = ProbeMemoryInfo().available();
    o->ram_bytes = avail > 0 ? std::min<int64_t>(avail / 8, int64_t{8} << 30) : 0;
  }
  o->dir = a.Get("prefix-cache-dir");
  o->disk_bytes = a.Has("prefix-cache-disk") ? ParseByteSize(a.Get("prefix-cache-disk"))
                                             : int64_t{16} << 30;
  if (a.Has("prefix-cache-disk") && o->dir.empty()) {
    std::fprintf(stderr, "mimo %s: error: --prefix-cache-disk needs --prefix-cache-dir\n", cmd);
    return false;
  }
  if (o->dir.empty()) return true;
  auto fp = CheckpointFingerprint(model_dir);
  if (!fp.ok()) {
    std::fprintf(stderr, "mimo %s: error: --prefix-cache-dir: %s\n", cmd,
                 fp.status().message().c_str());
    return false;
  }
  const std::string flags = "precision=" + a.Get("precision", a.Get("prefill-precision", "exact")) +
                            ";experts=" + a.Get("experts") + ";dense=" + a.Get("dense") +
                            ";lm_head=" + a.Get("lm-head") + ";isa=" + KernelIsaName() +
                            ";attention=" + a.Get("attention-backend") +
                            ";fp8_plain=" + (a.Has("no-fp8-plain") ? "0" : "1");
  const uint64_t words[] = {*fp, Checksum64(reinterpret_cast<const uint8_t*>(flags.data()),
                                            flags.size())};
  o->checkpoint_fingerprint = HashWords(words);
  return true;
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
  if (!PrefixTierOptionsOrReport(cmd, a, dir, &o.kv.prefix_tiers)) return false;
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
