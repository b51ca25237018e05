// MiMo-V2 forward pass. Each step cites the spec section (shared/spec/mimo-v2-architecture.md)
// and the HF modeling code it mirrors (MiMoV2FlashDecoderLayer / MiMoV2FlashAttention).
#include "model/mimo_v2.h"

#include <algorithm>
#include <cmath>

#include "core/denormals.h"
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

StatusOr<std::unique_ptr<MimoV2Model>> MimoV2Model::Load(const std::string& dir) {
  std::unique_ptr<MimoV2Model> m(new MimoV2Model());
  MIMO_ASSIGN_OR_RETURN(m->ckpt_, Checkpoint::Open(dir));
  MIMO_ASSIGN_OR_RETURN(m->w_, BindWeights(*m->ckpt_, m->ckpt_->config()));
  return m;
}

std::vector<LayerConfig> MimoV2Model::KvLayerConfigs() const {
  std::vector<LayerConfig> out = config().layers;
  for (size_t i = 0; i < w_.mtp.size(); ++i) {
    LayerConfig lc = w_.mtp_layer_config;
    lc.has_sinks = !w_.mtp[i].block.attn.sinks.empty();
    lc.mtp = true;
    out.push_back(lc);
  }
  return out;
}

namespace {
// Stored rows plus scales: FP8 fp32 block scales, MXFP4 4-bit codes and one E8M0 byte per 32.
double MatrixBytes(const MatrixWeight& w) {
  return static_cast<double>(w.DataBytes()) + static_cast<double>(w.ScaleBytes());
}
double MlpBytes(const MlpWeights& m) {
  return MatrixBytes(m.gate_proj) + MatrixBytes(m.up_proj) + MatrixBytes(m.down_proj);
}
}  // namespace

double MimoV2Model::ActiveWeightBytesPerToken() const {
  const ModelConfig& cfg = config();
  double b = static_cast<double>(cfg.hidden_size) * DTypeSize(w_.embed_tokens.dtype);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const LayerWeights& w = w_.layers[l];
    b += 2.0 * cfg.hidden_size * DTypeSize(w.input_layernorm.dtype);
    b += MatrixBytes(w.attn.q_proj) + MatrixBytes(w.attn.k_proj) + MatrixBytes(w.attn.v_proj) +
         MatrixBytes(w.attn.o_proj);
    if (cfg.layers[l].ffn == FfnKind::kMoe) {
      b += MatrixBytes(w.moe.gate);
      if (!w.moe.experts.empty()) b += cfg.num_experts_per_tok * MlpBytes(w.moe.experts[0]);
    } else {
      b += MlpBytes(w.mlp);
    }
  }
  return b + MatrixBytes(w_.lm_head);
}

// §2.3: q/k/v projections, partial NeoX RoPE, V x attention_value_scale, attention with the
// layer kind's mask and sinks, o_proj.
void MimoV2Model::Attention(ExecContext& ctx, int kv_layer, const LayerConfig& lc,
                            const AttentionWeights& w, const StepBatch& batch,
                            const int32_t* positions, const float* h, float* out,
                            KvAttention& kv) {
  const int64_t T = batch.num_tokens;
  const int nh = lc.num_attention_heads, nkv = lc.num_key_value_heads;
  const int dqk = lc.head_dim, dv = lc.v_head_dim;
  std::vector<float> q(T * nh * dqk);    // [T, nh, dqk]
  std::vector<float> k(T * nkv * dqk);   // [T, nkv, dqk]
  std::vector<float> v(T * nkv * dv);    // [T, nkv, dv]
  std::vector<float> attn(T * nh * dv);  // [T, nh, dv]
  const LinearJob qkv[3] = {
      {h, T, &w.q_proj, q.data()}, {h, T, &w.k_proj, k.data()}, {h, T, &w.v_proj, v.data()}};
  LinearMany(ctx, qkv, 3);  // one fork-join region for the three projections
  RopeNeox(q.data(), T, nh, dqk, lc.rotary_dim, lc.rope_theta, positions);
  RopeNeox(k.data(), T, nkv, dqk, lc.rotary_dim, lc.rope_theta, positions);
  const float value_scale = config().attention_value_scale;
  if (value_scale != 1.0f) {
    for (float& x : v) x *= value_scale;
  }
  AttentionGeometry g;
  g.num_heads = nh;
  g.num_kv_heads = nkv;
  g.head_dim = dqk;
  g.v_head_dim = dv;
  g.sliding_window = lc.attention == AttentionKind::kSlidingWindow ? lc.sliding_window : 0;
  g.scale = 1.0f / std::sqrt(static_cast<float>(dqk));
  kv.Forward(ctx, kv_layer, g, batch, q.data(), k.data(), v.data(),
             w.sinks.empty() ? nullptr : w.sinks.data(), attn.data());
  Linear(ctx, attn.data(), T, w.o_proj, out);
}

// §2.2: pre-norm block with two residuals.
int MimoV2Model::DecoderLayer(ExecContext& ctx, int kv_layer, const LayerConfig& lc,
                              const LayerWeights& w, const StepBatch& batch,
                              const int32_t* positions, float* x, KvAttention& kv) {
  const ModelConfig& cfg = config();
  const int64_t T = batch.num_tokens, H = cfg.hidden_size;
  std::vector<float> h(T * H), y(T * H);  // [T, H] normed input / sublayer output
  RmsNorm(x, T, H, w.input_layernorm, cfg.layernorm_epsilon, h.data());       // input_layernorm
  Attention(ctx, kv_layer, lc, w.attn, batch, positions, h.data(), y.data(), kv);  // self_attn
  for (int64_t i = 0; i < T * H; ++i) x[i] += y[i];                            // residual
  RmsNorm(x, T, H, w.post_attention_layernorm, cfg.layernorm_epsilon, h.data());  // post norm
  int experts = 0;
  if (lc.ffn == FfnKind::kMoe) {
    experts = MoeForward(ctx, cfg, w.moe, h.data(), T, y.data());  // §2.4 MoE
  } else {
    MlpForward(ctx, w.mlp, h.data(), T, y.data());  // §2.4 dense
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
  Linear(ctx, sel.data(), n, w_.lm_head, logits);                        // lm_head
}

void MimoV2Model::Forward(ExecContext& ctx, const StepBatch& batch, const int32_t* tokens,
                          KvAttention& kv, const ForwardOutputs& out) {
  ScopedFlushDenormals ftz_daz;  // serial parts (norms, residuals, routing) as the workers do
  const ModelConfig& cfg = config();
  const int64_t T = batch.num_tokens, H = cfg.hidden_size;
  const std::vector<int32_t> positions = StepPositions(batch);
  std::vector<float> x(T * H);  // [T, H] residual stream
  Embedding(w_.embed_tokens, tokens, T, x.data());  // §2.1, no scaling
  stats_ = ForwardStats{};
  stats_.weight_bytes = static_cast<double>(T) * H * DTypeSize(w_.embed_tokens.dtype);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const LayerWeights& w = w_.layers[l];
    const int experts =
        DecoderLayer(ctx, l, cfg.layers[l], w, batch, positions.data(), x.data(), kv);
    double b = 2.0 * H * DTypeSize(w.input_layernorm.dtype) + MatrixBytes(w.attn.q_proj) +
               MatrixBytes(w.attn.k_proj) + MatrixBytes(w.attn.v_proj) + MatrixBytes(w.attn.o_proj);
    if (cfg.layers[l].ffn == FfnKind::kMoe) {
      b += MatrixBytes(w.moe.gate);
      if (!w.moe.experts.empty()) b += experts * MlpBytes(w.moe.experts[0]);
      stats_.distinct_experts += experts;
      ++stats_.moe_layers;
    } else {
      b += MlpBytes(w.mlp);
    }
    stats_.weight_bytes += b;
  }
  if (out.prenorm_hidden) std::copy(x.begin(), x.end(), out.prenorm_hidden);
  if (out.logits) {
    LmHead(ctx, x.data(), T, out.logit_rows, out.logits);
    stats_.weight_bytes += MatrixBytes(w_.lm_head);
  }
}

void MimoV2Model::MtpForward(ExecContext& ctx, int i, const StepBatch& batch, const float* hprev,
                             const int32_t* tokens, KvAttention& kv, const MtpOutputs& out) {
  ScopedFlushDenormals ftz_daz;
  const ModelConfig& cfg = config();
  const MtpLayerWeights& m = w_.mtp[i];
  const int64_t T = batch.num_tokens, H = cfg.hidden_size;
  const float eps = cfg.layernorm_epsilon;
  const std::vector<int32_t> positions = StepPositions(batch);
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
  Linear(ctx, cat.data(), T, m.eh_proj, x.data());
  LayerConfig lc = w_.mtp_layer_config;
  lc.has_sinks = !m.block.attn.sinks.empty();
  DecoderLayer(ctx, mtp_kv_layer(i), lc, m.block, batch, positions.data(), x.data(), kv);
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
  Linear(ctx, sel.data(), n, out.head ? *out.head : w_.lm_head, out.logits);
}

}  // namespace mimo
