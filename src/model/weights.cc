// BindWeights: the one list of tensors a MiMo-V2 checkpoint must (or may) hold.
#include "model/weights.h"

#include "core/log.h"

namespace mimo {
namespace {

// Norm and sink vectors: BF16 in real checkpoints, F32/F16 accepted.
constexpr std::initializer_list<DType> kVecDTypes = {DType::kBF16, DType::kF32, DType::kF16};

Status BindVector(Checkpoint& ck, const std::string& name, int64_t n, TensorView* out) {
  MIMO_ASSIGN_OR_RETURN(*out, ck.Get(name, {n}, kVecDTypes));
  return Status::Ok();
}

Status BindFloats(Checkpoint& ck, const std::string& name, int64_t n, std::vector<float>* out) {
  TensorView t;
  MIMO_RETURN_IF_ERROR(BindVector(ck, name, n, &t));
  out->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::kF32: (*out)[i] = t.as<const float>()[i]; break;
      case DType::kBF16: (*out)[i] = BF16ToF32(t.as<const uint16_t>()[i]); break;
      default: (*out)[i] = F16ToF32(t.as<const uint16_t>()[i]); break;
    }
  }
  return Status::Ok();
}

Status BindMlp(Checkpoint& ck, const std::string& p, int64_t hidden, int64_t inter,
               MlpWeights* w) {
  MIMO_ASSIGN_OR_RETURN(w->gate_proj, ck.GetLinear(p + "gate_proj", inter, hidden));
  MIMO_ASSIGN_OR_RETURN(w->up_proj, ck.GetLinear(p + "up_proj", inter, hidden));
  MIMO_ASSIGN_OR_RETURN(w->down_proj, ck.GetLinear(p + "down_proj", hidden, inter));
  return Status::Ok();
}

// Rows of a TP split of n (hidden, intermediate, vocabulary): this rank's share.
MatrixWeight SliceShare(const MatrixWeight& w, const TpSlice& tp) {
  const RowRange r = EvenSplit(w.rows, tp.rank, tp.size);
  return tp.active() ? SliceRows(w, r.begin, r.count) : w;
}

void SliceMlp(const TpSlice& tp, MlpWeights* w) {
  w->gate_proj = SliceShare(w->gate_proj, tp);  // intermediate rows
  w->up_proj = SliceShare(w->up_proj, tp);
  w->down_proj = SliceShare(w->down_proj, tp);  // hidden rows (all intermediate columns)
}

Status BindAttention(Checkpoint& ck, const std::string& p, const ModelConfig& cfg,
                     const LayerConfig& lc, const TpSlice& tp, AttentionWeights* w) {
  MIMO_ASSIGN_OR_RETURN(QkvWeights qkv, ck.GetQkv(p.substr(0, p.size() - 1), lc, cfg.num_key_value_heads));
  w->q_proj = std::move(qkv.q);
  w->k_proj = std::move(qkv.k);
  w->v_proj = std::move(qkv.v);
  MIMO_ASSIGN_OR_RETURN(w->o_proj, ck.GetLinear(p + "o_proj", cfg.hidden_size,
                                                int64_t{lc.num_attention_heads} * lc.v_head_dim));
  if (lc.has_sinks) {
    MIMO_RETURN_IF_ERROR(BindFloats(ck, p + "attention_sink_bias", lc.num_attention_heads,
                                    &w->sinks));
  }
  if (!tp.active()) return Status::Ok();
  // Head order after GetQkv (fused sections de-interleaved at the checkpoint's own TP), so any
  // N slices the same way.
  MIMO_ASSIGN_OR_RETURN(HeadSlice hs, SliceHeads(lc, tp.rank, tp.size));
  w->q_proj = SliceRows(w->q_proj, int64_t{hs.q_begin} * lc.head_dim, int64_t{hs.num_q} * lc.head_dim);
  w->k_proj = SliceRows(w->k_proj, int64_t{hs.kv_begin} * lc.head_dim,
                        int64_t{hs.num_kv} * lc.head_dim);
  w->v_proj = SliceRows(w->v_proj, int64_t{hs.kv_begin} * lc.v_head_dim,
                        int64_t{hs.num_kv} * lc.v_head_dim);
  w->o_proj = SliceShare(w->o_proj, tp);  // hidden rows
  if (!w->sinks.empty()) {
    w->sinks = std::vector<float>(w->sinks.begin() + hs.q_begin,
                                  w->sinks.begin() + hs.q_begin + hs.num_q);
  }
  return Status::Ok();
}

// Shared by decoder layers and MTP blocks; `post_norm` differs by name between the two.
Status BindBlock(Checkpoint& ck, const std::string& p, const ModelConfig& cfg,
                 const LayerConfig& lc, const std::string& post_norm, const TpSlice& tp,
                 LayerWeights* w) {
  const int64_t H = cfg.hidden_size;
  MIMO_RETURN_IF_ERROR(BindVector(ck, p + "input_layernorm.weight", H, &w->input_layernorm));
  MIMO_RETURN_IF_ERROR(BindVector(ck, p + post_norm + ".weight", H, &w->post_attention_layernorm));
  MIMO_RETURN_IF_ERROR(BindAttention(ck, p + "self_attn.", cfg, lc, tp, &w->attn));
  if (lc.ffn == FfnKind::kDense) {
    MIMO_RETURN_IF_ERROR(BindMlp(ck, p + "mlp.", H, cfg.intermediate_size, &w->mlp));
    SliceMlp(tp, &w->mlp);
    return Status::Ok();
  }
  const int64_t E = cfg.n_routed_experts;
  MIMO_ASSIGN_OR_RETURN(w->moe.gate, ck.GetLinear(p + "mlp.gate", E, H));
  MIMO_RETURN_IF_ERROR(
      BindFloats(ck, p + "mlp.gate.e_score_correction_bias", E, &w->moe.score_bias));
  w->moe.experts.resize(E);
  // Expert parallel: this rank's experts only (the others stay empty and are never read).
  const RowRange mine = tp.expert_parallel ? EvenSplit(E, tp.rank, tp.size) : RowRange{0, E};
  for (int64_t e = mine.begin; e < mine.begin + mine.count; ++e) {
    MIMO_RETURN_IF_ERROR(BindMlp(ck, p + "mlp.experts." + std::to_string(e) + ".", H,
                                 cfg.moe_intermediate_size, &w->moe.experts[e]));
    if (!tp.expert_parallel) SliceMlp(tp, &w->moe.experts[e]);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelWeights> BindWeights(Checkpoint& ck, const ModelConfig& cfg, const TpSlice& tp) {
  ModelWeights w;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  MIMO_ASSIGN_OR_RETURN(w.embed_tokens, ck.Get("model.embed_tokens.weight", {V, H}, kVecDTypes));
  MIMO_RETURN_IF_ERROR(BindVector(ck, "model.norm.weight", H, &w.norm));
  if (cfg.tie_word_embeddings && !ck.Has("lm_head.weight")) {
    w.lm_head.dtype = w.embed_tokens.dtype;
    w.lm_head.rows = V;
    w.lm_head.cols = H;
    w.lm_head.data = w.embed_tokens.data;
  } else {
    MIMO_ASSIGN_OR_RETURN(w.lm_head, ck.GetLinear("lm_head", V, H));
  }
  w.lm_head = SliceShare(w.lm_head, tp);  // vocabulary rows
  w.layers.resize(cfg.num_hidden_layers);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    MIMO_RETURN_IF_ERROR(BindBlock(ck, "model.layers." + std::to_string(l) + ".", cfg,
                                   cfg.layers[l], "post_attention_layernorm", tp, &w.layers[l]));
  }

  // MTP: an SWA block (sinks as on SWA layers) with the dense MLP.
  LayerConfig& m = w.mtp_layer_config;
  m = cfg.mtp_layer;
  const int num_mtp = ck.NumMtpLayers();
  w.mtp.resize(num_mtp);
  for (int i = 0; i < num_mtp; ++i) {
    const std::string p = "model.mtp.layers." + std::to_string(i) + ".";
    MtpLayerWeights& t = w.mtp[i];
    m.has_sinks = ck.Has(p + "self_attn.attention_sink_bias");
    MIMO_RETURN_IF_ERROR(BindVector(ck, p + "enorm.weight", H, &t.enorm));
    MIMO_RETURN_IF_ERROR(BindVector(ck, p + "hnorm.weight", H, &t.hnorm));
    MIMO_ASSIGN_OR_RETURN(t.eh_proj, ck.GetLinear(p + "eh_proj", H, 2 * H));
    t.eh_proj = SliceShare(t.eh_proj, tp);  // hidden rows
    MIMO_RETURN_IF_ERROR(BindBlock(ck, p, cfg, m, "pre_mlp_layernorm", tp, &t.block));
    MIMO_RETURN_IF_ERROR(BindVector(ck, p + "final_layernorm.weight", H, &t.final_layernorm));
  }

  if (num_mtp) MIMO_LOG_DEBUG("bound %d MTP layers", num_mtp);
  return w;
}

void ForEachWeight(const ModelWeights& w, const std::function<void(const WeightInfo&)>& f) {
  auto matrix = [](const MatrixWeight& m) {
    return static_cast<double>(m.DataBytes()) + static_cast<double>(m.ScaleBytes());
  };
  auto visit = [&](WeightRole role, int layer, double bytes, int expert = -1) {
    WeightInfo i;
    i.role = role;
    i.layer = layer;
    i.expert = expert;
    i.bytes = bytes;
    f(i);
  };
  auto mlp = [&](const MlpWeights& m, WeightRole role, int layer, int expert) {
    for (const MatrixWeight* p : {&m.gate_proj, &m.up_proj, &m.down_proj}) {
      visit(role, layer, matrix(*p), expert);
    }
  };
  auto block = [&](const LayerWeights& l, int layer) {
    visit(WeightRole::kNorm, layer, static_cast<double>(l.input_layernorm.nbytes()));
    for (const MatrixWeight* p : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj}) {
      visit(WeightRole::kAttention, layer, matrix(*p));
    }
    visit(WeightRole::kNorm, layer, static_cast<double>(l.post_attention_layernorm.nbytes()));
    if (!l.moe.gate.empty()) {
      visit(WeightRole::kRouter, layer, matrix(l.moe.gate));
      for (size_t e = 0; e < l.moe.experts.size(); ++e) {
        if (!l.moe.experts[e].gate_proj.empty()) {  // held by this rank
          mlp(l.moe.experts[e], WeightRole::kExpert, layer, static_cast<int>(e));
        }
      }
    } else {
      mlp(l.mlp, WeightRole::kDenseMlp, layer, -1);
    }
  };
  WeightInfo embed;
  embed.role = WeightRole::kEmbedding;
  embed.bytes = static_cast<double>(w.embed_tokens.nbytes());
  embed.row_bytes = static_cast<double>(w.embed_tokens.dim(-1) * DTypeSize(w.embed_tokens.dtype));
  f(embed);
  const int L = static_cast<int>(w.layers.size());
  for (int l = 0; l < L; ++l) block(w.layers[l], l);
  visit(WeightRole::kNorm, -1, static_cast<double>(w.norm.nbytes()));
  WeightInfo head;
  head.role = WeightRole::kLmHead;
  head.bytes = matrix(w.lm_head);
  const auto* e0 = static_cast<const uint8_t*>(w.embed_tokens.data);
  const auto* h0 = static_cast<const uint8_t*>(w.lm_head.data);
  head.tied = h0 >= e0 && h0 < e0 + w.embed_tokens.nbytes();
  f(head);
  for (size_t i = 0; i < w.mtp.size(); ++i) {
    const MtpLayerWeights& m = w.mtp[i];
    const int layer = L + static_cast<int>(i);
    visit(WeightRole::kNorm, layer, static_cast<double>(m.enorm.nbytes()));
    visit(WeightRole::kNorm, layer, static_cast<double>(m.hnorm.nbytes()));
    visit(WeightRole::kMtpInput, layer, matrix(m.eh_proj));
    block(m.block, layer);
    visit(WeightRole::kNorm, layer, static_cast<double>(m.final_layernorm.nbytes()));
  }
}

}  // namespace mimo
