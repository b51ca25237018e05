// Checkpoint: a MiMo-V2 checkpoint directory (config.json + safetensors, single or sharded) opened
// in place, with typed, shape-checked binding of tensors and FP8 linear weights in every scale
// layout of spec section 4. Binding errors name the tensor, its file, and expected vs actual.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/matrix_weight.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/fp8_layout.h"
#include "io/hf_config.h"
#include "io/model_variant.h"
#include "io/safetensors.h"

namespace mimo {

// Q/K/V projections of one attention block, always split (a fused qkv_proj is de-interleaved).
struct QkvWeights {
  MatrixWeight q;                          // [num_attention_heads * head_dim, hidden]
  MatrixWeight k;                          // [num_key_value_heads * head_dim, hidden]
  MatrixWeight v;                          // [num_key_value_heads * v_head_dim, hidden]
  bool fused = false;                      // came from qkv_proj
  bool fp8 = false;                        // q, k and v are all F8_E4M3
  Fp8Layout layout = Fp8Layout::kUniform;  // meaningful when fp8
};

// Owns the config and the mmapped files; views and MatrixWeights it hands out point into the
// read-only mapping (or into buffers they keep alive themselves) and must not be written.
// Immutable after Open: const methods are safe from any thread.
class Checkpoint {
 public:
  // Reads dir/config.json and the safetensors files (see SafetensorsSet::OpenDir). Tensors outside
  // the language model (not model.layers.* / model.embed_tokens.* / model.norm.* / lm_head.* /
  // model.mtp.*: vision, audio, ... of omni checkpoints) are skipped with one log line.
  // config().num_nextn_predict_layers is set to the number of model.mtp.layers.N present when the
  // config does not give it, and lowered to that number when the config claims more.
  static StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }

  bool Has(const std::string& name) const;
  // The tensor `name`, checked against `expected` (a dim of -1 matches anything) and `allowed`
  // dtypes (empty list: any dtype).
  StatusOr<TensorView> Get(const std::string& name, const Shape& expected,
                           std::initializer_list<DType> allowed) const;
  // `prefix`.weight [rows, cols] as F32/BF16/F16, or F8_E4M3 with `prefix`.weight_scale_inv
  // [ceil(rows/br), ceil(cols/bc)] on the uniform grid (block br x bc from
  // quantization_config.weight_block_size, default 128 x 128), or (store_dtype "mxfp4") MXFP4:
  // U8 [rows, ceil(cols/2)] with `prefix`.weight_scale U8 [rows, ceil(cols/32)].
  StatusOr<MatrixWeight> GetLinear(const std::string& prefix, int64_t rows, int64_t cols) const;
  // q/k/v of `attn_prefix` (e.g. "model.layers.0.self_attn") for a layer of geometry `layer`,
  // from q_proj/k_proj/v_proj or a fused qkv_proj. TP sections: num_key_value_heads_for_tp
  // (config().num_key_value_heads for MiMo checkpoints). The FP8 grid is decided from the scale
  // shapes; a shape that matches no layout is an error listing the layouts tried.
  StatusOr<QkvWeights> GetQkv(const std::string& attn_prefix, const LayerConfig& layer,
                              int num_key_value_heads_for_tp) const;

  // Facts for `mimo inspect` and logs.
  std::vector<std::string> TensorNames() const;  // language-model tensors, sorted
  const std::vector<std::string>& SkippedTensorNames() const { return skipped_; }
  std::map<DType, uint64_t> BytesByDType() const;  // over every tensor in the files
  // Skipped tensors grouped by their leading name component ("visual.", "audio_encoder.", ...).
  struct SkippedGroup {
    std::string prefix;
    int tensors = 0;
    uint64_t bytes = 0;
  };
  std::vector<SkippedGroup> SkippedGroups() const;
  // The sibling this checkpoint is (io/model_variant.h), from the config and qkv storage.
  ModelVariant Variant() const;
  // MXFP4 weights (U8 .weight with an E8M0 .weight_scale), shape-checked like GetLinear binds
  // them; an orphan weight_scale or a U8 weight without store_dtype "mxfp4" is an error.
  StatusOr<int> Mxfp4WeightCount() const;
  int NumMtpLayers() const { return num_mtp_layers_found_; }
  size_t NumFiles() const { return set_->files().size(); }
  // The FP8 layout of every attention block (main and MTP layers) plus one kUniform count per
  // other FP8 weight; shape checks only, nothing is copied.
  StatusOr<std::map<Fp8Layout, int>> Fp8LayoutCounts() const;
  // Reads every file once, in parallel over `pool` (may be null), so the page faults of a
  // memory-mapped checkpoint are paid here and not by the first request: each file is copied
  // into anonymous memory with 2 MiB pages where the kernel grants them, which then replaces the
  // file mapping at the same address (every bound weight pointer stays valid; decode streams
  // the weights without a TLB miss per 4 KiB page: docs/PERFORMANCE.md), else its pages are
  // touched in place. progress (optional) gets (bytes read, total bytes) after each round.
  void ReadThrough(ThreadPool* pool,
                   const std::function<void(uint64_t done, uint64_t total)>& progress) const;
  uint64_t TotalFileBytes() const;

  // Raw lookup (nullptr when absent or skipped).
  const SafetensorsTensor* FindTensor(const std::string& name) const;

 private:
  struct QkvPlan;
  Checkpoint() = default;
  StatusOr<QkvPlan> PlanQkv(const std::string& attn_prefix, const LayerConfig& layer, int tp) const;
  StatusOr<MatrixWeight> GetMxfp4Linear(const std::string& prefix, int64_t rows,
                                        int64_t cols) const;
  StatusOr<QkvWeights> BindFusedQkv(const QkvPlan& plan) const;
  StatusOr<QkvWeights> BindSectionQkv(const QkvPlan& plan) const;
  Status CheckTensor(const std::string& name, const Shape& expected,
                     std::initializer_list<DType> allowed, const SafetensorsTensor** out) const;
  int64_t block_rows() const;
  int64_t block_cols() const;

  std::string dir_;
  ModelConfig config_;
  std::unique_ptr<SafetensorsSet> set_;
  std::vector<std::string> skipped_;  // sorted
  int num_mtp_layers_found_ = 0;
};

// True for tensor names the language model uses (see Checkpoint::Open).
bool IsLanguageModelTensor(const std::string& name);

}  // namespace mimo
