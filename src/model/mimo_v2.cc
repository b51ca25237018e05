// MiMo-V2 forward pass. Each step cites the spec section (shared/spec/mimo-v2-architecture.md)
// and the HF modeling code it mirrors (MiMoV2FlashDecoderLayer / MiMoV2FlashAttention).
#include "model/mimo_v2.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "core/denormals.h"
#include "core/scratch.h"
#include "kernels/kernels.h"
#include "model/moe.h"

namespace mimo {

std::vector<int32_t> StepPositions(const StepBatch& batch) {
  std::vector<int32_t> pos(batch.num_tokens);
  for (const SequenceChunk& c : batch.chunks) {
    for (int i = 0; i < c.num_tokens; ++i) pos[c.token_begin + i] = c.start_pos + i;
  }
  return pos;
}

StatusOr<std::unique_ptr<MimoV2Model>> MimoV2Model::Load(const std::string& dir,
                                                         const TensorParallelOptions& tpo) {
  std::unique_ptr<MimoV2Model> m(new MimoV2Model());
  m->tp_.comm = tpo.comm;
  if (tpo.comm) m->tp_.slice = {tpo.comm->rank(), tpo.comm->size(), tpo.expert_parallel};
  const TpSlice& tp = m->tp_.slice;
  Status st = [&]() -> Status {
    MIMO_ASSIGN_OR_RETURN(m->ckpt_, Checkpoint::Open(dir));
    const ModelConfig& cfg = m->ckpt_->config();
    if (tp.expert_parallel && tp.active() && cfg.n_routed_experts > 0 &&
        cfg.n_routed_experts < tp.size) {
      return InvalidArgument("--expert-parallel over %d ranks needs at least %d experts, the "
                             "model has %d", tp.size, tp.size, cfg.n_routed_experts);
    }
    MIMO_ASSIGN_OR_RETURN(m->w_, BindWeights(*m->ckpt_, cfg, tp));
    m->layers_ = cfg.layers;
    if (tp.active()) {
      for (LayerConfig& l : m->layers_) {
        MIMO_ASSIGN_OR_RETURN(HeadSlice hs, SliceHeads(l, tp.rank, tp.size));
        l = LocalLayerConfig(l, hs);
      }
      if (!m->w_.mtp.empty()) {
        MIMO_ASSIGN_OR_RETURN(HeadSlice hs, SliceHeads(m->w_.mtp_layer_config, tp.rank, tp.size));
        m->w_.mtp_layer_config = LocalLayerConfig(m->w_.mtp_layer_config, hs);
      }
    }
    return Status::Ok();
  }();
  if (m->tp_.active()) {
    // Every rank learns whether every rank loaded; the first failure is everyone's error.
    struct Outcome {
      int32_t ok;
      char message[508];
    };
    Outcome mine{st.ok() ? 1 : 0, {}};
    std::snprintf(mine.message, sizeof mine.message, "%s", st.message().c_str());
    std::vector<Outcome> all(tp.size);
    tpo.comm->AllGatherBytes(&mine, sizeof mine, all.data(), "load");
    for (int r = 0; r < tp.size; ++r) {
      if (!all[r].ok) {
        return Status(r == tp.rank ? st.code() : StatusCode::kInternal,
                      StrFormat("rank %d of %d could not load the model: %s", r, tp.size,
                                all[r].message));
      }
    }
  }
  if (!st.ok()) return st;
  return m;
}

Status MimoV2Model::QuantizeWeights(const QuantizePlan& plan, ThreadPool* pool,
                                    QuantizeReport* report) {
  QuantizeReport local;
  QuantizeReport& rep = report ? *report : local;
  Status st = Status::Ok();
  ForEachWeight(w_, [&](const MutableWeightRef& r) {
    if (!st.ok() || r.matrix == nullptr || r.matrix->empty()) return;
    WeightFormat f = WeightFormat::kKeep;
    QuantizeGroupReport* g = nullptr;
    if (IsRoutedExpert(r.id.role)) {
      f = plan.experts, g = &rep.experts;
    } else if (IsDenseProjection(r.id.role)) {
      f = plan.dense, g = &rep.dense;
    } else if (r.id.role == TensorRole::kLmHead) {
      f = plan.lm_head, g = &rep.lm_head;
    } else {
      return;  // router, embedding, norms, unknown tensors: as stored
    }
    if (f == WeightFormat::kKeep) return;
    const DType before = r.matrix->dtype;
    // Kept: what is already in the format or in fewer bits (MXFP4 for every format; int8 for
    // fp8). FP8 is converted to int8: the same bits per weight on a finer grid.
    const bool kept = before == DType::kMxfp4 ||
                      (f == WeightFormat::kFp8 &&
                       (before == DType::kF8E4M3 || before == DType::kInt8)) ||
                      (f == WeightFormat::kInt8 && before == DType::kInt8);
    if (kept) {
      ++g->kept;
      return;
    }
    const std::string what = TensorName(r.id);
    StatusOr<MatrixWeight> q =
        f == WeightFormat::kMxfp4  ? QuantizeWeightToMxfp4(*r.matrix, plan.mxfp4_rule, pool, what, &g->error)
        : f == WeightFormat::kInt8 ? QuantizeWeightToInt8(*r.matrix, pool, what, &g->error)
                                   : QuantizeWeightToFp8Block(*r.matrix, pool, what, &g->error);
    if (!q.ok()) {
      st = q.status();
      return;
    }
    *r.matrix = std::move(*q);
    ++g->converted;
  });
  return st;
}

int64_t MimoV2Model::MarkFp8PlainBlocks(ThreadPool* pool, int64_t* tiles) {
  int64_t plain = 0, all = 0;
  ForEachWeight(w_, [&](const MutableWeightRef& r) {
    if (r.matrix == nullptr) return;
    int64_t n = 0;
    plain += mimo::MarkFp8PlainBlocks(r.matrix, pool, &n);
    all += n;
  });
  if (tiles) *tiles = all;
  return plain;
}

int MimoV2Model::InterleaveInt8Weights(ThreadPool* pool) {
  int n = 0;
  ForEachWeight(w_, [&](const MutableWeightRef& r) {
    if (r.matrix != nullptr && mimo::InterleaveInt8Rows(r.matrix, pool)) ++n;
  });
  return n;
}

void MimoV2Model::UseFp8PlainBlocks(bool on) {
  if (on == fp8_plain_stash_.empty()) return;  // already so
  size_t i = 0;
  ForEachWeight(w_, [&](const MutableWeightRef& r) {
    if (r.matrix == nullptr) return;
    if (on) {
      r.matrix->fp8_plain = std::move(fp8_plain_stash_[i++]);
    } else {
      fp8_plain_stash_.push_back(std::move(r.matrix->fp8_plain));
    }
  });
  if (on) fp8_plain_stash_.clear();
}

std::vector<LayerConfig> MimoV2Model::KvLayerConfigs() const {
  std::vector<LayerConfig> out = layers_;
  for (size_t i = 0; i < w_.mtp.size(); ++i) {
    LayerConfig lc = w_.mtp_layer_config;
    lc.has_sinks = !w_.mtp[i].block.attn.sinks.empty();
    lc.mtp = true;
    out.push_back(lc);
  }
  return out;
}

double MimoV2Model::WeightBytes() const {
  double b = 0;
  ForEachWeight(w_, [&](const WeightRef& r) {
    if (!r.tied) b += r.bytes();
  });
  return b;
}

double MimoV2Model::WeightBytesRead(int64_t tokens, const std::vector<int>& experts,
                                    bool logits) const {
  const int L = config().num_hidden_layers;
  double b = 0;
  std::vector<double> expert_bytes(L, 0.0);  // [L] every expert this rank holds
  std::vector<int> held(L, 0);               // [L] how many
  ForEachWeight(w_, [&](const WeightRef& r) {
    const int layer = r.id.layer;
    if (layer >= L) return;  // MTP layers run in drafts, not in the main model's step
    switch (r.id.role) {
      case TensorRole::kEmbedding:
        b += static_cast<double>(tokens) *
             static_cast<double>(r.tensor->dim(-1) * DTypeSize(r.tensor->dtype));
        break;
      case TensorRole::kExpertGateProj:
        ++held[layer];
        [[fallthrough]];
      case TensorRole::kExpertUpProj:
      case TensorRole::kExpertDownProj:
        expert_bytes[layer] += r.bytes();
        break;
      case TensorRole::kModelNorm:  // model.norm runs on the logit rows only
      case TensorRole::kLmHead:
        if (logits) b += r.bytes();
        break;
      default:
        b += r.bytes();
    }
  });
  for (int l = 0; l < L; ++l) {
    if (held[l] > 0) b += expert_bytes[l] * experts[l] / held[l];
  }
  return b;
}

double MimoV2Model::ActiveWeightBytesPerToken() const {
  return WeightBytesRead(
      1, std::vector<int>(config().num_hidden_layers, config().num_experts_per_tok), true);
}

// §2.3: q/k/v projections, partial NeoX RoPE, V x attention_value_scale, attention with the
// layer kind's mask and sinks, o_proj.
void MimoV2Model::Attention(ExecContext& ctx, int kv_layer, const LayerConfig& lc,
                            const AttentionWeights& w, const KvStepPlan& step,
                            const int32_t* positions, const float* h, float* out, KvAttention& kv) {
  const int64_t T = step.batch.num_tokens;
  const int nh = lc.num_attention_heads, nkv = lc.num_key_value_heads;
  const int dqk = lc.head_dim, dv = lc.v_head_dim;
  ScratchFrame frame;
  float* q = frame.Floats(T * nh * dqk);    // [T, nh, dqk]
  float* k = frame.Floats(T * nkv * dqk);   // [T, nkv, dqk]
  float* v = frame.Floats(T * nkv * dv);    // [T, nkv, dv]
  float* attn = frame.Floats(T * nh * dv);  // [T, nh, dv]
  const LinearJob qkv[3] = {{h, T, &w.q_proj, q}, {h, T, &w.k_proj, k}, {h, T, &w.v_proj, v}};
  LinearMany(ctx, qkv, 3);  // one fork-join region for the three projections
  RopeNeox(q, T, nh, dqk, lc.rotary_dim, lc.rope_theta, positions);
  RopeNeox(k, T, nkv, dqk, lc.rotary_dim, lc.rope_theta, positions);
  const float value_scale = config().attention_value_scale;
  if (value_scale != 1.0f) {
    for (int64_t i = 0; i < T * nkv * dv; ++i) v[i] *= value_scale;
  }
  AttentionGeometry g;
  g.num_heads = nh;
  g.num_kv_heads = nkv;
  g.head_dim = dqk;
  g.v_head_dim = dv;
  g.sliding_window = lc.attention == AttentionKind::kSlidingWindow ? lc.sliding_window : 0;
  g.scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  kv.Forward(ctx, step, kv_layer, g, q, k, v, w.sinks.empty() ? nullptr : w.sinks.data(), attn);
  std::vector<float> gathered;  // tensor parallel: [T, every rank's heads * dv]
  const float* heads = GatherEqualColumns(tp_, attn, T, nh * dv, &gathered, "attention heads");
  SplitLinear(ctx, tp_, heads, T, w.o_proj, config().hidden_size, out, "o_proj");  // o_proj
}

// §2.2: pre-norm block with two residuals.
int MimoV2Model::DecoderLayer(ExecContext& ctx, int kv_layer, const LayerConfig& lc,
                              const LayerWeights& w, const KvStepPlan& step,
                              const int32_t* positions, float* x, KvAttention& kv) {
  const ModelConfig& cfg = config();
  const int64_t T = step.batch.num_tokens, H = cfg.hidden_size;
  ScratchFrame frame;
  float* h = frame.Floats(T * H);                                    // [T, H] normed input
  float* y = frame.Floats(T * H);                                    // [T, H] sublayer output
  RmsNorm(x, T, H, w.input_layernorm, cfg.layernorm_epsilon, h);     // input_layernorm
  Attention(ctx, kv_layer, lc, w.attn, step, positions, h, y, kv);   // self_attn
  for (int64_t i = 0; i < T * H; ++i) x[i] += y[i];                            // residual
  RmsNorm(x, T, H, w.post_attention_layernorm, cfg.layernorm_epsilon, h);      // post norm
  int experts = 0;
  if (lc.ffn == FfnKind::kMoe) {
    experts = MoeForward(ctx, cfg, w.moe, h, T, y, tp_);  // §2.4 MoE
  } else {
    MlpForward(ctx, w.mlp, h, T, y, tp_);  // §2.4 dense
  }
  for (int64_t i = 0; i < T * H; ++i) x[i] += y[i];  // residual
  return experts;
}

void MimoV2Model::LmHead(ExecContext& ctx, const float* x, int64_t T,
                         const std::vector<int>& rows, float* logits) {
  const ModelConfig& cfg = config();
  const int64_t H = cfg.hidden_size;
  std::vector<float> sel;  // [rows, H] final-normed rows
  int64_t n = T;
  if (rows.empty()) {
    sel.assign(x, x + T * H);
  } else {
    n = static_cast<int64_t>(rows.size());
    sel.resize(n * H);
    for (int64_t i = 0; i < n; ++i) std::copy(x + rows[i] * H, x + (rows[i] + 1) * H, sel.begin() + i * H);
  }
  RmsNorm(sel.data(), n, H, w_.norm, cfg.layernorm_epsilon, sel.data());  // model.norm
  SplitLinear(ctx, tp_, sel.data(), n, w_.lm_head, cfg.vocab_size, logits, "lm_head");  // lm_head
}

void MimoV2Model::Forward(ExecContext& ctx, const KvStepPlan& step, const int32_t* tokens,
                          KvAttention& kv, const ForwardOutputs& out) {
  ScopedFlushDenormals ftz_daz;  // serial parts (norms, residuals, routing) as the workers do
  const ModelConfig& cfg = config();
  const int64_t T = step.batch.num_tokens, H = cfg.hidden_size;
  const std::vector<int32_t> positions = StepPositions(step.batch);
  ScratchFrame frame;
  float* x = frame.Floats(T * H);            // [T, H] residual stream
  Embedding(w_.embed_tokens, tokens, T, x);  // §2.1, no scaling
  std::vector<int> experts(cfg.num_hidden_layers, 0);  // [L] distinct experts each MoE used
  const int64_t C = static_cast<int64_t>(out.capture_layers.size()) * H;  // captured row width
  for (int l = 0, c = 0; l < cfg.num_hidden_layers; ++l) {
    experts[l] = DecoderLayer(ctx, l, layers_[l], w_.layers[l], step, positions.data(), x, kv);
    if (out.captured && c < static_cast<int>(out.capture_layers.size()) &&
        out.capture_layers[c] == l) {
      for (int64_t t = 0; t < T; ++t)
        std::copy(x + t * H, x + (t + 1) * H, out.captured + t * C + c * H);
      ++c;
    }
  }
  if (out.prenorm_hidden) std::copy(x, x + T * H, out.prenorm_hidden);
  if (out.logits) LmHead(ctx, x, T, out.logit_rows, out.logits);
  stats_ = ForwardStats{};
  stats_.weight_bytes = WeightBytesRead(T, experts, out.logits != nullptr);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    if (cfg.layers[l].ffn != FfnKind::kMoe) continue;
    stats_.distinct_experts += experts[l];
    ++stats_.moe_layers;
  }
}

void MimoV2Model::MtpForward(ExecContext& ctx, int i, const KvStepPlan& step, const float* hprev,
                             const int32_t* tokens, KvAttention& kv, const MtpOutputs& out) {
  ScopedFlushDenormals ftz_daz;
  const ModelConfig& cfg = config();
  const MtpLayerWeights& m = w_.mtp[i];
  const int64_t T = step.batch.num_tokens, H = cfg.hidden_size;
  const float eps = cfg.layernorm_epsilon;
  const std::vector<int32_t> positions = StepPositions(step.batch);
  std::vector<float> e(T * H), cat(T * 2 * H), x(T * H);  // [T,H], [T,2H], [T,H]
  Embedding(w_.embed_tokens, tokens, T, e.data());
  RmsNorm(e.data(), T, H, m.enorm, eps, e.data());
  for (int64_t t = 0; t < T; ++t) {
    std::copy(e.begin() + t * H, e.begin() + (t + 1) * H, cat.begin() + t * 2 * H);  // embed first
  }
  std::vector<float> hn(hprev, hprev + T * H);
  RmsNorm(hn.data(), T, H, m.hnorm, eps, hn.data());
  for (int64_t t = 0; t < T; ++t) {
    std::copy(hn.begin() + t * H, hn.begin() + (t + 1) * H, cat.begin() + t * 2 * H + H);
  }
  SplitLinear(ctx, tp_, cat.data(), T, m.eh_proj, H, x.data(), "eh_proj");
  LayerConfig lc = w_.mtp_layer_config;
  lc.has_sinks = !m.block.attn.sinks.empty();
  DecoderLayer(ctx, mtp_kv_layer(i), lc, m.block, step, positions.data(), x.data(), kv);
  if (out.hidden_out) std::copy(x.begin(), x.end(), out.hidden_out);
  if (!out.logits) return;
  std::vector<float> sel;  // [rows, H] the wanted rows, final-normed
  int64_t n = T;
  if (out.logit_rows.empty()) {
    sel = std::move(x);
  } else {
    n = static_cast<int64_t>(out.logit_rows.size());
    sel.resize(n * H);
    for (int64_t r = 0; r < n; ++r) {
      const int row = out.logit_rows[r];
      std::copy(x.begin() + row * H, x.begin() + (row + 1) * H, sel.begin() + r * H);
    }
  }
  RmsNorm(sel.data(), n, H, m.final_layernorm, eps, sel.data());
  if (out.head) {
    Linear(ctx, sel.data(), n, *out.head, out.logits);
  } else {
    SplitLinear(ctx, tp_, sel.data(), n, w_.lm_head, cfg.vocab_size, out.logits, "lm_head");
  }
}

}  // namespace mimo
