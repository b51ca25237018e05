// Greedy and stochastic sampling over one logits row.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace mimo {

int32_t Argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

int32_t Sampler::Sample(const float* logits, int64_t vocab) {
  if (p_.temperature <= 0.0f) return Argmax(logits, vocab);
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  int64_t keep = vocab;
  if (p_.top_k > 0 && p_.top_k < vocab) keep = p_.top_k;
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  idx.resize(keep);
  const float m = logits[idx[0]];
  std::vector<double> prob(keep);
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    prob[i] = std::exp(static_cast<double>(logits[idx[i]] - m) / p_.temperature);
    sum += prob[i];
  }
  for (double& x : prob) x /= sum;
  // min-p relative to the top probability, then nucleus (top-p) over the sorted list.
  int64_t n = keep;
  if (p_.min_p > 0.0f) {
    while (n > 1 && prob[n - 1] < p_.min_p * prob[0]) --n;
  }
  if (p_.top_p < 1.0f) {
    double c = 0.0;
    int64_t cut = n;
    for (int64_t i = 0; i < n; ++i) {
      c += prob[i];
      if (c >= p_.top_p) {
        cut = i + 1;
        break;
      }
    }
    n = cut;
  }
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += prob[i];
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_), c = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    c += prob[i];
    if (r < c) return idx[i];
  }
  return idx[n - 1];
}

}  // namespace mimo
