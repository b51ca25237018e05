// Sampler against direct reference computations on fixed logits: each processing rule, the
// top-k / top-p / min-p distribution against a brute-force sort in double, the empirical
// distribution of many draws against softmax, seeds, and raw logprobs.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

namespace mimo {
namespace {

std::vector<float> RandomLogits(int64_t v, uint32_t seed, float scale = 3.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> l(v);
  for (float& x : l) x = n(g);
  return l;
}

TEST(Sampler, ProcessLogitsAppliesEachRuleAsSpecified) {
  const std::vector<float> raw = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  SamplingParams p;
  p.logit_bias = {{1, 5.0f}, {4, -100.0f}};
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt_unique = {0, 1};  // prompt tokens 0 and 1
  const std::unordered_map<int32_t, int> counts = {{1, 1}, {3, 2}};  // output: 1 once, 3 twice
  std::vector<float> l = raw;
  const std::vector<int32_t> masked = {5};
  Sampler::ProcessLogits(l.data(), 6, p, {prompt_unique, &counts}, masked);
  // Expected, rule by rule (bias, mask, repetition on prompt+output, frequency/presence on output).
  std::vector<float> want = raw;
  want[1] += 5.0f;
  want[4] -= 100.0f;
  want[5] = -INFINITY;
  for (int id : {0, 1, 3}) want[id] = want[id] > 0 ? want[id] / 2.0f : want[id] * 2.0f;
  want[1] -= 0.5f * 1 + 0.25f;
  want[3] -= 0.5f * 2 + 0.25f;
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(l[i], want[i]) << "token " << i;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s;
  SamplerRng rng(1);
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<float> l = {1.0f, 4.0f, 2.0f, 4.0f};
  EXPECT_EQ(s.Sample(l.data(), 4, p, {}, {}, rng).id, 1);
  // Bias and penalties change the argmax.
  p.logit_bias = {{2, 2.5f}};
  EXPECT_EQ(s.Sample(l.data(), 4, p, {}, {}, rng).id, 2);
}

// The kept set and probabilities by brute force: full sort in double, then each filter.
std::map<int32_t, double> BruteForce(const std::vector<float>& l, const SamplingParams& p) {
  const int64_t v = static_cast<int64_t>(l.size());
  std::vector<int32_t> idx(v);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  if (p.top_k > 0 && p.top_k < v) idx.resize(p.top_k);
  std::vector<double> w;
  double z = 0;
  for (int32_t i : idx) {
    w.push_back(std::exp((static_cast<double>(l[i]) - l[idx[0]]) / p.temperature));
    z += w.back();
  }
  size_t keep = idx.size();
  if (p.top_p < 1.0f) {
    double c = 0;
    for (size_t j = 0; j < idx.size(); ++j) {
      c += w[j] / z;
      if (c >= p.top_p) {
        keep = j + 1;
        break;
      }
    }
  }
  std::map<int32_t, double> out;
  double t = 0;
  for (size_t j = 0; j < keep; ++j) {
    if (w[j] < p.min_p) continue;  // w is p / p_max
    out[idx[j]] = w[j];
    t += w[j];
  }
  for (auto& [id, x] : out) x /= t;
  return out;
}

TEST(Sampler, DistributionMatchesBruteForceForEveryFilterCombination) {
  Sampler s;
  int checked = 0;
  for (int64_t v : {7, 100, 5000}) {
    for (uint32_t seed = 0; seed < 3; ++seed) {
      const std::vector<float> l = RandomLogits(v, seed + 10 * v);
      for (float t : {0.3f, 1.0f, 1.7f}) {
        for (int k : {0, 1, 5, 64}) {
          for (float top_p : {1.0f, 0.9f, 0.5f, 0.05f}) {
            for (float min_p : {0.0f, 0.1f, 0.6f}) {
              SamplingParams p;
              p.temperature = t;
              p.top_k = k;
              p.top_p = top_p;
              p.min_p = min_p;
              const std::map<int32_t, double> want = BruteForce(l, p);
              const std::vector<TokenProb> got = s.Distribution(l.data(), v, p);
              ASSERT_EQ(got.size(), want.size())
                  << "v=" << v << " t=" << t << " k=" << k << " p=" << top_p << " min_p=" << min_p;
              for (const TokenProb& e : got) {
                ASSERT_TRUE(want.count(e.id)) << "token " << e.id << " should be filtered out";
                EXPECT_NEAR(e.p, want.at(e.id), 1e-12);
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 3 * 3 * 3 * 4 * 4 * 3);
}

// 400k draws over 6 tokens at temperature 0.7 and top_p 0.95: every empirical frequency within
// 5 standard deviations of the target (a wrong temperature, a missing renormalisation or an
// off-by-one in the walk moves some frequency by far more), and filtered tokens never drawn.
TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
  const std::vector<float> l = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f};
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_p = 0.95f;
  const std::map<int32_t, double> want = BruteForce(l, p);
  ASSERT_LT(want.size(), l.size());  // the filter removes something
  Sampler s;
  SamplerRng rng(42);
  const int n = 400000;
  std::map<int32_t, int> count;
  for (int i = 0; i < n; ++i) ++count[s.Sample(l.data(), 6, p, {}, {}, rng).id];
  for (const auto& [id, c] : count) ASSERT_TRUE(want.count(id)) << "drew filtered token " << id;
  for (const auto& [id, q] : want) {
    const double sd = std::sqrt(n * q * (1 - q));
    EXPECT_LT(std::abs(count[id] - n * q), 5 * sd) << "token " << id << " p=" << q;
  }
}

TEST(Sampler, SeedsReproduceAndDiffer) {
  const std::vector<float> l = RandomLogits(1000, 3, 1.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  Sampler s;
  auto draw = [&](uint64_t seed) {
    SamplerRng rng(seed);
    std::vector<int32_t> ids;
    for (int i = 0; i < 50; ++i) ids.push_back(s.Sample(l.data(), 1000, p, {}, {}, rng).id);
    return ids;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, RawLogprobsAreLogSoftmaxOfTheUnprocessedLogits) {
  const std::vector<float> l = RandomLogits(300, 5);
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 3;
  p.logit_bias = {{17, 50.0f}};  // forces the choice; logprobs stay those of the raw logits
  Sampler s;
  SamplerRng rng(0);
  const SampledToken t = s.Sample(l.data(), 300, p, {}, {}, rng);
  ASSERT_EQ(t.id, 17);
  double z = 0;
  const double m = *std::max_element(l.begin(), l.end());
  for (float x : l) z += std::exp(x - m);
  auto lp = [&](int i) { return l[i] - m - std::log(z); };
  EXPECT_NEAR(t.logprob, lp(17), 1e-5);
  std::vector<int> idx(300);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return l[a] > l[b]; });
  ASSERT_EQ(t.top.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t.top[i].first, idx[i]);
    EXPECT_NEAR(t.top[i].second, lp(idx[i]), 1e-5);
  }
}

TEST(Sampler, ValidateNamesTheField) {
  auto err = [](auto edit) {
    SamplingParams p;
    edit(p);
    return p.Validate(100).message();
  };
  EXPECT_NE(err([](SamplingParams& p) { p.temperature = -1; }).find("temperature"), std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.top_p = 0; }).find("top_p"), std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.min_p = 2; }).find("min_p"), std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.top_k = -5; }).find("top_k"), std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.presence_penalty = 3; }).find("presence_penalty"),
            std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.logit_bias = {{100, 1}}; }).find("logit_bias"),
            std::string::npos);
  EXPECT_NE(err([](SamplingParams& p) { p.logprobs = 21; }).find("logprobs"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.Validate(100).ok());
}

}  // namespace
}  // namespace mimo
