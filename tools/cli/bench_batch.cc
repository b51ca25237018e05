// `mimo bench batch`: total decode throughput of the serving engine at several concurrencies
// (continuous batching: one forward pass per step for every running request, so weights are
// read once per step, not once per request). For each concurrency C it submits C requests of
// --prompt-len random tokens that each generate exactly --gen-len tokens (ignore_eos, greedy),
// and reports the decode rate while all C run together, per request and in total, and the
// speed-up over C = 1 measured in the same run.
#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/engine_setup.h"
#include "core/progress.h"

namespace mimo::cli {

int RunBenchBatch(const Args& a) {
  std::vector<int> conc;
  {
    std::stringstream ss(a.Get("concurrency", "1,4,8,16"));
    std::string x;
    while (std::getline(ss, x, ',')) conc.push_back(std::atoi(x.c_str()));
  }
  const int prompt_len = static_cast<int>(a.GetInt("prompt-len", 32));
  const int gen_len = static_cast<int>(a.GetInt("gen-len", 32));
  if (!a.Has("model") || conc.empty() || prompt_len < 1 || gen_len < 4 ||
      *std::min_element(conc.begin(), conc.end()) < 1) {
    std::fprintf(stderr, "bench batch: need --model; --concurrency list >= 1, --prompt-len >= 1, "
                         "--gen-len >= 4\n");
    return 2;
  }
  const int max_c = *std::max_element(conc.begin(), conc.end());
  EngineRuntime rt;
  if (!MakeEngineOrReport("bench batch", a, false, max_c, &rt)) return 1;
  {
    ProgressLine pl("reading weights", static_cast<double>(rt.lm.model->checkpoint().TotalFileBytes()),
                    "GB");
    rt.lm.model->checkpoint().ReadThrough(rt.lm.pool.get(), [&](uint64_t d, uint64_t) {
      pl.Update(static_cast<double>(d));
    });
    pl.Finish();
  }
  const int vocab = rt.lm.model->config().vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(a.GetInt("seed", 1)));
  std::printf("%-11s %-13s %-12s %-8s %-14s %-14s %-7s\n", "concurrency", "decode tok/s",
              "per request", "vs C=1", "MB read/step", "bound vs C=1", "GB/s");
  double base = 0, base_bytes = 0;
  for (int c : conc) {
    // Per request: the time of every event carrying a token.
    std::vector<std::vector<double>> times(c);
    for (int i = 0; i < c; ++i) {
      GenerationRequest g;
      std::uniform_int_distribution<int> tok(0, vocab - 1);
      for (int k = 0; k < prompt_len; ++k) g.prompt_ids.push_back(tok(rng));
      g.sampling.temperature = 0.0f;
      g.stop.max_tokens = gen_len;
      g.stop.ignore_eos = true;
      std::vector<double>* t = &times[i];
      auto id = rt.engine->Submit(std::move(g), [t](RequestOutput&& o) {
        for (size_t k = 0; k < o.token_ids.size(); ++k) t->push_back(o.time);
      });
      if (!id.ok()) {
        std::fprintf(stderr, "bench batch: %s\n", id.status().message().c_str());
        return 1;
      }
    }
    const EngineStats s0 = rt.engine->Stats();
    rt.engine->RunUntilIdle();
    const EngineStats s1 = rt.engine->Stats();
    // The window where every request decodes: after the last first token, up to the first end.
    double t0 = 0, t1 = 1e300;
    for (const auto& t : times) {
      t0 = std::max(t0, t.front());
      t1 = std::min(t1, t.back());
    }
    int64_t tokens = 0;
    for (const auto& t : times) {
      tokens += std::count_if(t.begin(), t.end(), [&](double x) { return x > t0 && x <= t1; });
    }
    const double tps = t1 > t0 ? tokens / (t1 - t0) : 0.0;
    // Weights read per step over the whole run (the prefill step reads a little more): what a
    // memory-bound step costs, so C * bytes(C=1) / bytes(C) bounds the speed-up over C = 1.
    const double bytes = (s1.weight_bytes_read - s0.weight_bytes_read) /
                         std::max<int64_t>(1, s1.num_steps - s0.num_steps);
    if (c == 1) {
      base = tps;
      base_bytes = bytes;
    }
    std::printf("%-11d %-13.2f %-12.2f %-8s %-14.1f %-14s %-7.2f\n", c, tps, tps / c,
                base > 0 ? StrFormat("%.2fx", tps / base).c_str() : "-", bytes / 1e6,
                base_bytes > 0 ? StrFormat("%.2fx", c * base_bytes / bytes).c_str() : "-",
                tps / c * bytes / 1e9);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace mimo::cli
