// Draft verification: greedy acceptance against hand-built rows, and the statistical check that
// speculative sampling outputs exactly the target distribution (drafts from a different
// distribution, on a subset of the vocabulary). The bound is chosen so that it fails for a wrong
// correction (resampling the target instead of the residual after a rejection): the test runs
// that wrong rule too and requires it to be rejected. At draft positions >= 1 the row is the
// distribution after the accepted drafts: penalties count them (worked out here from the
// penalties' definitions), and each position is checked with its own draft distribution.
#include "speculative/verify.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "core/max_error.h"

namespace mimo {
namespace {

constexpr int kVocab = 6;

std::unique_ptr<Request> MakeRequest(float temperature, uint64_t seed) {
  auto g = std::make_shared<GenerationRequest>();
  g->prompt_ids = {1, 2};
  g->sampling.temperature = temperature;
  auto r = std::make_unique<Request>();
  r->params = g;
  r->rng = SamplerRng(seed);
  r->stop = std::make_unique<StopChecker>(nullptr, g->stop, std::vector<int32_t>{});
  return r;
}

// The token at cumulative probability u of q (the test's own draw of a draft).
int32_t DrawFrom(const std::vector<TokenProb>& q, double u) {
  double c = 0.0;
  for (const TokenProb& e : q) {
    c += e.p;
    if (u < c) return e.id;
  }
  return q.back().id;
}

TEST(VerifyDrafts, GreedyAcceptsTheMatchingPrefixPlusOne) {
  // Rows' argmax: 3, 1, 4, 2 (draft 0 and 1 match, draft 2 does not).
  std::vector<float> rows(4 * kVocab, 0.0f);
  const int argmax[] = {3, 1, 4, 2};
  for (int i = 0; i < 4; ++i) rows[i * kVocab + argmax[i]] = 5.0f;
  Sampler s;
  auto r = MakeRequest(0.0f, 0);
  r->draft = {3, 1, 0};
  VerifyResult v = VerifyDrafts(*r, rows.data(), kVocab, {}, s);
  ASSERT_EQ(v.tokens.size(), 3u);
  EXPECT_EQ(v.num_accepted, 2);
  EXPECT_EQ(v.tokens[0].id, 3);
  EXPECT_EQ(v.tokens[1].id, 1);
  EXPECT_EQ(v.tokens[2].id, 4);  // the target's token replaces the rejected draft
  r->draft = {3, 1, 4};          // all accepted: plus the bonus
  v = VerifyDrafts(*r, rows.data(), kVocab, {}, s);
  ASSERT_EQ(v.tokens.size(), 4u);
  EXPECT_EQ(v.num_accepted, 3);
  EXPECT_EQ(v.tokens[3].id, 2);
  r->draft = {5, 1, 4};  // first rejected
  v = VerifyDrafts(*r, rows.data(), kVocab, {}, s);
  ASSERT_EQ(v.tokens.size(), 1u);
  EXPECT_EQ(v.num_accepted, 0);
  EXPECT_EQ(v.tokens[0].id, 3);
}

// Greedy rows after an accepted draft are penalised by it: row 1's raw argmax is token 2, the
// first draft; a frequency penalty on it makes token 4 the target's choice there.
TEST(VerifyDrafts, GreedyRowsCountTheAcceptedDraftsInPenalties) {
  std::vector<float> rows(3 * kVocab, 0.0f);
  rows[0 * kVocab + 2] = 5.0f;
  rows[1 * kVocab + 2] = 3.0f;
  rows[1 * kVocab + 4] = 2.5f;
  rows[2 * kVocab + 1] = 1.0f;
  Sampler s;
  auto r = MakeRequest(0.0f, 0);
  auto g = std::make_shared<GenerationRequest>(*r->params);
  g->sampling.frequency_penalty = 1.0f;
  r->params = g;
  r->draft = {2, 2};
  VerifyResult v = VerifyDrafts(*r, rows.data(), kVocab, {}, s);
  ASSERT_EQ(v.tokens.size(), 2u);
  EXPECT_EQ(v.num_accepted, 1);
  EXPECT_EQ(v.tokens[1].id, 4);  // 3 - 1 < 2.5
  r->draft = {2, 4};             // both accepted; the bonus row sees 2 and 4 penalised
  v = VerifyDrafts(*r, rows.data(), kVocab, {}, s);
  ASSERT_EQ(v.tokens.size(), 3u);
  EXPECT_EQ(v.num_accepted, 2);
  EXPECT_EQ(v.tokens[2].id, 1);
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
  const std::vector<TokenProb> p =
      s.Distribution(target_logits.data(), kVocab, r->params->sampling);
  for (int i = 0; i < n; ++i) {
    const int32_t d = DrawFrom(q, r->rng.Uniform());  // the draft, drawn from q
    r->draft = {d};
    r->draft_probs = {q};
    int32_t first;
    if (!wrong) {
      first = VerifyDrafts(*r, rows.data(), kVocab, {}, s).tokens[0].id;
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
  const std::vector<TokenProb> p = s.Distribution(target.data(), kVocab, probe->params->sampling);
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

// softmax(l) at temperature 1, after the penalties of vLLM's definitions for a request whose
// prompt holds `prompt` and whose output holds each `output` id `count` times: repetition
// (divide a positive logit, multiply a negative one, once per distinct id of prompt or output),
// then frequency (x count) and presence (once) on output ids.
std::vector<double> PenalisedSoftmax(std::vector<float> l, const std::vector<int32_t>& prompt,
                                     const std::map<int32_t, int>& output, float rep, float freq,
                                     float pres) {
  std::set<int32_t> seen(prompt.begin(), prompt.end());
  for (const auto& [id, n] : output) seen.insert(id);
  for (int32_t id : seen) l[id] = l[id] > 0 ? l[id] / rep : l[id] * rep;
  for (const auto& [id, n] : output) l[id] -= freq * n + pres;
  std::vector<double> p(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(static_cast<double>(l[i]));
  for (double& x : p) x /= z;
  return p;
}

// Two drafts: the first always token 0 (q0 a point mass), the second drawn from q1, a
// distribution far from the target's. Given the first draft accepted, the second output token
// (accepted draft or correction) and, given both accepted, the bonus token follow the target's
// rows 1 and 2 after penalising the accepted tokens. Wrong: the second position verified with
// q0 (the first draft's probabilities), or penalties that ignore the accepted drafts.
TEST(VerifyDrafts, LaterPositionsFollowThePenalisedTargetGivenTheAcceptedDrafts) {
  const std::vector<float> l0 = {2.5f, 0.0f, 0.3f, -0.5f, 0.1f, -1.0f};
  const std::vector<float> l1 = {1.2f, 0.4f, -0.2f, 0.9f, 0.0f, 0.6f};
  const std::vector<float> l2 = {0.8f, 0.5f, 1.0f, -0.4f, 0.2f, 0.0f};
  const std::vector<TokenProb> q0 = {{0, 1.0}};
  const std::vector<TokenProb> q1 = {{0, 0.45}, {3, 0.05}, {4, 0.5}};
  const float rep = 1.3f, freq = 0.7f, pres = 0.4f;
  const std::vector<int32_t> prompt = {1, 2};
  std::vector<float> rows;
  for (const auto* l : {&l0, &l1, &l2}) rows.insert(rows.end(), l->begin(), l->end());
  Sampler s;
  auto r = MakeRequest(1.0f, 777);
  auto g = std::make_shared<GenerationRequest>(*r->params);
  g->sampling.repetition_penalty = rep;
  g->sampling.frequency_penalty = freq;
  g->sampling.presence_penalty = pres;
  r->params = g;
  r->prompt_unique = prompt;
  SamplerRng draw(99);
  const int n = 200000;
  std::vector<double> second(kVocab, 0.0), bonus(kVocab, 0.0);
  std::map<int32_t, std::vector<double>> bonus_by_second;
  int n_second = 0;
  std::map<int32_t, int> n_bonus;
  for (int it = 0; it < n; ++it) {
    const int32_t d1 = DrawFrom(q1, draw.Uniform());
    r->draft = {0, d1};
    r->draft_probs = {q0, q1};
    const VerifyResult v = VerifyDrafts(*r, rows.data(), kVocab, {}, s);
    ASSERT_EQ(v.tokens.size(), static_cast<size_t>(v.num_accepted) + 1);
    if (v.num_accepted == 0) continue;
    second[v.tokens[1].id] += 1;
    ++n_second;
    if (v.num_accepted == 2) {
      auto& b = bonus_by_second[d1];
      b.resize(kVocab);
      b[v.tokens[2].id] += 1;
      ++n_bonus[d1];
    }
  }
  auto max_z = [](const std::vector<double>& counts, int total, const std::vector<double>& p) {
    test::MaxError z;
    for (int i = 0; i < kVocab; ++i) {
      const double f = counts[i] / total, sd = std::sqrt(p[i] * (1 - p[i]) / total);
      z.Add(std::abs(f - p[i]) / sd, i);
    }
    return z.max;
  };
  const double p0 = PenalisedSoftmax(l0, prompt, {}, rep, freq, pres)[0];
  EXPECT_NEAR(static_cast<double>(n_second) / n, p0, 5 * std::sqrt(p0 * (1 - p0) / n));
  const std::vector<double> p1 = PenalisedSoftmax(l1, prompt, {{0, 1}}, rep, freq, pres);
  const std::vector<double> p1_unpenalised = PenalisedSoftmax(l1, prompt, {}, rep, freq, pres);
  EXPECT_LT(max_z(second, n_second, p1), 5.0);
  EXPECT_GT(max_z(second, n_second, p1_unpenalised), 5.0) << "the bound cannot see the penalty";
  // The bonus after drafts 0 then 4 (0 then 0 is checked too: two counts of token 0).
  for (int32_t d1 : {4, 0}) {
    ASSERT_GT(n_bonus[d1], 10000) << d1;
    std::map<int32_t, int> out = {{0, 1}};
    ++out[d1];
    EXPECT_LT(
        max_z(bonus_by_second[d1], n_bonus[d1], PenalisedSoftmax(l2, prompt, out, rep, freq, pres)),
        5.0)
        << "bonus after 0, " << d1;
  }
}

// DFlash drafts greedily and hands the verifier one-hot proposals (draft_probs {{d, 1}}), so a
// draft d is accepted with probability p(d) and a rejection draws from p without d. Over a chain
// of 3 such drafts with fixed target rows, the emitted tokens must be distributed as plain
// sampling from the rows: the first token as p0, and the accepted length L as plain sampling's
// number of leading tokens equal to the drafts (P(L >= j) = p0(d0) ... p(j-1)(d(j-1))). The
// wrong correction (on rejection, draw from p itself: d can come out of a rejection too) must
// fail the same bound.
struct OneHotChainStats {
  std::vector<double> first;     // [vocab] frequency of the first emitted token
  std::vector<double> accepted;  // [k + 1] frequency of L = 0 .. k
};

OneHotChainStats OneHotChain(const std::vector<std::vector<float>>& rows,
                             const std::vector<int32_t>& drafts, int n, bool wrong) {
  Sampler s;
  const int k = static_cast<int>(drafts.size());
  auto r = MakeRequest(1.0f, 777);
  std::vector<float> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  OneHotChainStats st{std::vector<double>(kVocab, 0.0), std::vector<double>(k + 1, 0.0)};
  for (int i = 0; i < n; ++i) {
    r->draft = drafts;
    r->draft_probs.clear();
    for (int32_t d : drafts) r->draft_probs.push_back({{d, 1.0}});
    int32_t first;
    int accepted;
    if (!wrong) {
      const VerifyResult v = VerifyDrafts(*r, flat.data(), kVocab, {}, s);
      first = v.tokens[0].id;
      accepted = v.num_accepted;
    } else {
      accepted = 0;
      first = -1;
      for (int j = 0; j <= k; ++j) {
        const std::vector<TokenProb> p =
            s.Distribution(rows[j].data(), kVocab, r->params->sampling);
        int32_t t;
        bool ok = false;
        if (j < k) {
          double pd = 0;
          for (const TokenProb& e : p) pd += e.id == drafts[j] ? e.p : 0;
          ok = r->rng.Uniform() < pd;
          t = ok ? drafts[j] : DrawFrom(p, r->rng.Uniform());  // wrong: d may come back
        } else {
          t = DrawFrom(p, r->rng.Uniform());
        }
        if (first < 0) first = t;
        if (!ok) break;
        ++accepted;
      }
    }
    st.first[first] += 1.0 / n;
    st.accepted[accepted] += 1.0 / n;
  }
  return st;
}

TEST(VerifyDrafts, OneHotDraftsOfDFlashKeepTheTargetDistribution) {
  const std::vector<std::vector<float>> rows = {{0.9f, 1.4f, -0.3f, 0.2f, -1.0f, 0.0f},
                                                {0.1f, -0.4f, 1.2f, 0.7f, 0.3f, -0.8f},
                                                {1.1f, 0.2f, 0.0f, -0.6f, 0.9f, 0.4f},
                                                {0.0f, 0.5f, -0.2f, 1.3f, 0.1f, -0.3f}};
  const std::vector<int32_t> drafts = {0, 3, 4};  // not the rows' argmaxes: rejections happen
  Sampler s;
  auto probe = MakeRequest(1.0f, 0);
  std::vector<std::vector<double>> p(rows.size(), std::vector<double>(kVocab, 0.0));
  for (size_t j = 0; j < rows.size(); ++j) {
    for (const TokenProb& e : s.Distribution(rows[j].data(), kVocab, probe->params->sampling)) {
      p[j][e.id] = e.p;
    }
  }
  // Plain sampling's expectations: the first token ~ p0; L = j with probability
  // prod_{i<j} p_i(d_i) * (1 - p_j(d_j)) (the last term 1 at j = k).
  std::vector<double> want_len(drafts.size() + 1);
  double prefix = 1.0;
  for (size_t j = 0; j <= drafts.size(); ++j) {
    const double stay = j < drafts.size() ? p[j][drafts[j]] : 0.0;
    want_len[j] = prefix * (1.0 - stay);
    prefix *= stay;
  }
  const int n = 200000;
  auto max_z = [&](const std::vector<double>& f, const std::vector<double>& want) {
    test::MaxError z;
    for (size_t i = 0; i < want.size(); ++i) {
      const double sd = std::sqrt(want[i] * (1 - want[i]) / n);
      const double d = std::abs(f[i] - want[i]);
      z.Add(d == 0 ? 0.0 : d / sd, static_cast<int>(i));
    }
    return z.max;
  };
  const OneHotChainStats right = OneHotChain(rows, drafts, n, false);
  const OneHotChainStats wrong = OneHotChain(rows, drafts, n, true);
  // 5 standard deviations per entry (a false failure ~1e-5 over the 10 entries).
  EXPECT_LT(max_z(right.first, p[0]), 5.0);
  EXPECT_LT(max_z(right.accepted, want_len), 5.0);
  EXPECT_GT(max_z(wrong.first, p[0]), 5.0) << "the bound cannot tell a wrong correction apart";
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
