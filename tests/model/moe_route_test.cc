// MoeRoute against hand-worked noaux_tc routing: bias for selection only, group limit, ties,
// renormalisation and routed_scaling_factor.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/moe.h"

namespace mimo {
namespace {

ModelConfig RouterConfig(int experts, int top_k, int groups, int topk_group) {
  ModelConfig c;
  c.n_routed_experts = experts;
  c.num_experts_per_tok = top_k;
  c.n_group = groups;
  c.topk_group = topk_group;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 1.0f;
  return c;
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

TEST(MoeRoute, BiasSelectsButDoesNotWeight) {
  ModelConfig c = RouterConfig(8, 2, 1, 1);
  std::vector<float> logits(8, 0.0f), bias(8, 0.0f);
  logits[3] = 2.0f;
  logits[5] = 1.0f;
  bias[0] = 1.0f;  // choice(0) = 0.5 + 1 = 1.5 beats choice(3) = 0.88 and choice(5) = 0.73
  int32_t experts[2];
  float weights[2];
  MoeRoute(c, logits.data(), bias.data(), 1, experts, weights);
  EXPECT_EQ(experts[0], 0);
  EXPECT_EQ(experts[1], 3);
  const float s0 = Sigmoid(0.0f), s3 = Sigmoid(2.0f);  // raw scores, no bias
  EXPECT_NEAR(weights[0], s0 / (s0 + s3), 1e-6);
  EXPECT_NEAR(weights[1], s3 / (s0 + s3), 1e-6);
}

TEST(MoeRoute, GroupLimitAndTies) {
  // 4 groups of 2. Choices (logits 0 -> score 0.5, bias = choice - 0.5):
  // g0 {0.9, 0.1} sum 1.0; g1 {0.6, 0.6} 1.2; g2 {0.7, 0.55} 1.25; g3 {0.2, 0.2} 0.4.
  // topk_group 2 keeps g2 and g1, so expert 0 (the best single choice) is excluded; then
  // top-2 = e4 (0.7) and the tie e2/e3 (0.6) goes to the lower index, e2.
  ModelConfig c = RouterConfig(8, 2, 4, 2);
  c.routed_scaling_factor = 2.5f;
  const std::vector<float> choice = {0.9f, 0.1f, 0.6f, 0.6f, 0.7f, 0.55f, 0.2f, 0.2f};
  std::vector<float> logits(8, 0.0f), bias(8);
  for (int e = 0; e < 8; ++e) bias[e] = choice[e] - 0.5f;
  int32_t experts[2];
  float weights[2];
  MoeRoute(c, logits.data(), bias.data(), 1, experts, weights);
  EXPECT_EQ(experts[0], 4);
  EXPECT_EQ(experts[1], 2);
  EXPECT_NEAR(weights[0], 0.5f * 2.5f, 1e-6);  // equal raw scores renormalised, x scaling
  EXPECT_NEAR(weights[1], 0.5f * 2.5f, 1e-6);
}

TEST(MoeRoute, NoRenormalisationWhenDisabled) {
  ModelConfig c = RouterConfig(4, 2, 1, 1);
  c.norm_topk_prob = false;
  std::vector<float> logits = {3.0f, -1.0f, 2.0f, 0.0f}, bias(4, 0.0f);
  int32_t experts[2];
  float weights[2];
  MoeRoute(c, logits.data(), bias.data(), 1, experts, weights);
  EXPECT_EQ(experts[0], 0);
  EXPECT_EQ(experts[1], 2);
  EXPECT_NEAR(weights[0], Sigmoid(3.0f), 1e-6);
  EXPECT_NEAR(weights[1], Sigmoid(2.0f), 1e-6);
}

TEST(MoeRoute, RowsAreIndependent) {
  ModelConfig c = RouterConfig(4, 1, 1, 1);
  std::vector<float> logits = {0, 1, 0, 0, /*row 1*/ 0, 0, 0, 5}, bias(4, 0.0f);
  int32_t experts[2];
  float weights[2];
  MoeRoute(c, logits.data(), bias.data(), 2, experts, weights);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 3);
  EXPECT_NEAR(weights[0], 1.0f, 1e-6);  // top-1 renormalised
}

}  // namespace
}  // namespace mimo
