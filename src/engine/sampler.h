// Token sampling from one row of logits: greedy at temperature 0, else temperature + top-k +
// top-p + min-p with a seeded generator. Not thread-safe (owns its RNG).
#pragma once

#include <cstdint>
#include <random>

namespace mimo {

struct SamplingParams {
  float temperature = 0.0f;  // 0 -> greedy (argmax, lowest id on ties)
  int top_k = 0;             // 0 -> off
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  int32_t Sample(const float* logits, int64_t vocab);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

int32_t Argmax(const float* logits, int64_t n);

}  // namespace mimo
