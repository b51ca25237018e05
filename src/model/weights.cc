// BindWeights: the one list of tensors a MiMo-V2 checkpoint must (or may) hold, cut to this
// rank's rows by the sharding table; ForEachWeight: the one walk over what was bound.
#include "model/weights.h"

#include "core/check.h"
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

Status BindAttention(Checkpoint& ck, const std::string& p, const ModelConfig& cfg,
                     const LayerConfig& lc, AttentionWeights* w) {
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
  return Status::Ok();
}

// Shared by decoder layers and MTP blocks; `post_norm` differs by name between the two.
Status BindBlock(Checkpoint& ck, const std::string& p, const ModelConfig& cfg,
                 const LayerConfig& lc, const std::string& post_norm, const TpSlice& tp,
                 LayerWeights* w) {
  const int64_t H = cfg.hidden_size;
  MIMO_RETURN_IF_ERROR(BindVector(ck, p + "input_layernorm.weight", H, &w->input_layernorm));
  MIMO_RETURN_IF_ERROR(BindVector(ck, p + post_norm + ".weight", H, &w->post_attention_layernorm));
  MIMO_RETURN_IF_ERROR(BindAttention(ck, p + "self_attn.", cfg, lc, &w->attn));
  if (lc.ffn == FfnKind::kDense) {
    return BindMlp(ck, p + "mlp.", H, cfg.intermediate_size, &w->mlp);
  }
  const int64_t E = cfg.n_routed_experts;
  MIMO_ASSIGN_OR_RETURN(w->moe.gate, ck.GetLinear(p + "mlp.gate", E, H));
  MIMO_RETURN_IF_ERROR(
      BindFloats(ck, p + "mlp.gate.e_score_correction_bias", E, &w->moe.score_bias));
  w->moe.experts.resize(E);
  // Expert parallel: this rank's experts only (the others stay empty and are never read).
  const RowRange mine = HeldExperts(E, tp);
  for (int64_t e = mine.begin; e < mine.begin + mine.count; ++e) {
    MIMO_RETURN_IF_ERROR(BindMlp(ck, p + "mlp.experts." + std::to_string(e) + ".", H,
                                 cfg.moe_intermediate_size, &w->moe.experts[e]));
  }
  return Status::Ok();
}

// The one walk behind both ForEachWeight overloads (Weights: ModelWeights, const or not).
template <class Weights, class Ref>
void WalkWeights(Weights& w, const std::function<void(const Ref&)>& f) {
  const int L = static_cast<int>(w.layers.size());
  auto visit = [&](TensorRole role, int layer, int mtp, auto* data, int expert = -1) {
    Ref r;
    r.id = {role, layer, mtp, expert};
    using T = std::remove_const_t<std::remove_pointer_t<decltype(data)>>;
    if constexpr (std::is_same_v<T, MatrixWeight>) {
      r.matrix = data;
    } else if constexpr (std::is_same_v<T, TensorView>) {
      r.tensor = data;
    } else {
      if (data->empty()) return;  // no sinks / no score bias
      r.floats = data;
    }
    f(r);
  };
  auto mlp = [&](auto& m, const TensorRole (&roles)[3], int layer, int mtp, int expert) {
    visit(roles[0], layer, mtp, &m.gate_proj, expert);
    visit(roles[1], layer, mtp, &m.up_proj, expert);
    visit(roles[2], layer, mtp, &m.down_proj, expert);
  };
  auto block = [&](auto& l, int layer, int mtp) {
    using R = TensorRole;
    visit(R::kInputNorm, layer, mtp, &l.input_layernorm);
    visit(R::kQProj, layer, mtp, &l.attn.q_proj);
    visit(R::kKProj, layer, mtp, &l.attn.k_proj);
    visit(R::kVProj, layer, mtp, &l.attn.v_proj);
    visit(R::kOProj, layer, mtp, &l.attn.o_proj);
    visit(R::kSinks, layer, mtp, &l.attn.sinks);
    visit(mtp < 0 ? R::kPostAttentionNorm : R::kPreMlpNorm, layer, mtp,
          &l.post_attention_layernorm);
    if (l.moe.gate.empty()) {
      mlp(l.mlp, {R::kGateProj, R::kUpProj, R::kDownProj}, layer, mtp, -1);
      return;
    }
    visit(R::kRouter, layer, mtp, &l.moe.gate);
    visit(R::kRouterBias, layer, mtp, &l.moe.score_bias);
    for (size_t e = 0; e < l.moe.experts.size(); ++e) {
      if (l.moe.experts[e].gate_proj.empty()) continue;  // another rank's
      mlp(l.moe.experts[e], {R::kExpertGateProj, R::kExpertUpProj, R::kExpertDownProj}, layer, mtp,
          static_cast<int>(e));
    }
  };
  visit(TensorRole::kEmbedding, -1, -1, &w.embed_tokens);
  for (int l = 0; l < L; ++l) block(w.layers[l], l, -1);
  visit(TensorRole::kModelNorm, -1, -1, &w.norm);
  Ref head;
  head.id.role = TensorRole::kLmHead;
  head.matrix = &w.lm_head;
  const auto* e0 = static_cast<const uint8_t*>(w.embed_tokens.data);
  const auto* h0 = static_cast<const uint8_t*>(w.lm_head.data);
  head.tied = h0 >= e0 && h0 < e0 + w.embed_tokens.nbytes();
  f(head);
  for (int i = 0; i < static_cast<int>(w.mtp.size()); ++i) {
    auto& m = w.mtp[i];
    visit(TensorRole::kEnorm, L + i, i, &m.enorm);
    visit(TensorRole::kHnorm, L + i, i, &m.hnorm);
    visit(TensorRole::kEhProj, L + i, i, &m.eh_proj);
    block(m.block, L + i, i);
    visit(TensorRole::kFinalNorm, L + i, i, &m.final_layernorm);
  }
}

// Under tensor parallelism: every bound weight cut to the rows the sharding table gives this rank
// (whole ones left as they are; other ranks' experts were never bound). q/k/v are cut by their
// own heads after GetQkv de-interleaved a fused qkv_proj (at the checkpoint's own TP), so any N
// slices the same way.
Status KeepThisRanksRows(const ModelConfig& cfg, const TpSlice& tp, ModelWeights* w) {
  if (!tp.active()) return Status::Ok();
  Status st = Status::Ok();
  ForEachWeight(*w, [&](const MutableWeightRef& r) {
    if (!st.ok() || (r.matrix == nullptr && r.floats == nullptr)) return;
    StatusOr<TensorShard> s = ShardOf(r.id, cfg, tp);
    if (!s.ok()) {
      st = s.status();
      return;
    }
    if (s->whole) return;
    const int64_t rows = r.matrix ? r.matrix->rows : static_cast<int64_t>(r.floats->size());
    MIMO_CHECK(s->parts.size() == 1 && s->rows == rows,
               "%s: the sharding table splits %lld rows in %zu sections, the weight has %lld",
               TensorName(r.id).c_str(), static_cast<long long>(s->rows), s->parts.size(),
               static_cast<long long>(rows));
    const RowRange p = s->parts[0];
    if (r.matrix) {
      *r.matrix = SliceRows(*r.matrix, p.begin, p.count);
    } else {
      *r.floats = std::vector<float>(r.floats->begin() + p.begin,
                                     r.floats->begin() + p.begin + p.count);
    }
  });
  return st;
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
    MIMO_RETURN_IF_ERROR(BindBlock(ck, p, cfg, m, "pre_mlp_layernorm", tp, &t.block));
    MIMO_RETURN_IF_ERROR(BindVector(ck, p + "final_layernorm.weight", H, &t.final_layernorm));
  }

  if (num_mtp) MIMO_LOG_DEBUG("bound %d MTP layers", num_mtp);
  MIMO_RETURN_IF_ERROR(KeepThisRanksRows(cfg, tp, &w));
  return w;
}

void ForEachWeight(const ModelWeights& w, const std::function<void(const WeightRef&)>& f) {
  WalkWeights<const ModelWeights, WeightRef>(w, f);
}

void ForEachWeight(ModelWeights& w, const std::function<void(const MutableWeightRef&)>& f) {
  WalkWeights<ModelWeights, MutableWeightRef>(w, f);
}

}  // namespace mimo
