// Draft verification: greedy acceptance against hand-built rows, and the statistical check that
// speculative sampling outputs exactly the target distribution (drafts from a different
// distribution, on a subset of the vocabulary). The bound is chosen so that it fails for a wrong
// correction (resampling the target instead of the residual after a rejection): the test runs
// that wrong rule too and requires it to be rejected.
#include "spec/verify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "core/max_error.h"

namespace mimo {
namespace {

constexpr int kVocab = 6;

std::unique_ptr<Request> MakeRequest(float temperature, uint64_t seed) {
  auto g = std::make_shared<GenerationRequest>();
  g->prompt_ids = {1, 2};
  g->sampling.temperature = temperature;
  auto r = std::make_unique<Request>();
  r->spec = g;
  r->rng = SamplerRng(seed);
  r->stop = std::make_unique<StopChecker>(nullptr, g->stop, std::vector<int32_t>{});
  return r;
}

TEST(VerifyDrafts, GreedyAcceptsTheMatchingPrefixPlusOne) {
  // Rows' argmax: 3, 1, 4, 2 (draft 0 and 1 match, draft 2 does not).
  std::vector<float> rows(4 * kVocab, 0.0f);
  const int argmax[] = {3, 1, 4, 2};
  for (int i = 0; i < 4; ++i) rows[i * kVocab + argmax[i]] = 5.0f;
  Sampler s;
  auto r = MakeRequest(0.0f, 0);
  r->draft = {3, 1, 0};
  std::vector<SampledToken> out = VerifyDrafts(*r, rows.data(), kVocab, {}, s);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].id, 3);
  EXPECT_EQ(out[1].id, 1);
  EXPECT_EQ(out[2].id, 4);  // the target's token replaces the rejected draft
  r->draft = {3, 1, 4};     // all accepted: plus the bonus
  out = VerifyDrafts(*r, rows.data(), kVocab, {}, s);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[3].id, 2);
  r->draft = {5, 1, 4};  // first rejected
  out = VerifyDrafts(*r, rows.data(), kVocab, {}, s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].id, 3);
}

// Frequency of the first output token over n verifications with one draft d ~ q.
std::vector<double> FirstTokenFrequencies(const std::vector<float>& target_logits,
                                          const std::vector<TokenProb>& q, int n, bool wrong) {
  Sampler s;
  std::vector<double> f(kVocab, 0.0);
  auto r = MakeRequest(1.0f, 12345);
  std::vector<float> rows(2 * kVocab);
  std::copy(target_logits.begin(), target_logits.end(), rows.begin());
  std::copy(target_logits.begin(), target_logits.end(), rows.begin() + kVocab);
  const std::vector<TokenProb> p = s.Distribution(target_logits.data(), kVocab, r->spec->sampling);
  for (int i = 0; i < n; ++i) {
    double u = r->rng.Uniform(), c = 0.0;  // the draft, drawn from q
    int32_t d = q.back().id;
    for (const TokenProb& e : q) {
      c += e.p;
      if (u < c) {
        d = e.id;
        break;
      }
    }
    r->draft = {d};
    r->draft_probs = {q};
    int32_t first;
    if (!wrong) {
      first = VerifyDrafts(*r, rows.data(), kVocab, {}, s)[0].id;
    } else {
      // The classic mistake: on rejection, draw from p itself instead of the residual.
      double pd = 0, qd = 0;
      for (const TokenProb& e : p) pd += e.id == d ? e.p : 0;
      for (const TokenProb& e : q) qd += e.id == d ? e.p : 0;
      if (r->rng.Uniform() * qd < pd) {
        first = d;
      } else {
        first = SampleResidual(p, {}, r->rng.Uniform());
      }
    }
    f[first] += 1.0 / n;
  }
  return f;
}

TEST(VerifyDrafts, SpeculativeSamplingOutputsTheTargetDistribution) {
  const std::vector<float> target = {1.5f, 0.2f, -0.3f, 0.9f, -1.0f, 0.0f};
  // The draft only knows tokens 0, 2, 3 and is far from the target on them.
  const std::vector<TokenProb> q = {{0, 0.2}, {2, 0.5}, {3, 0.3}};
  Sampler s;
  auto probe = MakeRequest(1.0f, 0);
  const std::vector<TokenProb> p = s.Distribution(target.data(), kVocab, probe->spec->sampling);
  std::vector<double> pv(kVocab, 0.0);
  for (const TokenProb& e : p) pv[e.id] = e.p;
  const int n = 200000;
  auto max_z = [&](const std::vector<double>& f) {
    test::MaxError z;  // per token; a NaN frequency fails
    for (int i = 0; i < kVocab; ++i) {
      const double sd = std::sqrt(pv[i] * (1 - pv[i]) / n);
      const double d = std::abs(f[i] - pv[i]);
      z.Add(d == 0 ? 0.0 : d / sd, i);  // p in {0, 1}: sd 0, any deviation is infinitely unlikely
    }
    return z.max;
  };
  // Bound: 5 standard deviations per token (chance of a false failure ~1e-5 over 6 tokens).
  const double z_right = max_z(FirstTokenFrequencies(target, q, n, false));
  const double z_wrong = max_z(FirstTokenFrequencies(target, q, n, true));
  EXPECT_LT(z_right, 5.0);
  EXPECT_GT(z_wrong, 5.0) << "the bound cannot tell a wrong correction apart";
}

TEST(VerifyDrafts, ResidualIsTheNormalisedPositivePart) {
  const std::vector<TokenProb> p = {{0, 0.5}, {1, 0.3}, {2, 0.2}};
  const std::vector<TokenProb> q = {{0, 0.7}, {2, 0.1}, {5, 0.2}};
  // max(0, p - q) = {1: 0.3, 2: 0.1}: token 1 with probability 3/4.
  int ones = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const int32_t t = SampleResidual(p, q, (i + 0.5) / n);
    ASSERT_TRUE(t == 1 || t == 2);
    ones += t == 1;
  }
  EXPECT_EQ(ones, 3000);
}

}  // namespace
}  // namespace mimo
