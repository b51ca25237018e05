// Logits processing, the sampling distribution and the draw (see sampler.h for the semantics).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace mimo {

Status SamplingParams::Validate(int64_t vocab_size) const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return InvalidArgument("temperature must be a number >= 0, got %g", temperature);
  }
  if (top_k < -1) return InvalidArgument("top_k must be -1, 0 (off) or >= 1, got %d", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return InvalidArgument("top_p must be in (0, 1], got %g", top_p);
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return InvalidArgument("min_p must be in [0, 1], got %g", min_p);
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return InvalidArgument("repetition_penalty must be > 0, got %g", repetition_penalty);
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return InvalidArgument("presence_penalty must be in [-2, 2], got %g", presence_penalty);
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return InvalidArgument("frequency_penalty must be in [-2, 2], got %g", frequency_penalty);
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument("logit_bias: token id %d is outside the vocabulary [0, %lld)", id,
                             static_cast<long long>(vocab_size));
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return InvalidArgument("logit_bias: the bias of token %d must be in [-100, 100], got %g", id,
                             bias);
    }
  }
  if (logprobs < -1 || logprobs > 20) {
    return InvalidArgument("logprobs / top_logprobs must be in [0, 20], got %d", logprobs);
  }
  return Status::Ok();
}

int32_t Argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

uint64_t RandomSeed() {
  static std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

void Sampler::ProcessLogits(float* l, int64_t vocab, const SamplingParams& p,
                            const TokenHistory& h, std::span<const int32_t> masked_ids) {
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < vocab) l[id] += bias;
  }
  for (int32_t id : masked_ids) {
    if (id >= 0 && id < vocab) l[id] = -std::numeric_limits<float>::infinity();
  }
  const float rp = p.repetition_penalty;
  auto repeat = [&](int32_t id) {
    if (id >= 0 && id < vocab) l[id] = l[id] > 0.0f ? l[id] / rp : l[id] * rp;
  };
  if (rp != 1.0f) {
    for (int32_t id : h.prompt_unique) repeat(id);
    if (h.output_counts) {
      for (const auto& [id, n] : *h.output_counts) {
        if (!std::binary_search(h.prompt_unique.begin(), h.prompt_unique.end(), id)) repeat(id);
      }
    }
  }
  if ((p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) && h.output_counts) {
    for (const auto& [id, n] : *h.output_counts) {
      if (id >= 0 && id < vocab && n > 0) {
        l[id] -= p.frequency_penalty * static_cast<float>(n) + p.presence_penalty;
      }
    }
  }
}

std::vector<TokenProb> Sampler::Distribution(const float* l, int64_t vocab,
                                             const SamplingParams& p) {
  const double inv_t = 1.0 / p.temperature;
  auto better = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  int64_t n = vocab;
  bool sorted = false;
  if (p.top_k > 0 && p.top_k < vocab) {
    n = p.top_k;
    std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), better);
    sorted = true;
  }
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, l[order_[i]]);
  if (m == -std::numeric_limits<float>::infinity()) return {{Argmax(l, vocab), 1.0}};
  auto weight = [&](int32_t id) { return std::exp((static_cast<double>(l[id]) - m) * inv_t); };
  if (p.top_p < 1.0f) {
    double z = 0.0;
    for (int64_t i = 0; i < n; ++i) z += weight(order_[i]);
    // The nucleus is usually tiny: sort a growing head of the candidates until it is reached.
    const double need = static_cast<double>(p.top_p) * z;
    int64_t cut = n;
    for (int64_t k = std::min<int64_t>(n, 64);; k = std::min(n, k * 4)) {
      if (!sorted) std::partial_sort(order_.begin(), order_.begin() + k, order_.begin() + n, better);
      double c = 0.0;
      int64_t j = 0;
      for (; j < k; ++j) {
        c += weight(order_[j]);
        if (c >= need) break;
      }
      if (j < k) {
        cut = j + 1;
        break;
      }
      if (k == n) break;
    }
    n = cut;
  }
  std::vector<TokenProb> out;
  out.reserve(n);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double w = weight(order_[i]);  // p_i / p_max
    if (w <= 0.0 || w < p.min_p) continue;
    out.push_back({order_[i], w});
    total += w;
  }
  for (TokenProb& t : out) t.p /= total;
  return out;
}

void Sampler::RawLogprobs(const float* l, int64_t vocab, int32_t id, int n, SampledToken* out) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) m = std::max(m, l[i]);
  double s = 0.0;
  for (int64_t i = 0; i < vocab; ++i) s += std::exp(static_cast<double>(l[i]) - m);
  const double lse = m + std::log(s);
  out->logprob = static_cast<float>(l[id] - lse);
  out->top.clear();
  if (n <= 0) return;
  n = static_cast<int>(std::min<int64_t>(n, vocab));
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [l](int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
  });
  for (int i = 0; i < n; ++i) {
    out->top.push_back({idx[i], static_cast<float>(l[idx[i]] - lse)});
  }
}

void Sampler::ApplyAllowedMask(float* logits, int64_t vocab, const uint32_t* allowed) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t w = 0; w * 32 < vocab; ++w) {
    const uint32_t bits = allowed[w];
    if (bits == 0xffffffffu) continue;
    const int64_t end = std::min<int64_t>(vocab, w * 32 + 32);
    for (int64_t i = w * 32; i < end; ++i) {
      if (!((bits >> (i - w * 32)) & 1u)) logits[i] = kNegInf;
    }
  }
}

SampledToken Sampler::Sample(const float* logits, int64_t vocab, const SamplingParams& p,
                             const TokenHistory& h, std::span<const int32_t> masked_ids,
                             SamplerRng& rng, const uint32_t* allowed) {
  work_.assign(logits, logits + vocab);
  if (allowed) ApplyAllowedMask(work_.data(), vocab, allowed);
  ProcessLogits(work_.data(), vocab, p, h, masked_ids);
  SampledToken t;
  if (p.greedy()) {
    t.id = Argmax(work_.data(), vocab);
  } else {
    const std::vector<TokenProb> dist = Distribution(work_.data(), vocab, p);
    const double u = rng.Uniform();
    double c = 0.0;
    t.id = dist.back().id;  // u within rounding of 1
    for (const TokenProb& e : dist) {
      c += e.p;
      if (u < c) {
        t.id = e.id;
        break;
      }
    }
  }
  if (p.logprobs >= 0) RawLogprobs(logits, vocab, t.id, p.logprobs, &t);
  return t;
}

}  // namespace mimo
