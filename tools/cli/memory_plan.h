// `mimo inspect`'s memory plan: what a checkpoint needs in memory before anything is downloaded or
// read (weights split into routed experts and the rest, KV cache, per-step scratch) and what a
// decode token reads, as it is or with its routed experts rewritten to MXFP4. Headers only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/status.h"
#include "io/checkpoint.h"
#include "io/expert_quantizer.h"
#include "model/sharding.h"

namespace mimo::cli {

// Weight bytes of the language model (what the engine binds; skipped vision/audio towers apart).
struct WeightBytes {
  double experts = 0;  // model.layers.N.mlp.experts.* and model.mtp.layers.N.mlp.experts.*
  double other = 0;    // everything else of the language model
  double towers = 0;   // skipped tensors (in the files, never bound)
  // A decode token's reads: one embedding row, every main-layer tensor but the routed experts,
  // top-k / n_routed_experts of the main layers' expert bytes, model.norm and lm_head (the whole
  // embedding when tied). MTP layers run only when drafting and are left out.
  double active_per_token = 0;
};

// --experts / --dense / --lm-head as given (the model-running commands and mimo inspect).
inline StatusOr<WeightFormats> WeightFormatsFromArgs(const Args& a) {
  return ParseWeightFormatFlags([&](const char* flag) -> std::optional<std::string> {
    if (!a.Has(flag)) return std::nullopt;
    return a.Get(flag);
  });
}

// Under tensor parallelism (rank.active()) experts and other are rank `rank.rank`'s share, as the
// sharding table (model/sharding.h) splits each tensor; active_per_token stays the whole model's.
// With `formats`, as if each group's weights [N, K] were rewritten as the engine rewrites them at
// load: MXFP4 N * ceil(K / 2) bytes of E2M1 pairs plus N * ceil(K / 32) E8M0 bytes (an FP8
// weight's F32 scales dropped); FP8 N * K bytes plus 4 * ceil(N / 128) * ceil(K / 128) of scales.
// A weight already stored in as few bits stays as it is; a tied lm_head becomes its own copy.
StatusOr<WeightBytes> CountWeightBytes(const Checkpoint& ck, const WeightFormats& formats,
                                       const TpSlice& rank = {});

// The engine thread's per-step scratch (core/scratch.h arenas, kept between steps) at its peak,
// for steps of `tokens_per_step` rows (--max-num-batched-tokens) and `sampled_rows` logit rows
// (one per running sequence): the residual stream and a layer's normed input and output
// (3 x [T, hidden]), the larger of the widest attention's q/k/v/output and the widest FFN (dense
// MLP gate/up [T, intermediate] x 2, or router logits [T, E] plus one expert's gathered inputs,
// outputs and gate/up with every row routed to it), and the lm_head's rows and logits. All F32.
// Not counted: worker threads' small tiles, the tokenizer, the HTTP server, the prefix cache's
// metadata.
// One column of the plan: the checkpoint as stored, or with an option applied.
struct MemoryPlanColumn {
  std::string name;  // "as stored", or the flags: "--experts mxfp4", "--dense fp8 --lm-head fp8"
  WeightBytes weights;
  double kv_bytes = 0;
  double scratch_bytes = 0;
  double total() const { return weights.experts + weights.other + kv_bytes + scratch_bytes; }
};
struct MemoryPlan {
  std::string kv_dtype;
  int64_t max_context = 0;
  int max_sequences = 0;
  int64_t tokens_per_step = 0;
  int tensor_parallel = 1;  // > 1: weights, KV and scratch of rank 0 (reads: the whole model's)
  std::vector<MemoryPlanColumn> columns;
};
std::string FormatMemoryPlan(const MemoryPlan& plan);  // the text table, several lines
std::string MemoryPlanJson(const MemoryPlan& plan);    // one JSON object

int64_t EstimateScratchBytes(const ModelConfig& c, const std::vector<LayerConfig>& layers,
                             int64_t tokens_per_step, int64_t sampled_rows);

}  // namespace mimo::cli
