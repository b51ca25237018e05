// `mimo generate`: prefill a prompt, then decode token by token (greedy or sampled); prints the
// output ids and tok/s, or one JSON object with --json.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/model_loading.h"
#include "engine/sampler.h"
#include "tokenizer/bpe.h"

namespace mimo::cli {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int RunGenerate(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = {"model", "ids", "prompt", "max-tokens", "temperature", "top-k",
                                   "top-p", "seed", "threads"};
  for (auto& k : KvCacheKeys()) keys.push_back(k);
  std::vector<std::string> flags = KvCacheFlags();
  flags.push_back("json");
  flags.push_back("ignore-eos");
  if (!a.Parse(argc, argv, keys, flags, &err) ||
      !a.Has("model") || (a.Has("ids") == a.Has("prompt"))) {
    std::fprintf(stderr, "mimo generate: %s\n",
                 err.empty() ? "need --model and one of --ids or --prompt" : err.c_str());
    return 2;
  }
  std::vector<int> ids;
  std::unique_ptr<Tokenizer> tok;  // with --prompt: encodes it and decodes the output
  if (a.Has("prompt")) {
    auto t = Tokenizer::FromFile(a.Get("model") + "/tokenizer.json");
    if (!t.ok()) {
      std::fprintf(stderr, "mimo generate: error: %s\n", t.status().message().c_str());
      return 1;
    }
    tok = std::move(t).value();
    for (int32_t id : tok->Encode(a.Get("prompt"))) ids.push_back(id);
    if (ids.empty()) {
      std::fprintf(stderr, "mimo generate: --prompt is empty\n");
      return 2;
    }
  } else if (!ParseIdList(a.Get("ids"), &ids, &err)) {
    std::fprintf(stderr, "mimo generate: %s\n", err.c_str());
    return 2;
  }
  LoadedModel lm;
  if (!LoadModelOrReport("generate", a.Get("model"), static_cast<int>(a.GetInt("threads", 0)), &lm)) return 1;
  const ModelConfig& cfg = lm.model->config();
  for (int id : ids) {
    if (id >= cfg.vocab_size) {
      std::fprintf(stderr, "mimo generate: token id %d out of range (vocab_size %d)\n", id, cfg.vocab_size);
      return 2;
    }
  }
  SamplingParams sp;
  sp.temperature = static_cast<float>(a.GetDouble("temperature", 0.0));
  sp.top_k = static_cast<int>(a.GetInt("top-k", 0));
  sp.top_p = static_cast<float>(a.GetDouble("top-p", 1.0));
  sp.seed = static_cast<uint64_t>(a.GetInt("seed", 0));
  Sampler sampler(sp);
  const int max_tokens = static_cast<int>(a.GetInt("max-tokens", 16));
  const int64_t V = cfg.vocab_size;

  auto kv_cache = MakeKvCacheOrReport("generate", a, *lm.model, 1,
                                      static_cast<int64_t>(ids.size()) + max_tokens,
                                      static_cast<int>(ids.size()));
  if (!kv_cache) return 1;
  KvAttention& kv = *kv_cache;
  std::vector<float> logits(V);  // [vocab]
  std::vector<int32_t> tokens(ids.begin(), ids.end());
  std::vector<int32_t> output;
  auto t0 = std::chrono::steady_clock::now();
  StepBatch b;
  b.chunks.push_back({0, 0, static_cast<int>(tokens.size()), 0});
  b.num_tokens = static_cast<int>(tokens.size());
  ForwardOutputs out;
  out.logit_rows = {b.num_tokens - 1};
  out.logits = logits.data();
  lm.model->Forward(lm.ctx, b, tokens.data(), kv, out);
  auto t1 = std::chrono::steady_clock::now();
  int pos = b.num_tokens;
  for (int i = 0; i < max_tokens; ++i) {
    const int32_t next = sampler.Sample(logits.data(), V);
    output.push_back(next);
    if (!a.Has("ignore-eos") && cfg.eos_token_id && next == *cfg.eos_token_id) break;
    if (i + 1 == max_tokens) break;
    StepBatch d;
    d.chunks.push_back({0, 0, 1, pos++});
    d.num_tokens = 1;
    ForwardOutputs o;
    o.logits = logits.data();
    lm.model->Forward(lm.ctx, d, &next, kv, o);
  }
  auto t2 = std::chrono::steady_clock::now();
  const double prefill_tps = tokens.size() / std::max(Seconds(t0, t1), 1e-9);
  const double decode_tps = output.size() > 1 ? (output.size() - 1) / std::max(Seconds(t1, t2), 1e-9) : 0.0;
  std::string list;
  for (size_t i = 0; i < output.size(); ++i) list += (i ? "," : "") + std::to_string(output[i]);
  if (a.Has("json")) {
    std::printf("{\"output_ids\": [%s], \"num_prompt_tokens\": %zu, \"prefill_tokens_per_s\": %.3f, "
                "\"decode_tokens_per_s\": %.3f}\n",
                list.c_str(), tokens.size(), prefill_tps, decode_tps);
  } else {
    if (tok) {
      std::printf("%s\n", tok->Decode(output).c_str());
    } else {
      std::printf("%s\n", list.c_str());
    }
    const double gbps = decode_tps * lm.model->ActiveWeightBytesPerToken() / 1e9;
    std::fprintf(stderr,
                 "prompt %zu tokens: %.1f tok/s prefill; %zu generated: %.1f tok/s decode "
                 "(%.2f GB/s of active weights, %.1f MB/token)\n",
                 tokens.size(), prefill_tps, output.size(), decode_tps, gbps,
                 lm.model->ActiveWeightBytesPerToken() / 1e6);
  }
  return 0;
}

}  // namespace
MIMO_CLI_COMMAND("generate", "--model DIR (--ids 1,2,3 | --prompt TEXT) [--max-tokens N] [--temperature T] [--seed S] [--json]", RunGenerate);
}  // namespace mimo::cli
