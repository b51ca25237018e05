// MiMo-V2 (Flash / V2.5 / Pro / V2.6) causal LM forward pass on CPU in fp32 activations:
// embed -> [RMSNorm, hybrid full/SWA attention, RMSNorm, dense MLP or MoE] x L -> norm -> lm_head,
// plus the MTP layers for speculative decoding. The architecture lives in this file only.
// Thread-safety: Forward is not re-entrant (one engine thread); the weights are read-only.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attention/kv_attention.h"
#include "core/status.h"
#include "io/checkpoint.h"
#include "io/expert_quantizer.h"
#include "io/hf_config.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace mimo {

struct ForwardOutputs {
  // Rows of the step whose logits are wanted (e.g. the last token of each sequence); empty means
  // every row. logits [rows, vocab_size].
  std::vector<int> logit_rows;
  float* logits = nullptr;
  // Optional: the residual stream after the last layer, before model.norm (the MTP input).
  float* prenorm_hidden = nullptr;  // [T, hidden]
  // Optional (DFlash): the residual stream right after each layer of capture_layers (ascending),
  // for every row, concatenated in that order: captured [T, capture_layers.size() * hidden].
  std::vector<int> capture_layers;
  float* captured = nullptr;
};

// What MtpForward writes.
struct MtpOutputs {
  std::vector<int> logit_rows;         // rows whose logits are wanted; empty: every row
  float* logits = nullptr;             // [rows, head rows] (optional)
  const MatrixWeight* head = nullptr;  // null: the shared lm_head; else e.g. a draft vocabulary
  float* hidden_out = nullptr;         // [T, hidden] block output before final_layernorm
};

// What the last Forward read: weights actually used (each distinct chosen expert once), for
// benchmarks against the bandwidth roofline.
struct ForwardStats {
  double weight_bytes = 0;  // embedding rows, attention, dense/MoE weights used, router, lm_head
  int distinct_experts = 0;  // summed over MoE layers
  int moe_layers = 0;
};

// Tensor/expert parallelism (model/tensor_parallel.h). comm null or of size 1: one process.
struct TensorParallelOptions {
  Communicator* comm = nullptr;
  bool expert_parallel = false;
};

class MimoV2Model {
 public:
  // With tp.comm of size N > 1 every rank calls Load; each binds only its slices, then the ranks
  // agree: if any rank failed, every rank returns an error naming the first failing rank and its
  // cause. Which rank runs which step is not the model's business (engine/model_runner.h).
  static StatusOr<std::unique_ptr<MimoV2Model>> Load(const std::string& dir,
                                                     const TensorParallelOptions& tp = {});
  MimoV2Model(const MimoV2Model&) = delete;
  MimoV2Model& operator=(const MimoV2Model&) = delete;

  const ModelConfig& config() const { return ckpt_->config(); }
  const ModelWeights& weights() const { return w_; }
  int num_mtp_layers() const { return static_cast<int>(w_.mtp.size()); }
  // KvAttention layer ids: 0..L-1 main layers, L + i for MTP layer i.
  int mtp_kv_layer(int i) const { return config().num_hidden_layers + i; }
  // Geometry of every KV layer id (main layers then MTP layers), for cache planning; with tensor
  // parallelism this rank's heads only, so its cache holds only its kv heads.
  std::vector<LayerConfig> KvLayerConfigs() const;

  // Tensor parallelism: this rank's slice and the communicator (null: one process).
  const TpSlice& tp_slice() const { return tp_.slice; }
  Communicator* communicator() const { return tp_.comm; }
  bool tp_leader() const { return tp_.active() && tp_.comm->leader(); }

  // Load-time quantization (io/expert_quantizer.h), by group of weights:
  //  experts: every routed expert this rank holds (--experts; mxfp4 exactly as `mimo quantize`
  //           writes it, so the checkpoint's own expert bytes are no longer read);
  //  dense:   the attention projections, the dense MLPs and MTP's eh_proj (--dense);
  //  lm_head: the output projection (--lm-head; a tied one becomes its own copy).
  // The router, the embedding and the norms are never quantized (the router is a few KB per layer
  // and picks experts; the embedding reads one row a token). Each weight is rewritten in owned
  // memory (a weight already in as few bits is kept). Call before the first Forward.
  struct QuantizePlan : WeightFormats {
    Mxfp4ScaleRule mxfp4_rule = Mxfp4ScaleRule::kMse;
  };
  struct QuantizeGroupReport {
    int converted = 0;        // weights rewritten
    int kept = 0;             // already in as few bits (or fewer) as the format: left as stored
    Mxfp4ErrorStats error;    // of the rewritten weights
    double RelativeRmsError() const {
      return error.sum_sq_weight > 0 ? std::sqrt(error.sum_sq_error / error.sum_sq_weight) : 0.0;
    }
  };
  struct QuantizeReport {
    QuantizeGroupReport experts, dense, lm_head;
  };
  Status QuantizeWeights(const QuantizePlan& plan, ThreadPool* pool, QuantizeReport* report);

  // Marks the plain tiles of every FP8 weight (kernels.h MarkFp8PlainBlocks), so that the decode
  // GEMV reads them branch-free; outputs are unchanged bit for bit. Reads every FP8 weight once:
  // call after the weights are placed (and after QuantizeWeights). Returns the plain
  // tiles, and all FP8 tiles in *tiles (may be null).
  int64_t MarkFp8PlainBlocks(ThreadPool* pool, int64_t* tiles = nullptr);
  // Interleaves every int8 weight's rows in tiles (kernels.h InterleaveInt8Rows) for the int8
  // mode's kernels, which alone read that layout: call after QuantizeWeights, and only when every
  // step will run --precision int8 on kernels that have it. Returns how many weights it re-laid.
  int InterleaveInt8Weights(ThreadPool* pool);
  // Detaches (false) or re-attaches (true) those maps: `bench model --ab-fp8-plain` alternates
  // the two paths step by step in one run. Not while a Forward runs.
  void UseFp8PlainBlocks(bool on);

  // The checkpoint the weights point into (e.g. to ReadThrough it before serving).
  const Checkpoint& checkpoint() const { return *ckpt_; }

  // Bytes of weights one decode token reads (embedding row, every attention and dense weight,
  // the router, top-k experts per MoE layer, lm_head; FP8 scales, MXFP4 experts at 4 bits plus
  // one exponent byte per 32): the numerator of the bandwidth roofline.
  double ActiveWeightBytesPerToken() const;
  // Bytes of every weight this rank holds (its slices under tensor parallelism; embeddings and
  // norms whole): what `mimo inspect` and `mimo bench model` report per rank.
  double WeightBytes() const;

  // Runs the main model over the step's tokens [T] (positions from step.batch); every layer
  // writes and reads its K/V through kv by the step's plan.
  void Forward(ExecContext& ctx, const KvStepPlan& step, const int32_t* tokens, KvAttention& kv,
               const ForwardOutputs& out);
  const ForwardStats& last_forward_stats() const { return stats_; }

  // MTP layer i on pairs (hprev_t, token_{t+1}) at position t (spec §3):
  // u = eh_proj([enorm(embed(token)) | hnorm(hprev)]); block; final_layernorm; shared lm_head.
  //   hprev [T, hidden]; tokens [T].
  void MtpForward(ExecContext& ctx, int i, const KvStepPlan& step, const float* hprev,
                  const int32_t* tokens, KvAttention& kv, const MtpOutputs& out);

 private:
  MimoV2Model() = default;
  // Returns the distinct experts its MoE used (0 for a dense FFN).
  int DecoderLayer(ExecContext& ctx, int kv_layer, const LayerConfig& lc, const LayerWeights& w,
                   const KvStepPlan& step, const int32_t* positions, float* x, KvAttention& kv);
  void Attention(ExecContext& ctx, int kv_layer, const LayerConfig& lc, const AttentionWeights& w,
                 const KvStepPlan& step, const int32_t* positions, const float* h, float* out,
                 KvAttention& kv);
  void LmHead(ExecContext& ctx, const float* x, int64_t T, const std::vector<int>& rows,
              float* logits);
  // Bytes of weights a main-model step of `tokens` rows reads: their embedding rows, every main
  // layer's weights with experts[l] of layer l's experts, model.norm and lm_head when `logits`.
  double WeightBytesRead(int64_t tokens, const std::vector<int>& experts, bool logits) const;

  std::unique_ptr<Checkpoint> ckpt_;
  ModelWeights w_;
  std::vector<std::shared_ptr<const Fp8PlainBlocks>> fp8_plain_stash_;  // UseFp8PlainBlocks(false)
  TpContext tp_;
  std::vector<LayerConfig> layers_;  // this rank's view of config().layers (its heads)
  ForwardStats stats_;               // of the last Forward (main model only)
};

// Positions [T] of the step's rows, from its chunks.
std::vector<int32_t> StepPositions(const StepBatch& batch);

}  // namespace mimo
