// Tensor and expert parallelism: the steps that apply the sharding table (model/sharding.h: which
// rows of each weight one rank holds) in the forward pass. Every split is by output rows of a
// weight (heads, FFN rows, vocabulary rows, experts), and partial results are combined by
// all-gathers, never by floating-point sums in another order: with N ranks the logits are bitwise
// those of one process (docs/ARCHITECTURE.md, "Tensor parallelism"). Sending each step to the
// followers is not the model's business: engine/model_runner.h does it beside the model.
//
//   attention  this rank's query heads and the kv heads they read; attention over them; the heads'
//              outputs all-gathered; o_proj: its hidden rows, all-gathered.
//   dense MLP  gate/up: its intermediate rows; activations all-gathered; down: its hidden rows.
//   MoE (TP)   every expert's rows, as dense.
//   MoE (EP)   --expert-parallel: each rank runs its whole experts for the tokens routed to them;
//              outputs all-gathered and combined in expert order.
//   lm_head    its vocabulary rows; logits all-gathered for the sampled rows only.
//   replicated embeddings, norms, the router (tiny; identical routing on every rank).
#pragma once

#include <cstdint>
#include <vector>

#include "core/matrix_weight.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/hf_config.h"
#include "model/sharding.h"
#include "parallel/communicator.h"

namespace mimo {

// A slice plus the communicator the forward pass all-gathers over.
struct TpContext {
  Communicator* comm = nullptr;
  TpSlice slice;
  bool active() const { return comm != nullptr && slice.active(); }
};

// EvenSplit counts of n over `size` ranks (the split the sharding table gives hidden,
// intermediate and vocabulary rows).
std::vector<int> SplitCounts(int64_t n, int size, int64_t scale = 1);  // count(r) * scale per rank

// The layer as this rank sees it (its head counts).
LayerConfig LocalLayerConfig(const LayerConfig& layer, const HeadSlice& s);

// Rows [begin, begin + count) of w. Data stays where it was (the mmap) unless w owns a re-laid-out
// copy; the scale rows the slice uses (any grid: uniform, TP-section, fused qkv, MXFP4) are
// copied, so the slice holds about count / rows of the weight.
MatrixWeight SliceRows(const MatrixWeight& w, int64_t begin, int64_t count);

// out [T, sum(cols)] from every rank's local [T, cols[rank]] (column blocks in rank order).
void GatherColumns(Communicator& comm, const float* local, int64_t T,
                   const std::vector<int>& cols, float* out, const char* what);

// The two steps the model's layers take the same way in one process and under tensor
// parallelism (one process: no communication, no copy).
// y [T, full_rows] = x W^T where w holds this rank's rows of W: each rank's columns all-gathered.
void SplitLinear(ExecContext& ctx, const TpContext& tp, const float* x, int64_t T,
                 const MatrixWeight& w, int64_t full_rows, float* y, const char* what);
// [T, cols * N]: every rank's local [T, cols] in rank order (*buffer holds them); one process:
// local itself.
const float* GatherEqualColumns(const TpContext& tp, const float* local, int64_t T, int cols,
                                std::vector<float>* buffer, const char* what);

// Bytes of the checkpoint's language-model tensors each rank of `size` holds, from the headers
// alone (nothing is read): per tensor, the share of its rows the sharding table gives the rank
// (ShardOf: heads, FFN rows, vocabulary rows, whole experts under expert parallelism; embeddings,
// norms and the router whole). For `mimo inspect --tensor-parallel-size N`.
StatusOr<std::vector<double>> TpWeightBytesPerRank(const Checkpoint& ck, int size,
                                                   bool expert_parallel);
// This rank's KV layer geometry: main layers, then `num_mtp` MTP layers (cfg.mtp_layer, as
// `mimo inspect` plans the whole model's).
StatusOr<std::vector<LayerConfig>> TpKvLayerConfigs(const ModelConfig& cfg, int num_mtp, int rank,
                                                    int size);

}  // namespace mimo
