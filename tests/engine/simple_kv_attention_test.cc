// SimpleKvAttention against a brute-force float64 attention written from spec §2.3: GQA,
// causal mask, sliding window of W keys including the current one, sinks in the denominator,
// asymmetric K/V dims; and prefill == chunked == token-by-token decode.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/simple_kv_attention.h"

namespace mimo {
namespace {

struct Case {
  int nh, nkv, dqk, dv, window, T;
  bool sinks;
};

// out [T, nh, dv] for one sequence starting at position 0.
std::vector<double> BruteForce(const Case& c, const std::vector<float>& q,
                               const std::vector<float>& k, const std::vector<float>& v,
                               const std::vector<float>& sinks) {
  std::vector<double> out(static_cast<size_t>(c.T) * c.nh * c.dv, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dqk));
  for (int i = 0; i < c.T; ++i) {
    for (int h = 0; h < c.nh; ++h) {
      const int kvh = h / (c.nh / c.nkv);
      std::vector<double> s;
      std::vector<int> js;
      for (int j = 0; j <= i; ++j) {
        if (c.window > 0 && i - j >= c.window) continue;  // W keys: i-W+1 .. i
        double dot = 0;
        for (int d = 0; d < c.dqk; ++d)
          dot += static_cast<double>(q[(i * c.nh + h) * c.dqk + d]) * k[(j * c.nkv + kvh) * c.dqk + d];
        s.push_back(dot * scale);
        js.push_back(j);
      }
      double m = -1e300;
      for (double x : s) m = std::max(m, x);
      if (c.sinks) m = std::max(m, static_cast<double>(sinks[h]));
      double denom = c.sinks ? std::exp(sinks[h] - m) : 0.0;
      for (double x : s) denom += std::exp(x - m);
      for (size_t n = 0; n < s.size(); ++n) {
        const double p = std::exp(s[n] - m) / denom;
        for (int d = 0; d < c.dv; ++d)
          out[(i * c.nh + h) * c.dv + d] += p * v[(js[n] * c.nkv + kvh) * c.dv + d];
      }
    }
  }
  return out;
}

class SimpleKvAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(SimpleKvAttentionTest, MatchesBruteForceInAnyChunking) {
  const Case c = GetParam();
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](size_t n, float sc) {
    std::vector<float> x(n);
    for (float& e : x) e = sc * nd(rng);
    return x;
  };
  auto q = fill(static_cast<size_t>(c.T) * c.nh * c.dqk, 1.0f);
  auto k = fill(static_cast<size_t>(c.T) * c.nkv * c.dqk, 1.0f);
  auto v = fill(static_cast<size_t>(c.T) * c.nkv * c.dv, 1.0f);
  auto sinks = fill(c.nh, 2.0f);
  const auto want = BruteForce(c, q, k, v, sinks);
  AttentionGeometry g{c.nh, c.nkv, c.dqk, c.dv, c.window, 1.0f / std::sqrt(float(c.dqk))};
  ThreadPool pool(2);
  ExecContext ctx{&pool};
  for (int chunk : {c.T, 1, 5}) {  // prefill, decode, chunked prefill
    SimpleKvAttention kv;
    std::vector<float> out(want.size());
    for (int s = 0; s < c.T; s += chunk) {
      const int n = std::min(chunk, c.T - s);
      StepBatch b;
      b.chunks.push_back({3, 0, n, s});
      b.num_tokens = n;
      kv.Forward(ctx, 0, g, b, q.data() + s * c.nh * c.dqk, k.data() + s * c.nkv * c.dqk,
                 v.data() + s * c.nkv * c.dv, c.sinks ? sinks.data() : nullptr,
                 out.data() + s * c.nh * c.dv);
    }
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-4) << "chunk " << chunk << " at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, SimpleKvAttentionTest,
                         ::testing::Values(Case{4, 2, 24, 16, 0, 20, false},   // full, GQA, asym
                                           Case{4, 4, 24, 16, 6, 20, true},    // SWA + sinks
                                           Case{8, 2, 32, 8, 4, 13, true},     // SWA, 4 q/kv
                                           Case{2, 1, 16, 16, 0, 9, true}));   // full + sinks

TEST(SimpleKvAttention, TwoSequencesInOneStepDoNotMix) {
  Case c{2, 1, 8, 4, 0, 6, false};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> q(12 * 2 * 8), k(12 * 8), v(12 * 4);
  for (auto* x : {&q, &k, &v}) for (float& e : *x) e = nd(rng);
  AttentionGeometry g{2, 1, 8, 4, 0, 1.0f / std::sqrt(8.0f)};
  ExecContext ctx{nullptr};
  SimpleKvAttention kv;
  StepBatch b;
  b.chunks = {{0, 0, 6, 0}, {1, 6, 6, 0}};
  b.num_tokens = 12;
  std::vector<float> out(12 * 2 * 4);
  kv.Forward(ctx, 0, g, b, q.data(), k.data(), v.data(), nullptr, out.data());
  for (int s = 0; s < 2; ++s) {
    std::vector<float> qs(q.begin() + s * 96, q.begin() + (s + 1) * 96);
    std::vector<float> ks(k.begin() + s * 48, k.begin() + (s + 1) * 48);
    std::vector<float> vs(v.begin() + s * 24, v.begin() + (s + 1) * 24);
    auto want = BruteForce(c, qs, ks, vs, {});
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[s * 48 + i], want[i], 1e-5);
  }
}

}  // namespace
}  // namespace mimo
