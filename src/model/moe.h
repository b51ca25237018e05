// MoE FFN of MiMo-V2 (DeepSeek-V3-style noaux_tc routing): fp32 sigmoid router, the
// e_score_correction_bias used only to choose experts, group-limited top-k, renormalised weights
// scaled by routed_scaling_factor, SiLU-gated experts. No shared expert.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "io/hf_config.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace mimo {

// Chooses experts for T tokens from router logits.
//   logits [T, E] (fp32), bias [E]; out: experts [T, top_k], weights [T, top_k].
// Ties in the biased score go to the lower expert (group) index.
void MoeRoute(const ModelConfig& cfg, const float* logits, const float* bias, int64_t T,
              int32_t* experts, float* weights);

// out [T, hidden] = sum_k weight_k * Expert_k(h).   h [T, hidden]
// Returns the number of distinct experts the T tokens chose (each is read once per call).
// Tensor parallel: every expert's rows split (w holds this rank's rows), or, expert parallel,
// this rank's experts only; either way the result is all-gathered and bitwise the one-process
// result (the sum over experts runs in expert order on every rank).
int MoeForward(ExecContext& ctx, const ModelConfig& cfg, const MoeWeights& w, const float* h,
               int64_t T, float* out, const TpContext& tp = {});

// Dense SiLU MLP: out [T, hidden] = down(silu(gate(h)) * up(h)).   h [T, hidden]
// Tensor parallel: w holds this rank's gate/up (intermediate) and down (hidden) rows.
void MlpForward(ExecContext& ctx, const MlpWeights& w, const float* h, int64_t T, float* out,
                const TpContext& tp = {});

}  // namespace mimo
