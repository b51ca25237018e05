// config.json -> ModelConfig: an identity map of the Hugging Face field names, the MiMo-V2 quirks
// of spec section 1, the per-layer LayerConfig derivation, and validation. Every error names the
// offending field.
//
// Quirks and choices (spec section 1 unless marked INFERRED):
// - JSON null is read as "absent" for every field, so the field keeps its default. In particular
//   routed_scaling_factor: null -> 1.0 and n_shared_experts: null -> 0.
// - layernorm_epsilon is the MiMo name; if it is absent rms_norm_eps is used, else 1e-5.
// - rope_theta / partial_rotary_factor may appear at top level, inside a flat `rope_parameters`
//   object, or both. The top-level value wins when both are present (they agree in every known
//   config). The per-layer-type form of HF-NAT (`rope_parameters.full_attention.rope_theta`,
//   `rope_parameters.sliding_attention.rope_theta`) is accepted as a further fallback.
//   swa_rope_theta is read at top level only (falling back to the HF-NAT sliding_attention entry).
// - swa_* fields default to the full-layer value when absent. swa_qk_head_dim is an alias of
//   swa_head_dim (it must agree when both are present).
// - sliding_window, else sliding_window_size (they must agree when both are present).
// - hybrid_layer_pattern: a list (1 = SWA, 0 = full). When it is absent and hybrid_block_size is
//   set, layer i is full when (i + 1) % hybrid_block_size == 0, else SWA (INFERRED from the remote
//   config's description; no MiMo checkpoint seen uses it). When both are absent, every layer is
//   full attention.
// - moe_layer_freq: a list (1 = MoE, 0 = dense) or an int k. For an int, layer i is MoE when
//   i >= first_k_dense_replace (absent -> 1, i.e. layer 0 dense) and i % k == 0 (INFERRED,
//   DeepSeek-style). Absent -> every layer dense.
// - num_nextn_predict_layers absent -> 0 (the checkpoint loader counts model.mtp.layers.*).
// - quantization_config.store_dtype "mxfp4" (V2.6): routed experts are MXFP4 with
//   mxfp4_block_size 32 (the only size the kernels decode); other values but "fp8" are refused.
// - moe_router_dtype (V2.6: "bfloat16") says how the router weight is stored; absent -> float32.
//   The router weight and e_score_correction_bias bind in either dtype and the logits are
//   accumulated in fp32 from the exact fp32 values (spec section 2.4) whatever it says.
#include "io/hf_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace mimo {
namespace {

using json = nlohmann::json;

// Typed, null-tolerant access to one JSON object; `where` prefixes field names in errors
// ("quantization_config.weight_block_size").
class FieldReader {
 public:
  FieldReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  std::string Name(const char* key) const { return where_.empty() ? key : where_ + "." + key; }

  // The value, or nullptr when the key is absent or null.
  const json* Find(const char* key) const {
    if (!obj_.is_object()) return nullptr;
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool Has(const char* key) const { return Find(key) != nullptr; }

  Status Required(const char* key) const {
    return Has(key)
               ? Status::Ok()
               : InvalidArgument("config.json: missing required field '%s'", Name(key).c_str());
  }

  Status Int(const char* key, int* out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    return ToInt(*v, Name(key), out);
  }
  Status Float(const char* key, float* out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_number()) return TypeError(key, "a number", *v);
    double d = v->get<double>();
    if (!std::isfinite(d))
      return InvalidArgument("config.json: field '%s' is not finite", Name(key).c_str());
    *out = static_cast<float>(d);
    return Status::Ok();
  }
  Status Double(const char* key, double* out) const {
    float f = 0.0f;
    const json* v = Find(key);
    if (!v) return Status::Ok();
    MIMO_RETURN_IF_ERROR(Float(key, &f));
    *out = v->get<double>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (v->is_boolean()) {
      *out = v->get<bool>();
    } else if (v->is_number_integer() && (v->get<int64_t>() == 0 || v->get<int64_t>() == 1)) {
      *out = v->get<int64_t>() == 1;
    } else {
      return TypeError(key, "a boolean", *v);
    }
    return Status::Ok();
  }
  Status String(const char* key, std::string* out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return TypeError(key, "a string", *v);
    *out = v->get<std::string>();
    return Status::Ok();
  }
  Status IntList(const char* key, std::vector<int>* out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_array()) return TypeError(key, "a list of integers", *v);
    out->clear();
    for (size_t i = 0; i < v->size(); ++i) {
      int x = 0;
      MIMO_RETURN_IF_ERROR(ToInt((*v)[i], Name(key) + "[" + std::to_string(i) + "]", &x));
      out->push_back(x);
    }
    return Status::Ok();
  }
  Status StringList(const char* key, std::vector<std::string>* out) const {
    const json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_array()) return TypeError(key, "a list of strings", *v);
    out->clear();
    for (const auto& e : *v) {
      if (!e.is_string()) return TypeError(key, "a list of strings", *v);
      out->push_back(e.get<std::string>());
    }
    return Status::Ok();
  }

 private:
  static Status ToInt(const json& v, const std::string& name, int* out) {
    if (v.is_number_integer() || v.is_number_unsigned()) {
      // Unsigned values beyond int64 come back as uint64; both ranges are checked.
      if (v.is_number_unsigned() &&
          v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
        return InvalidArgument("config.json: field '%s' is out of range", name.c_str());
      }
      int64_t x = v.get<int64_t>();
      if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
        return InvalidArgument("config.json: field '%s' is out of range", name.c_str());
      }
      *out = static_cast<int>(x);
      return Status::Ok();
    }
    return InvalidArgument("config.json: field '%s' must be an integer, got %s", name.c_str(),
                           v.dump().substr(0, 60).c_str());
  }
  Status TypeError(const char* key, const char* what, const json& v) const {
    return InvalidArgument("config.json: field '%s' must be %s, got %s", Name(key).c_str(), what,
                           v.dump().substr(0, 60).c_str());
  }

  const json& obj_;
  std::string where_;
};

Status Positive(const char* field, int v) {
  if (v > 0) return Status::Ok();
  return InvalidArgument("config.json: '%s' must be positive, got %d", field, v);
}

Status AtMost(const char* field, int v, int max) {
  if (v <= max) return Status::Ok();
  return InvalidArgument("config.json: '%s' = %d is out of range: at most %d", field, v, max);
}

// The bounds of hf_config.h (kMaxContextTokens and the rest), checked before anything is derived
// from the sizes: a value past them is a broken or hostile config, not a model.
Status ValidateRanges(const ModelConfig& c) {
  MIMO_RETURN_IF_ERROR(AtMost("vocab_size", c.vocab_size, kMaxVocabSize));
  for (const auto& [field, v] : {std::pair{"hidden_size", c.hidden_size},
                                 {"intermediate_size", c.intermediate_size},
                                 {"moe_intermediate_size", c.moe_intermediate_size}}) {
    MIMO_RETURN_IF_ERROR(AtMost(field, v, kMaxWidth));
  }
  for (const auto& [field, v] :
       {std::pair{"num_attention_heads", c.num_attention_heads},
        {"num_key_value_heads", c.num_key_value_heads}, {"head_dim", c.head_dim},
        {"v_head_dim", c.v_head_dim}, {"swa_num_attention_heads", c.swa_num_attention_heads},
        {"swa_num_key_value_heads", c.swa_num_key_value_heads},
        {"swa_head_dim", c.swa_head_dim}, {"swa_v_head_dim", c.swa_v_head_dim}}) {
    MIMO_RETURN_IF_ERROR(AtMost(field, v, kMaxHeads));
  }
  MIMO_RETURN_IF_ERROR(AtMost("n_routed_experts", c.n_routed_experts, kMaxExperts));
  MIMO_RETURN_IF_ERROR(AtMost("sliding_window", c.sliding_window, kMaxContextTokens));
  MIMO_RETURN_IF_ERROR(
      AtMost("max_position_embeddings", c.max_position_embeddings, kMaxContextTokens));
  if (c.max_position_embeddings < 0) {
    return InvalidArgument("config.json: 'max_position_embeddings' must be >= 0, got %d",
                           c.max_position_embeddings);
  }
  // An end-of-sequence id is compared with sampled tokens and indexes logits rows (min_tokens
  // masks it): one outside the vocabulary is a broken config, never a token the model can write.
  for (const int id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgument(
          "config.json: 'eos_token_id' %d is not a token id: it must be in [0, vocab_size) and "
          "vocab_size is %d",
          id, c.vocab_size);
    }
  }
  return Status::Ok();
}

// Sizes, attention geometry, norms, rope.
Status ReadAttention(const FieldReader& r, ModelConfig* c) {
  MIMO_RETURN_IF_ERROR(r.Int("num_attention_heads", &c->num_attention_heads));
  c->num_key_value_heads = c->num_attention_heads;  // HF default when absent
  MIMO_RETURN_IF_ERROR(r.Int("num_key_value_heads", &c->num_key_value_heads));
  if (c->num_attention_heads > 0) c->head_dim = c->hidden_size / c->num_attention_heads;
  MIMO_RETURN_IF_ERROR(r.Int("head_dim", &c->head_dim));
  c->v_head_dim = c->head_dim;
  MIMO_RETURN_IF_ERROR(r.Int("v_head_dim", &c->v_head_dim));
  MIMO_RETURN_IF_ERROR(r.Bool("add_full_attention_sink_bias", &c->add_full_attention_sink_bias));
  MIMO_RETURN_IF_ERROR(r.Bool("attention_bias", &c->attention_bias));

  c->swa_num_attention_heads = c->num_attention_heads;
  c->swa_num_key_value_heads = c->num_key_value_heads;
  c->swa_head_dim = c->head_dim;
  c->swa_v_head_dim = c->v_head_dim;
  MIMO_RETURN_IF_ERROR(r.Int("swa_num_attention_heads", &c->swa_num_attention_heads));
  MIMO_RETURN_IF_ERROR(r.Int("swa_num_key_value_heads", &c->swa_num_key_value_heads));
  MIMO_RETURN_IF_ERROR(r.Int("swa_head_dim", &c->swa_head_dim));
  if (r.Has("swa_qk_head_dim")) {
    int qk = 0;
    MIMO_RETURN_IF_ERROR(r.Int("swa_qk_head_dim", &qk));
    if (r.Has("swa_head_dim") && qk != c->swa_head_dim) {
      return InvalidArgument(
          "config.json: 'swa_qk_head_dim' (%d) disagrees with 'swa_head_dim' "
          "(%d)",
          qk, c->swa_head_dim);
    }
    c->swa_head_dim = qk;
  }
  MIMO_RETURN_IF_ERROR(r.Int("swa_v_head_dim", &c->swa_v_head_dim));
  MIMO_RETURN_IF_ERROR(r.Bool("add_swa_attention_sink_bias", &c->add_swa_attention_sink_bias));

  int sw = 0, sws = 0;
  MIMO_RETURN_IF_ERROR(r.Int("sliding_window", &sw));
  MIMO_RETURN_IF_ERROR(r.Int("sliding_window_size", &sws));
  if (r.Has("sliding_window") && r.Has("sliding_window_size") && sw != sws) {
    return InvalidArgument(
        "config.json: 'sliding_window' (%d) and 'sliding_window_size' (%d) "
        "disagree",
        sw, sws);
  }
  c->sliding_window = r.Has("sliding_window") ? sw : sws;
  MIMO_RETURN_IF_ERROR(r.Float("attention_value_scale", &c->attention_value_scale));
  return Status::Ok();
}

// rope_theta, partial_rotary_factor, swa_rope_theta with the rope_parameters fallbacks.
// `prf` receives the factor in double precision so rotary_dim = int(head_dim * prf) matches
// Python's arithmetic exactly.
Status ReadRope(const FieldReader& r, ModelConfig* c, double* prf) {
  *prf = 1.0;
  const json* rp = r.Find("rope_parameters");
  if (rp && !rp->is_object()) {
    return InvalidArgument("config.json: field 'rope_parameters' must be an object");
  }
  static const json kEmpty = json::object();
  FieldReader flat(rp ? *rp : kEmpty, "rope_parameters");
  FieldReader full(flat.Find("full_attention") ? *flat.Find("full_attention") : kEmpty,
                   "rope_parameters.full_attention");
  FieldReader swa(flat.Find("sliding_attention") ? *flat.Find("sliding_attention") : kEmpty,
                  "rope_parameters.sliding_attention");
  // Lowest priority first; later reads overwrite.
  MIMO_RETURN_IF_ERROR(full.Float("rope_theta", &c->rope_theta));
  MIMO_RETURN_IF_ERROR(full.Double("partial_rotary_factor", prf));
  MIMO_RETURN_IF_ERROR(flat.Float("rope_theta", &c->rope_theta));
  MIMO_RETURN_IF_ERROR(flat.Double("partial_rotary_factor", prf));
  MIMO_RETURN_IF_ERROR(r.Float("rope_theta", &c->rope_theta));
  MIMO_RETURN_IF_ERROR(r.Double("partial_rotary_factor", prf));
  MIMO_RETURN_IF_ERROR(swa.Float("rope_theta", &c->swa_rope_theta));
  MIMO_RETURN_IF_ERROR(r.Float("swa_rope_theta", &c->swa_rope_theta));
  c->partial_rotary_factor = static_cast<float>(*prf);

  for (const FieldReader* fr : {&flat, &full, &swa}) {
    std::string type;
    MIMO_RETURN_IF_ERROR(fr->String("rope_type", &type));
    if (!type.empty() && type != "default") {
      return Unimplemented("config.json: '%s' = '%s' is not supported (only 'default')",
                           fr->Name("rope_type").c_str(), type.c_str());
    }
  }
  if (const json* rs = r.Find("rope_scaling")) {
    FieldReader scaling(*rs, "rope_scaling");
    std::string type;
    MIMO_RETURN_IF_ERROR(scaling.String("rope_type", &type));
    if (type.empty()) MIMO_RETURN_IF_ERROR(scaling.String("type", &type));
    if (type != "default") {
      return Unimplemented("config.json: 'rope_scaling' of type '%s' is not supported",
                           type.c_str());
    }
  }
  return Status::Ok();
}

Status ReadPattern(const FieldReader& r, ModelConfig* c) {
  const int n = c->num_hidden_layers;
  MIMO_RETURN_IF_ERROR(r.Int("hybrid_block_size", &c->hybrid_block_size));
  if (r.Has("hybrid_layer_pattern")) {
    MIMO_RETURN_IF_ERROR(r.IntList("hybrid_layer_pattern", &c->hybrid_layer_pattern));
  } else if (c->hybrid_block_size > 0) {
    c->hybrid_layer_pattern.assign(n, 1);
    for (int i = 0; i < n; ++i) {
      if ((i + 1) % c->hybrid_block_size == 0) c->hybrid_layer_pattern[i] = 0;
    }
    c->parse_notes.push_back("hybrid_layer_pattern INFERRED from hybrid_block_size=" +
                             std::to_string(c->hybrid_block_size) +
                             ": layer i full when (i+1) % hybrid_block_size == 0");
  } else {
    if (r.Has("hybrid_block_size")) {
      return InvalidArgument("config.json: 'hybrid_block_size' must be positive, got %d",
                             c->hybrid_block_size);
    }
    c->hybrid_layer_pattern.assign(n, 0);
    c->parse_notes.push_back("no hybrid_layer_pattern: every layer is full attention");
  }
  if (static_cast<int>(c->hybrid_layer_pattern.size()) != n) {
    return InvalidArgument(
        "config.json: 'hybrid_layer_pattern' has %zu entries, "
        "num_hidden_layers is %d",
        c->hybrid_layer_pattern.size(), n);
  }
  for (int i = 0; i < n; ++i) {
    if (c->hybrid_layer_pattern[i] != 0 && c->hybrid_layer_pattern[i] != 1) {
      return InvalidArgument("config.json: 'hybrid_layer_pattern[%d]' must be 0 or 1, got %d", i,
                             c->hybrid_layer_pattern[i]);
    }
  }

  MIMO_RETURN_IF_ERROR(r.Int("first_k_dense_replace", &c->first_k_dense_replace));
  const json* freq = r.Find("moe_layer_freq");
  if (freq && freq->is_array()) {
    MIMO_RETURN_IF_ERROR(r.IntList("moe_layer_freq", &c->moe_layer_freq));
  } else if (freq) {
    int k = 0;
    MIMO_RETURN_IF_ERROR(r.Int("moe_layer_freq", &k));
    if (k <= 0) return InvalidArgument("config.json: 'moe_layer_freq' must be positive, got %d", k);
    const int first = c->first_k_dense_replace >= 0 ? c->first_k_dense_replace : 1;
    c->moe_layer_freq.assign(n, 0);
    for (int i = first; i < n; ++i) c->moe_layer_freq[i] = (i % k == 0) ? 1 : 0;
    c->parse_notes.push_back("moe_layer_freq INFERRED from int " + std::to_string(k) +
                             ": layer i MoE when i >= " + std::to_string(first) + " and i % " +
                             std::to_string(k) + " == 0");
  } else {
    c->moe_layer_freq.assign(n, 0);
    c->parse_notes.push_back("no moe_layer_freq: every layer is a dense MLP");
  }
  if (static_cast<int>(c->moe_layer_freq.size()) != n) {
    return InvalidArgument(
        "config.json: 'moe_layer_freq' has %zu entries, num_hidden_layers "
        "is %d",
        c->moe_layer_freq.size(), n);
  }
  for (int i = 0; i < n; ++i) {
    if (c->moe_layer_freq[i] != 0 && c->moe_layer_freq[i] != 1) {
      return InvalidArgument("config.json: 'moe_layer_freq[%d]' must be 0 or 1, got %d", i,
                             c->moe_layer_freq[i]);
    }
  }
  return Status::Ok();
}

Status ReadMoe(const FieldReader& r, ModelConfig* c) {
  MIMO_RETURN_IF_ERROR(r.Int("n_routed_experts", &c->n_routed_experts));
  MIMO_RETURN_IF_ERROR(r.Int("num_experts_per_tok", &c->num_experts_per_tok));
  MIMO_RETURN_IF_ERROR(r.Int("n_shared_experts", &c->n_shared_experts));
  MIMO_RETURN_IF_ERROR(r.Int("n_group", &c->n_group));
  MIMO_RETURN_IF_ERROR(r.Int("topk_group", &c->topk_group));
  MIMO_RETURN_IF_ERROR(r.String("scoring_func", &c->scoring_func));
  MIMO_RETURN_IF_ERROR(r.String("topk_method", &c->topk_method));
  MIMO_RETURN_IF_ERROR(r.Bool("norm_topk_prob", &c->norm_topk_prob));
  MIMO_RETURN_IF_ERROR(r.Float("routed_scaling_factor", &c->routed_scaling_factor));
  if (!r.Has("routed_scaling_factor")) c->routed_scaling_factor = 1.0f;
  MIMO_RETURN_IF_ERROR(r.String("moe_router_dtype", &c->moe_router_dtype));
  if (c->moe_router_dtype != "float32" && c->moe_router_dtype != "bfloat16") {
    return Unimplemented(
        "config.json: 'moe_router_dtype' = '%s' is not supported (only 'float32' or "
        "'bfloat16')",
        c->moe_router_dtype.c_str());
  }
  return Status::Ok();
}

Status ReadQuantization(const FieldReader& r, ModelConfig* c) {
  const json* q = r.Find("quantization_config");
  if (!q) return Status::Ok();
  if (!q->is_object()) {
    return InvalidArgument("config.json: field 'quantization_config' must be an object");
  }
  FieldReader qr(*q, "quantization_config");
  std::string method, fmt;
  MIMO_RETURN_IF_ERROR(qr.String("quant_method", &method));
  if (method != "fp8") {
    return Unimplemented(
        "config.json: 'quantization_config.quant_method' = '%s' is not supported "
        "(only 'fp8')",
        method.c_str());
  }
  MIMO_RETURN_IF_ERROR(qr.String("fmt", &fmt));
  if (!fmt.empty() && fmt != "e4m3") {
    return Unimplemented(
        "config.json: 'quantization_config.fmt' = '%s' is not supported "
        "(only 'e4m3')",
        fmt.c_str());
  }
  c->fp8 = true;
  c->weight_block_size = {128, 128};
  MIMO_RETURN_IF_ERROR(qr.IntList("weight_block_size", &c->weight_block_size));
  if (c->weight_block_size.size() != 2 || c->weight_block_size[0] <= 0 ||
      c->weight_block_size[1] <= 0) {
    return InvalidArgument(
        "config.json: 'quantization_config.weight_block_size' must be two "
        "positive integers");
  }
  MIMO_RETURN_IF_ERROR(qr.StringList("ignored_layers", &c->ignored_layers));
  // V2.6: routed experts stored as MXFP4 (uint8 E2M1 pairs + E8M0 weight_scale), the rest FP8.
  std::string store;
  MIMO_RETURN_IF_ERROR(qr.String("store_dtype", &store));
  if (store == "mxfp4") {
    c->mxfp4 = true;
    c->mxfp4_block_size = 32;
    MIMO_RETURN_IF_ERROR(qr.Int("mxfp4_block_size", &c->mxfp4_block_size));
    if (c->mxfp4_block_size != 32) {
      return Unimplemented(
          "config.json: 'quantization_config.mxfp4_block_size' = %d is not supported (only 32, "
          "the OCP MX block)",
          c->mxfp4_block_size);
    }
  } else if (!store.empty() && store != "fp8") {
    return Unimplemented(
        "config.json: 'quantization_config.store_dtype' = '%s' is not supported (only 'fp8' or "
        "'mxfp4')",
        store.c_str());
  }
  return Status::Ok();
}

Status ReadTokens(const FieldReader& r, ModelConfig* c) {
  auto one = [&](const char* key, std::optional<int>* out) -> Status {
    if (!r.Has(key)) return Status::Ok();
    int v = 0;
    MIMO_RETURN_IF_ERROR(r.Int(key, &v));
    *out = v;
    return Status::Ok();
  };
  MIMO_RETURN_IF_ERROR(one("bos_token_id", &c->bos_token_id));
  MIMO_RETURN_IF_ERROR(one("pad_token_id", &c->pad_token_id));
  const json* eos = r.Find("eos_token_id");
  if (eos && eos->is_array()) {
    MIMO_RETURN_IF_ERROR(r.IntList("eos_token_id", &c->eos_token_ids));
    if (!c->eos_token_ids.empty()) c->eos_token_id = c->eos_token_ids[0];
  } else if (eos) {
    MIMO_RETURN_IF_ERROR(one("eos_token_id", &c->eos_token_id));
    c->eos_token_ids = {*c->eos_token_id};
  }
  return Status::Ok();
}

LayerConfig MakeLayer(const ModelConfig& c, AttentionKind kind, FfnKind ffn, double prf) {
  LayerConfig l;
  l.attention = kind;
  l.ffn = ffn;
  const bool swa = kind == AttentionKind::kSlidingWindow;
  l.num_attention_heads = swa ? c.swa_num_attention_heads : c.num_attention_heads;
  l.num_key_value_heads = swa ? c.swa_num_key_value_heads : c.num_key_value_heads;
  l.head_dim = swa ? c.swa_head_dim : c.head_dim;
  l.v_head_dim = swa ? c.swa_v_head_dim : c.v_head_dim;
  l.rotary_dim = static_cast<int>(static_cast<double>(l.head_dim) * prf);  // int() truncates
  l.rope_theta = swa ? c.swa_rope_theta : c.rope_theta;
  l.sliding_window = swa ? c.sliding_window : 0;
  l.has_sinks = swa ? c.add_swa_attention_sink_bias : c.add_full_attention_sink_bias;
  return l;
}

Status ValidateLayerGeometry(const char* kind, const char* heads_field, const char* kv_field,
                             const char* dim_field, const LayerConfig& l) {
  MIMO_RETURN_IF_ERROR(Positive(heads_field, l.num_attention_heads));
  MIMO_RETURN_IF_ERROR(Positive(kv_field, l.num_key_value_heads));
  MIMO_RETURN_IF_ERROR(Positive(dim_field, l.head_dim));
  MIMO_RETURN_IF_ERROR(Positive(
      l.attention == AttentionKind::kFull ? "v_head_dim" : "swa_v_head_dim", l.v_head_dim));
  if (l.num_attention_heads % l.num_key_value_heads != 0) {
    return InvalidArgument("config.json: %s layers: '%s' (%d) is not divisible by '%s' (%d)", kind,
                           heads_field, l.num_attention_heads, kv_field, l.num_key_value_heads);
  }
  if (l.rotary_dim <= 0 || l.rotary_dim % 2 != 0 || l.rotary_dim > l.head_dim) {
    return InvalidArgument(
        "config.json: %s layers: rotary dim int(%s * partial_rotary_factor) = "
        "%d must be even, positive and <= %d",
        kind, dim_field, l.rotary_dim, l.head_dim);
  }
  if (!(l.rope_theta > 0.0f)) {
    return InvalidArgument("config.json: %s layers: '%s' must be positive", kind,
                           l.attention == AttentionKind::kFull ? "rope_theta" : "swa_rope_theta");
  }
  return Status::Ok();
}

Status Validate(const ModelConfig& c, double prf) {
  MIMO_RETURN_IF_ERROR(Positive("vocab_size", c.vocab_size));
  MIMO_RETURN_IF_ERROR(Positive("hidden_size", c.hidden_size));
  MIMO_RETURN_IF_ERROR(Positive("num_hidden_layers", c.num_hidden_layers));
  MIMO_RETURN_IF_ERROR(ValidateRanges(c));
  if (!(prf > 0.0 && prf <= 1.0)) {
    return InvalidArgument("config.json: 'partial_rotary_factor' must be in (0, 1], got %g", prf);
  }
  if (!(c.layernorm_epsilon > 0.0f)) {
    return InvalidArgument("config.json: 'layernorm_epsilon' must be positive");
  }
  if (c.hidden_act != "silu") {
    return Unimplemented("config.json: 'hidden_act' = '%s' is not supported (only 'silu')",
                         c.hidden_act.c_str());
  }
  if (c.attention_bias) {
    return Unimplemented("config.json: 'attention_bias' = true is not supported");
  }
  if (c.num_nextn_predict_layers < 0) {
    return InvalidArgument("config.json: 'num_nextn_predict_layers' must be >= 0");
  }
  bool any_swa = false, any_full = false, any_moe = false, any_dense = false;
  for (const LayerConfig& l : c.layers) {
    (l.attention == AttentionKind::kSlidingWindow ? any_swa : any_full) = true;
    (l.ffn == FfnKind::kMoe ? any_moe : any_dense) = true;
  }
  if (any_full) {
    MIMO_RETURN_IF_ERROR(ValidateLayerGeometry(
        "full-attention", "num_attention_heads", "num_key_value_heads", "head_dim",
        MakeLayer(c, AttentionKind::kFull, FfnKind::kDense, prf)));
  }
  if (any_swa || c.num_nextn_predict_layers > 0) {
    MIMO_RETURN_IF_ERROR(ValidateLayerGeometry("sliding-window", "swa_num_attention_heads",
                                               "swa_num_key_value_heads", "swa_head_dim",
                                               c.mtp_layer));
    if (c.sliding_window <= 0) {
      return InvalidArgument(
          "config.json: 'sliding_window' must be positive when "
          "hybrid_layer_pattern has sliding-window layers, got %d",
          c.sliding_window);
    }
  }
  if (any_dense || c.num_nextn_predict_layers > 0) {
    MIMO_RETURN_IF_ERROR(Positive("intermediate_size", c.intermediate_size));
  }
  if (any_moe) {
    MIMO_RETURN_IF_ERROR(Positive("moe_intermediate_size", c.moe_intermediate_size));
    MIMO_RETURN_IF_ERROR(Positive("n_routed_experts", c.n_routed_experts));
    MIMO_RETURN_IF_ERROR(Positive("num_experts_per_tok", c.num_experts_per_tok));
    MIMO_RETURN_IF_ERROR(Positive("n_group", c.n_group));
    MIMO_RETURN_IF_ERROR(Positive("topk_group", c.topk_group));
    if (c.num_experts_per_tok > c.n_routed_experts) {
      return InvalidArgument(
          "config.json: 'num_experts_per_tok' (%d) exceeds 'n_routed_experts' "
          "(%d)",
          c.num_experts_per_tok, c.n_routed_experts);
    }
    if (c.n_routed_experts % c.n_group != 0) {
      return InvalidArgument(
          "config.json: 'n_routed_experts' (%d) is not divisible by 'n_group' "
          "(%d)",
          c.n_routed_experts, c.n_group);
    }
    if (c.topk_group > c.n_group) {
      return InvalidArgument("config.json: 'topk_group' (%d) exceeds 'n_group' (%d)", c.topk_group,
                             c.n_group);
    }
    if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group)) {
      return InvalidArgument(
          "config.json: 'num_experts_per_tok' (%d) exceeds the experts in "
          "'topk_group' (%d) groups of %d",
          c.num_experts_per_tok, c.topk_group, c.n_routed_experts / c.n_group);
    }
    if (c.scoring_func != "sigmoid") {
      return Unimplemented(
          "config.json: 'scoring_func' = '%s' is not supported (only "
          "'sigmoid')",
          c.scoring_func.c_str());
    }
    if (c.n_shared_experts != 0) {
      return Unimplemented(
          "config.json: 'n_shared_experts' = %d is not supported (MiMo-V2 has "
          "none)",
          c.n_shared_experts);
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("config.json: not valid JSON");
  if (!j.is_object()) return InvalidArgument("config.json: top level is not a JSON object");
  ModelConfig c;
  FieldReader r(j, "");
  try {
    MIMO_RETURN_IF_ERROR(r.StringList("architectures", &c.architectures));
    MIMO_RETURN_IF_ERROR(r.String("model_type", &c.model_type));
    for (const char* key :
         {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"}) {
      MIMO_RETURN_IF_ERROR(r.Required(key));
    }
    MIMO_RETURN_IF_ERROR(r.Int("vocab_size", &c.vocab_size));
    MIMO_RETURN_IF_ERROR(r.Int("hidden_size", &c.hidden_size));
    MIMO_RETURN_IF_ERROR(r.Int("intermediate_size", &c.intermediate_size));
    MIMO_RETURN_IF_ERROR(r.Int("moe_intermediate_size", &c.moe_intermediate_size));
    MIMO_RETURN_IF_ERROR(r.Int("num_hidden_layers", &c.num_hidden_layers));
    MIMO_RETURN_IF_ERROR(r.Int("max_position_embeddings", &c.max_position_embeddings));
    if (c.num_hidden_layers > 100000) {
      return InvalidArgument("config.json: 'num_hidden_layers' (%d) is implausibly large",
                             c.num_hidden_layers);
    }
    MIMO_RETURN_IF_ERROR(ReadAttention(r, &c));
    double prf = 1.0;
    MIMO_RETURN_IF_ERROR(ReadRope(r, &c, &prf));

    if (r.Has("layernorm_epsilon")) {
      MIMO_RETURN_IF_ERROR(r.Float("layernorm_epsilon", &c.layernorm_epsilon));
    } else if (r.Has("rms_norm_eps")) {
      MIMO_RETURN_IF_ERROR(r.Float("rms_norm_eps", &c.layernorm_epsilon));
      c.parse_notes.push_back("layernorm_epsilon absent: using rms_norm_eps");
    } else {
      c.layernorm_epsilon = 1e-5f;
      c.parse_notes.push_back("layernorm_epsilon absent: using 1e-5");
    }
    MIMO_RETURN_IF_ERROR(r.String("hidden_act", &c.hidden_act));
    MIMO_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
    MIMO_RETURN_IF_ERROR(r.Int("num_nextn_predict_layers", &c.num_nextn_predict_layers));
    MIMO_RETURN_IF_ERROR(ReadMoe(r, &c));
    MIMO_RETURN_IF_ERROR(ReadQuantization(r, &c));
    MIMO_RETURN_IF_ERROR(ReadTokens(r, &c));
    if (c.num_hidden_layers > 0) MIMO_RETURN_IF_ERROR(ReadPattern(r, &c));

    c.layers.clear();
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      c.layers.push_back(MakeLayer(
          c, c.hybrid_layer_pattern[i] ? AttentionKind::kSlidingWindow : AttentionKind::kFull,
          c.moe_layer_freq[i] ? FfnKind::kMoe : FfnKind::kDense, prf));
    }
    c.mtp_layer = MakeLayer(c, AttentionKind::kSlidingWindow, FfnKind::kDense, prf);
    MIMO_RETURN_IF_ERROR(Validate(c, prf));
  } catch (const json::exception& e) {
    // FieldReader checks types before every get<>; this is a last line of defence.
    return InvalidArgument("config.json: %s", e.what());
  }
  return c;
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open config file '%s'", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  auto c = ParseModelConfig(ss.str());
  if (!c.ok()) return Status(c.status().code(), path + ": " + c.status().message());
  return c;
}

StatusOr<DFlashRope> ParseDFlashRope(const std::string& s) {
  if (s == "split") return DFlashRope::kSplit;
  if (s == "backbone") return DFlashRope::kBackbone;
  if (s == "draft") return DFlashRope::kDraft;
  return InvalidArgument("unknown DFlash RoPE choice '%s' (expected split, backbone or draft)",
                         s.c_str());
}

const char* DFlashRopeName(DFlashRope r) {
  switch (r) {
    case DFlashRope::kSplit:
      return "split";
    case DFlashRope::kBackbone:
      return "backbone";
    default:
      return "draft";
  }
}

StatusOr<DFlashConfig> ParseDFlashConfig(const std::string& json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("config.json: not valid JSON");
  if (!j.is_object()) return InvalidArgument("config.json: top level is not a JSON object");
  DFlashConfig c;
  FieldReader r(j, "");
  const json empty = json::object();
  const json* dj = r.Find("dflash_config");
  FieldReader d(dj ? *dj : empty, "dflash_config");
  try {
    for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "vocab_size"}) {
      MIMO_RETURN_IF_ERROR(r.Required(key));
    }
    if (!dj) return InvalidArgument("config.json: missing required field 'dflash_config'");
    for (const char* key : {"target_layer_ids", "mask_token_id"}) {
      MIMO_RETURN_IF_ERROR(d.Required(key));
    }
    MIMO_RETURN_IF_ERROR(r.Int("hidden_size", &c.hidden_size));
    MIMO_RETURN_IF_ERROR(r.Int("intermediate_size", &c.intermediate_size));
    MIMO_RETURN_IF_ERROR(r.Int("num_hidden_layers", &c.num_hidden_layers));
    MIMO_RETURN_IF_ERROR(r.Int("num_attention_heads", &c.num_attention_heads));
    c.num_key_value_heads = c.num_attention_heads;
    MIMO_RETURN_IF_ERROR(r.Int("num_key_value_heads", &c.num_key_value_heads));
    if (c.num_attention_heads > 0) c.head_dim = c.hidden_size / c.num_attention_heads;
    MIMO_RETURN_IF_ERROR(r.Int("head_dim", &c.head_dim));
    MIMO_RETURN_IF_ERROR(r.Float("partial_rotary_factor", &c.partial_rotary_factor));
    MIMO_RETURN_IF_ERROR(r.Float("rope_theta", &c.rope_theta));
    MIMO_RETURN_IF_ERROR(r.Float("rms_norm_eps", &c.rms_norm_eps));
    MIMO_RETURN_IF_ERROR(r.Int("block_size", &c.block_size));
    MIMO_RETURN_IF_ERROR(d.Int("block_size", &c.block_size));
    MIMO_RETURN_IF_ERROR(r.Int("num_target_layers", &c.num_target_layers));
    MIMO_RETURN_IF_ERROR(r.Int("vocab_size", &c.vocab_size));
    MIMO_RETURN_IF_ERROR(r.Int("sliding_window", &c.sliding_window));
    MIMO_RETURN_IF_ERROR(d.IntList("target_layer_ids", &c.target_layer_ids));
    MIMO_RETURN_IF_ERROR(d.Int("mask_token_id", &c.mask_token_id));
    MIMO_RETURN_IF_ERROR(d.Bool("use_swa", &c.use_swa));
    MIMO_RETURN_IF_ERROR(d.Int("swa_window_size", &c.sliding_window));
    c.backbone_rotary_base = c.rope_theta;
    MIMO_RETURN_IF_ERROR(d.Float("backbone_rotary_base", &c.backbone_rotary_base));
    MIMO_RETURN_IF_ERROR(d.Float("attention_value_scale", &c.attention_value_scale));
    MIMO_RETURN_IF_ERROR(d.Bool("attention_sink_bias", &c.attention_sink_bias));
  } catch (const json::exception& e) {
    return InvalidArgument("config.json: %s", e.what());
  }
  c.rotary_dim = static_cast<int>(c.head_dim * c.partial_rotary_factor);
  auto bad = [](const char* what, long long v) {
    return InvalidArgument("dflash config.json: %s is %lld", what, v);
  };
  if (c.hidden_size <= 0) return bad("hidden_size", c.hidden_size);
  if (c.intermediate_size <= 0) return bad("intermediate_size", c.intermediate_size);
  if (c.num_hidden_layers <= 0 || c.num_hidden_layers > 1000) {
    return bad("num_hidden_layers", c.num_hidden_layers);
  }
  if (c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0) {
    return InvalidArgument("dflash config.json: %d attention heads cannot share %d kv heads",
                           c.num_attention_heads, c.num_key_value_heads);
  }
  if (c.head_dim <= 0 || c.rotary_dim < 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0) {
    return InvalidArgument("dflash config.json: head_dim %d with rotary dim %d", c.head_dim,
                           c.rotary_dim);
  }
  if (c.block_size < 2 || c.block_size > 64) return bad("block_size", c.block_size);
  if (c.target_layer_ids.empty()) return bad("dflash_config.target_layer_ids count", 0);
  for (size_t i = 0; i < c.target_layer_ids.size(); ++i) {
    if (c.target_layer_ids[i] < 0 ||
        (i > 0 && c.target_layer_ids[i] <= c.target_layer_ids[i - 1])) {
      return InvalidArgument("dflash config.json: target_layer_ids must be ascending and >= 0");
    }
  }
  if (c.mask_token_id < 0 || c.mask_token_id >= c.vocab_size) {
    return bad("dflash_config.mask_token_id", c.mask_token_id);
  }
  if (c.use_swa && c.sliding_window < c.block_size) {
    return InvalidArgument("dflash config.json: window %d is smaller than the block (%d)",
                           c.sliding_window, c.block_size);
  }
  if (!c.use_swa) c.sliding_window = 0;  // every key visible
  return c;
}

StatusOr<DFlashConfig> LoadDFlashConfig(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot open DFlash drafter config '%s'", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  auto c = ParseDFlashConfig(ss.str());
  if (!c.ok()) return Status(c.status().code(), path + ": " + c.status().message());
  return c;
}

Status CheckDFlashMatchesTarget(const DFlashConfig& d, const ModelConfig& t) {
  if (d.hidden_size != t.hidden_size) {
    return InvalidArgument("the DFlash drafter's hidden_size %d differs from the target's %d",
                           d.hidden_size, t.hidden_size);
  }
  if (d.vocab_size != t.vocab_size) {
    return InvalidArgument("the DFlash drafter's vocab_size %d differs from the target's %d",
                           d.vocab_size, t.vocab_size);
  }
  if (d.num_target_layers != 0 && d.num_target_layers != t.num_hidden_layers) {
    return InvalidArgument(
        "the DFlash drafter was trained on a target of %d layers; this target has %d",
        d.num_target_layers, t.num_hidden_layers);
  }
  if (d.target_layer_ids.back() >= t.num_hidden_layers) {
    return InvalidArgument("the DFlash drafter reads target layer %d; the target has %d layers",
                           d.target_layer_ids.back(), t.num_hidden_layers);
  }
  return Status::Ok();
}

}  // namespace mimo
