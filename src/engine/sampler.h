// Token sampling from one row of logits, with the semantics of the OpenAI API and vLLM:
//   1. logit_bias is added;                       (OpenAI logit_bias)
//   2. while fewer than min_tokens were generated, the stop ids are masked;   (vLLM min_tokens)
//   3. repetition_penalty over prompt + output ids: l > 0 ? l / p : l * p;     (HF / vLLM)
//   4. frequency and presence penalties over output ids: l -= f * count + p * (count > 0);
//   5. temperature 0 -> argmax (lowest id on ties); else l / temperature, then
//   6. top-k (the k largest, ties to the lower id), 7. top-p (the smallest set of most likely
//      tokens whose probability reaches top_p), 8. min-p (drop p < min_p * p_max), renormalise,
//      and draw from the request's own generator.
// Logprobs are those of the raw model distribution (log_softmax of the unprocessed logits, as
// vLLM's default "raw_logprobs"), for the chosen token and the top N alternatives.
// Thread-safety: a Sampler holds scratch buffers; one per engine thread.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace mimo {

struct SamplingParams {
  float temperature = 1.0f;  // 0 -> greedy
  int top_k = 0;             // <= 0 -> off
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; 1 -> off
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> added to its logit
  std::optional<uint64_t> seed;  // per-request generator; unset -> a fresh random seed
  int logprobs = -1;             // -1: none; 0: the chosen token's; N: also the top N

  bool greedy() const { return temperature <= 0.0f; }
  // Range checks naming the field (for requests from the outside).
  Status Validate(int64_t vocab_size) const;
};

// The token history penalties look at, kept incrementally by the caller.
struct TokenHistory {
  std::span<const int32_t> prompt_unique;  // sorted distinct prompt ids (repetition penalty)
  const std::unordered_map<int32_t, int>* output_counts = nullptr;  // output id -> occurrences
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;                         // raw logprob of id (when requested)
  std::vector<std::pair<int32_t, float>> top;  // top-N raw (id, logprob), most likely first
};

// The request's random generator: reproducible from its seed whatever else runs in the batch.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed) : gen_(seed) {}
  double Uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  std::mt19937_64 gen_;
};

// One entry of the final sampling distribution.
struct TokenProb {
  int32_t id;
  double p;
};

class Sampler {
 public:
  // Steps 1-4 in place.   logits [vocab]; masked_ids: ids to forbid (min_tokens).
  static void ProcessLogits(float* logits, int64_t vocab, const SamplingParams& p,
                            const TokenHistory& h, std::span<const int32_t> masked_ids);
  // Steps 6-8 on processed logits: the kept tokens and their normalised probabilities, in the
  // order the draw walks them. Requires !p.greedy().
  std::vector<TokenProb> Distribution(const float* logits, int64_t vocab, const SamplingParams& p);

  // The whole pipeline on one row (the row is copied, not modified). allowed (optional): a
  // bitmask [ceil(vocab / 32)] of the only tokens that may be chosen (structured outputs),
  // applied before everything else.
  SampledToken Sample(const float* logits, int64_t vocab, const SamplingParams& p,
                      const TokenHistory& h, std::span<const int32_t> masked_ids, SamplerRng& rng,
                      const uint32_t* allowed = nullptr);
  // Sets every logit outside `allowed` to -inf.   logits [vocab]; allowed [ceil(vocab / 32)]
  static void ApplyAllowedMask(float* logits, int64_t vocab, const uint32_t* allowed);

  // Raw log_softmax of `logits` at `id`, and the top n alternatives.
  static void RawLogprobs(const float* logits, int64_t vocab, int32_t id, int n,
                          SampledToken* out);

 private:
  std::vector<float> work_;     // [vocab] processed logits
  std::vector<int32_t> order_;  // [vocab] candidate ids
};

// Largest logit, lowest id on ties.
int32_t Argmax(const float* logits, int64_t n);

// A seed for requests that give none (random per call).
uint64_t RandomSeed();

}  // namespace mimo
