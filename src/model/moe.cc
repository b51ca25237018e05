// MoE routing and expert dispatch (tokens grouped by expert so each expert's weights are read
// once per step, whatever the number of tokens routed to it).
#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/scratch.h"
#include "kernels/kernels.h"

namespace mimo {

void MoeRoute(const ModelConfig& cfg, const float* logits, const float* bias, int64_t T,
              int32_t* experts, float* weights) {
  const int E = cfg.n_routed_experts, K = cfg.num_experts_per_tok;
  const int G = std::max(cfg.n_group, 1), per_group = E / G;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> score(E), choice(E), group_score(G);
  std::vector<int> order(std::max(E, G));
  for (int64_t t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits[t * E + e]));  // sigmoid in fp32
      choice[e] = score[e] + bias[e];                           // bias: selection only
    }
    if (G > 1) {
      // Group score = sum of the top-2 choices in the group; keep the topk_group best groups.
      for (int g = 0; g < G; ++g) {
        float a = kNegInf, b = kNegInf;
        for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
          if (choice[e] > a) { b = a; a = choice[e]; } else if (choice[e] > b) { b = choice[e]; }
        }
        group_score[g] = per_group >= 2 ? a + b : a;
      }
      for (int g = 0; g < G; ++g) order[g] = g;
      std::stable_sort(order.begin(), order.begin() + G,
                       [&](int x, int y) { return group_score[x] > group_score[y]; });
      for (int r = cfg.topk_group; r < G; ++r) {
        const int g = order[r];
        for (int e = g * per_group; e < (g + 1) * per_group; ++e) choice[e] = kNegInf;
      }
    }
    for (int e = 0; e < E; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + K, order.begin() + E, [&](int x, int y) {
      return choice[x] > choice[y] || (choice[x] == choice[y] && x < y);
    });
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) {
      experts[t * K + k] = order[k];
      weights[t * K + k] = score[order[k]];  // raw sigmoid, without the bias
      sum += score[order[k]];
    }
    for (int k = 0; k < K; ++k) {
      if (cfg.norm_topk_prob) weights[t * K + k] /= (sum + 1e-20f);
      weights[t * K + k] *= cfg.routed_scaling_factor;
    }
  }
}

namespace {
// silu(gate(h)) * up(h) over this rank's intermediate rows.   act [T, gate rows]
void GateUp(ExecContext& ctx, const MlpWeights& w, const float* h, int64_t T, float* act) {
  const int64_t inter = w.gate_proj.rows;
  ScratchFrame frame;
  float* up = frame.Floats(T * inter);  // [T, intermediate rows]
  const LinearJob gate_up[2] = {{h, T, &w.gate_proj, act}, {h, T, &w.up_proj, up}};
  LinearMany(ctx, gate_up, 2);  // one fork-join region for both
  SiluMul(act, up, act, T * inter);
}
}  // namespace

using Routed = std::vector<std::vector<std::pair<int64_t, float>>>;  // [E] (token, weight)

namespace {
void GatherRows(const float* h, int64_t H, const std::vector<std::pair<int64_t, float>>& list,
                float* xin) {
  for (size_t i = 0; i < list.size(); ++i) {
    std::copy(h + list[i].first * H, h + (list[i].first + 1) * H, xin + i * H);
  }
}

// out[token] += weight * y[i] for each (token, weight) of list; y [list, width], out [T, width].
void ScatterAdd(const std::vector<std::pair<int64_t, float>>& list, const float* y, int64_t width,
                float* out) {
  for (size_t i = 0; i < list.size(); ++i) {
    float* o = out + list[i].first * width;
    const float wt = list[i].second;
    for (int64_t c = 0; c < width; ++c) o[c] += wt * y[i * width + c];
  }
}

// Expert parallel: this rank runs its own experts; all outputs are all-gathered (rank order is
// expert order) and every rank adds them up in expert order, as one process does.
int MoeExpertParallel(ExecContext& ctx, const ModelConfig& cfg, const MoeWeights& w,
                      const float* h, int64_t T, const Routed& routed, float* out,
                      const TpContext& tp) {
  const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts;
  const int n = tp.slice.size;
  std::vector<int> counts(n, 0);
  int used = 0;
  for (int r = 0; r < n; ++r) {
    const RowRange er = HeldExperts(E, TpSlice{r, n, true});  // rank r's experts (sharding.h)
    for (int64_t e = er.begin; e < er.begin + er.count; ++e) {
      counts[r] += static_cast<int>(routed[e].size() * H);
    }
  }
  const RowRange mine = HeldExperts(E, tp.slice);
  std::vector<float> send(counts[tp.slice.rank]), xin;  // [routed pairs of my experts, H]
  int64_t off = 0;
  for (int64_t e = mine.begin; e < mine.begin + mine.count; ++e) {
    const auto& list = routed[e];
    if (list.empty()) continue;
    const int64_t m = static_cast<int64_t>(list.size());
    xin.resize(m * H);
    GatherRows(h, H, list, xin.data());
    MlpForward(ctx, w.experts[e], xin.data(), m, send.data() + off);
    off += m * H;
  }
  int64_t total = 0;
  for (int c : counts) total += c;
  std::vector<float> all(total);
  tp.comm->AllGatherV(send.data(), counts, all.data(), "moe experts");
  std::fill(out, out + T * H, 0.0f);
  off = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (!routed[e].empty()) ++used;
    ScatterAdd(routed[e], all.data() + off, H, out);
    off += static_cast<int64_t>(routed[e].size()) * H;
  }
  return used;
}

// Tensor parallel: gate/up over this rank's intermediate rows of every chosen expert (one
// all-gather for all of them), then this rank's hidden rows of down and of the sum, all-gathered.
int MoeTensorParallel(ExecContext& ctx, const ModelConfig& cfg, const MoeWeights& w,
                      const float* h, int64_t T, const Routed& routed, float* out,
                      const TpContext& tp) {
  const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, I = cfg.moe_intermediate_size;
  const int n = tp.slice.size;
  const int64_t I_mine = EvenSplit(I, tp.slice.rank, n).count;
  const int64_t H_mine = EvenSplit(H, tp.slice.rank, n).count;
  int64_t pairs = 0;
  for (const auto& list : routed) pairs += static_cast<int64_t>(list.size());
  std::vector<float> act_mine(pairs * I_mine), act(pairs * I), xin;
  int64_t row = 0;
  int used = 0;
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = routed[e];
    if (list.empty()) continue;
    ++used;
    const int64_t m = static_cast<int64_t>(list.size());
    xin.resize(m * H);
    GatherRows(h, H, list, xin.data());
    GateUp(ctx, w.experts[e], xin.data(), m, act_mine.data() + row * I_mine);
    row += m;
  }
  GatherColumns(*tp.comm, act_mine.data(), pairs, SplitCounts(I, n), act.data(), "moe act");
  std::vector<float> out_mine(T * H_mine, 0.0f), y;  // [T, my hidden rows]
  row = 0;
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = routed[e];
    if (list.empty()) continue;
    const int64_t m = static_cast<int64_t>(list.size());
    y.resize(m * H_mine);
    Linear(ctx, act.data() + row * I, m, w.experts[e].down_proj, y.data());
    ScatterAdd(list, y.data(), H_mine, out_mine.data());
    row += m;
  }
  GatherColumns(*tp.comm, out_mine.data(), T, SplitCounts(H, n), out, "moe down");
  return used;
}
}  // namespace

void MlpForward(ExecContext& ctx, const MlpWeights& w, const float* h, int64_t T, float* out,
                const TpContext& tp) {
  const int64_t inter = w.gate_proj.rows;
  ScratchFrame frame;
  float* gate = frame.Floats(T * inter);  // [T, intermediate]
  GateUp(ctx, w, h, T, gate);
  if (!tp.active()) {
    Linear(ctx, gate, T, w.down_proj, out);
    return;
  }
  const int n = tp.slice.size;
  const int64_t full_inter = w.down_proj.cols, H = w.gate_proj.cols;
  std::vector<float> act(T * full_inter), y(T * w.down_proj.rows);
  GatherColumns(*tp.comm, gate, T, SplitCounts(full_inter, n), act.data(), "mlp act");
  Linear(ctx, act.data(), T, w.down_proj, y.data());
  GatherColumns(*tp.comm, y.data(), T, SplitCounts(H, n), out, "mlp down");
}

namespace {

// Small steps (decode, a few requests, a speculative verify): the gate/up projections of every
// chosen expert run in one fork-join region and their down projections in a second, instead of
// three regions per expert. Each row is computed exactly as MlpForward computes it and the expert
// outputs are added in the same (ascending expert) order, so outputs do not change.
constexpr int64_t kMaxFusedRoutedRows = 64;

int FusedExperts(ExecContext& ctx, const MoeWeights& w, const Routed& routed, const float* h,
                 int64_t H, float* out) {
  const int64_t E = static_cast<int64_t>(routed.size());
  std::vector<int64_t> first(E + 1, 0);  // row offset of each expert's tokens
  for (int64_t e = 0; e < E; ++e) first[e + 1] = first[e] + static_cast<int64_t>(routed[e].size());
  const int64_t n = first[E];
  int64_t inter = 0;
  for (int64_t e = 0; e < E && inter == 0; ++e) {
    if (!routed[e].empty()) inter = w.experts[e].gate_proj.rows;
  }
  ScratchFrame frame;
  float* xin = frame.Floats(n * H);       // [n, H]
  float* yout = frame.Floats(n * H);      // [n, H]
  float* gate = frame.Floats(n * inter);  // [n, inter]
  float* up = frame.Floats(n * inter);    // [n, inter]
  std::vector<LinearJob> jobs;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = static_cast<int64_t>(routed[e].size());
    if (m == 0) continue;
    MIMO_CHECK(w.experts[e].gate_proj.rows == inter, "MoE: experts of different sizes");
    GatherRows(h, H, routed[e], xin + first[e] * H);
    jobs.push_back({xin + first[e] * H, m, &w.experts[e].gate_proj, gate + first[e] * inter});
    jobs.push_back({xin + first[e] * H, m, &w.experts[e].up_proj, up + first[e] * inter});
  }
  LinearMany(ctx, jobs.data(), static_cast<int>(jobs.size()));
  for (int64_t e = 0; e < E; ++e) {  // per expert, as MlpForward (the same vector/tail split)
    const int64_t len = (first[e + 1] - first[e]) * inter;
    if (len > 0) {
      SiluMul(gate + first[e] * inter, up + first[e] * inter, gate + first[e] * inter, len);
    }
  }
  jobs.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = static_cast<int64_t>(routed[e].size());
    if (m == 0) continue;
    jobs.push_back({gate + first[e] * inter, m, &w.experts[e].down_proj, yout + first[e] * H});
  }
  LinearMany(ctx, jobs.data(), static_cast<int>(jobs.size()));
  int used = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (routed[e].empty()) continue;
    ++used;
    ScatterAdd(routed[e], yout + first[e] * H, H, out);
  }
  return used;
}

}  // namespace

int MoeForward(ExecContext& ctx, const ModelConfig& cfg, const MoeWeights& w, const float* h,
               int64_t T, float* out, const TpContext& tp) {
  const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.num_experts_per_tok;
  ScratchFrame frame;
  float* logits = frame.Floats(T * E);             // [T, E]
  int32_t* experts = frame.Alloc<int32_t>(T * K);  // [T, K]
  float* weights = frame.Floats(T * K);            // [T, K]
  Linear(ctx, h, T, w.gate, logits);
  MoeRoute(cfg, logits, w.score_bias.data(), T, experts, weights);

  // Group (token, weight) pairs by expert.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) routed[experts[t * K + k]].push_back({t, weights[t * K + k]});
  }
  if (tp.active()) {
    return tp.slice.expert_parallel ? MoeExpertParallel(ctx, cfg, w, h, T, routed, out, tp)
                                    : MoeTensorParallel(ctx, cfg, w, h, T, routed, out, tp);
  }
  std::fill(out, out + T * H, 0.0f);
  int64_t routed_rows = 0;
  for (const auto& list : routed) routed_rows += static_cast<int64_t>(list.size());
  if (routed_rows <= kMaxFusedRoutedRows) return FusedExperts(ctx, w, routed, h, H, out);
  int used = 0;
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = routed[e];
    if (list.empty()) continue;
    ++used;
    const int64_t n = static_cast<int64_t>(list.size());
    ScratchFrame expert;
    float* xin = expert.Floats(n * H);   // [n, H] gathered inputs
    float* yout = expert.Floats(n * H);  // [n, H] expert outputs
    GatherRows(h, H, list, xin);
    MlpForward(ctx, w.experts[e], xin, n, yout);
    ScatterAdd(list, yout, H, out);
  }
  return used;
}

}  // namespace mimo
