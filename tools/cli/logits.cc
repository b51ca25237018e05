// `mimo logits`: float32 logits for every position of an id sequence (prefill or decode).
#include <chrono>
#include <cstdio>
#include <vector>

#include "cli/command.h"
#include "cli/model_loading.h"
#include "engine/simple_kv_attention.h"

namespace mimo::cli {
namespace {

int RunLogits(int argc, char** argv) {
  Args a;
  std::string err;
  if (!a.Parse(argc, argv, {"model", "ids", "out", "mode", "threads"}, {}, &err) ||
      !a.Has("model") || !a.Has("ids") || !a.Has("out")) {
    std::fprintf(stderr, "mimo logits: %s\nusage: mimo logits --model DIR --ids 1,2,3|@FILE --out FILE [--mode prefill|decode] [--threads N]\n",
                 err.empty() ? "missing --model, --ids or --out" : err.c_str());
    return 2;
  }
  const std::string mode = a.Get("mode", "prefill");
  if (mode != "prefill" && mode != "decode") {
    std::fprintf(stderr, "mimo logits: --mode must be prefill or decode, got '%s'\n", mode.c_str());
    return 2;
  }
  std::vector<int> ids;
  if (!ParseIdList(a.Get("ids"), &ids, &err)) {
    std::fprintf(stderr, "mimo logits: %s\n", err.c_str());
    return 2;
  }
  LoadedModel lm;
  if (!LoadModelOrReport("logits", a.Get("model"), static_cast<int>(a.GetInt("threads", 0)), &lm)) return 1;
  const ModelConfig& cfg = lm.model->config();
  for (int id : ids) {
    if (id >= cfg.vocab_size) {
      std::fprintf(stderr, "mimo logits: token id %d out of range (vocab_size %d)\n", id, cfg.vocab_size);
      return 2;
    }
  }
  const int64_t n = static_cast<int64_t>(ids.size()), V = cfg.vocab_size;
  std::vector<float> logits(n * V);  // [n, vocab]
  std::vector<int32_t> tokens(ids.begin(), ids.end());
  SimpleKvAttention kv;
  if (mode == "prefill") {
    StepBatch b;
    b.chunks.push_back({0, 0, static_cast<int>(n), 0});
    b.num_tokens = static_cast<int>(n);
    ForwardOutputs out;
    out.logits = logits.data();
    lm.model->Forward(lm.ctx, b, tokens.data(), kv, out);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      StepBatch b;
      b.chunks.push_back({0, 0, 1, static_cast<int>(i)});
      b.num_tokens = 1;
      ForwardOutputs out;
      out.logits = logits.data() + i * V;
      lm.model->Forward(lm.ctx, b, tokens.data() + i, kv, out);
    }
  }
  FILE* f = std::fopen(a.Get("out").c_str(), "wb");
  if (!f || std::fwrite(logits.data(), sizeof(float), logits.size(), f) != logits.size()) {
    std::fprintf(stderr, "mimo logits: cannot write '%s'\n", a.Get("out").c_str());
    if (f) std::fclose(f);
    return 1;
  }
  std::fclose(f);
  return 0;
}

}  // namespace
MIMO_CLI_COMMAND("logits", "--model DIR --ids 1,2,3|@FILE --out FILE [--mode prefill|decode] [--threads N]", RunLogits);
}  // namespace mimo::cli
