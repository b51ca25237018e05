// The sharding table and the row ranges it gives each rank (see sharding.h).
#include "model/sharding.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace mimo {
namespace {

using R = TensorRole;
using A = SplitAxis;
using S = ShardScope;

// The table, in TensorRole order (RuleOf indexes it).
constexpr ShardRule kShardTable[] = {
    {R::kEmbedding, S::kModel, "model.embed_tokens", A::kWhole, 0},
    {R::kModelNorm, S::kModel, "model.norm", A::kWhole, 0},
    {R::kLmHead, S::kModel, "lm_head", A::kVocab, 0},
    {R::kInputNorm, S::kBlock, "input_layernorm", A::kWhole, 0},
    {R::kPostAttentionNorm, S::kBlock, "post_attention_layernorm", A::kWhole, 0},
    {R::kPreMlpNorm, S::kMtp, "pre_mlp_layernorm", A::kWhole, 0},
    {R::kQProj, S::kBlock, "self_attn.q_proj", A::kQueryHeads, 0},
    {R::kKProj, S::kBlock, "self_attn.k_proj", A::kKvHeads, 0},
    {R::kVProj, S::kBlock, "self_attn.v_proj", A::kKvHeads, 2},
    {R::kQkvProj, S::kBlock, "self_attn.qkv_proj", A::kQkvSections, 0},
    {R::kOProj, S::kBlock, "self_attn.o_proj", A::kHidden, 0},
    {R::kSinks, S::kBlock, "self_attn.attention_sink_bias", A::kQueryHeads, 1},
    {R::kGateProj, S::kBlock, "mlp.gate_proj", A::kIntermediate, 0},
    {R::kUpProj, S::kBlock, "mlp.up_proj", A::kIntermediate, 0},
    {R::kDownProj, S::kBlock, "mlp.down_proj", A::kHidden, 0},
    {R::kRouter, S::kBlock, "mlp.gate", A::kWhole, 0},
    {R::kRouterBias, S::kBlock, "mlp.gate.e_score_correction_bias", A::kWhole, 0},
    {R::kExpertGateProj, S::kExpert, "gate_proj", A::kIntermediate, 0},
    {R::kExpertUpProj, S::kExpert, "up_proj", A::kIntermediate, 0},
    {R::kExpertDownProj, S::kExpert, "down_proj", A::kHidden, 0},
    {R::kEnorm, S::kMtp, "enorm", A::kWhole, 0},
    {R::kHnorm, S::kMtp, "hnorm", A::kWhole, 0},
    {R::kEhProj, S::kMtp, "eh_proj", A::kHidden, 0},
    {R::kFinalNorm, S::kMtp, "final_layernorm", A::kWhole, 0},
    {R::kUnknown, S::kModel, "", A::kWhole, 0},
};
static_assert(sizeof(kShardTable) / sizeof(kShardTable[0]) == static_cast<size_t>(R::kCount),
              "one rule per TensorRole");

constexpr bool TableInRoleOrder() {
  for (size_t i = 0; i < sizeof(kShardTable) / sizeof(kShardTable[0]); ++i) {
    if (static_cast<size_t>(kShardTable[i].role) != i) return false;
  }
  return true;
}
static_assert(TableInRoleOrder(), "kShardTable is indexed by TensorRole");

// "<prefix><digits>." at the start of s: the number, and s advanced past the dot; -1 otherwise.
int TakeIndex(const char* prefix, std::string* s) {
  const size_t k = std::strlen(prefix);
  if (s->compare(0, k, prefix) != 0) return -1;
  size_t i = k;
  while (i < s->size() && (*s)[i] >= '0' && (*s)[i] <= '9') ++i;
  if (i == k || i >= s->size() || (*s)[i] != '.') return -1;
  const int n = std::atoi(s->c_str() + k);
  s->erase(0, i + 1);
  return n;
}

// The rule of `scope` (kBlock also admits kMtp rules when mtp) whose module is `rest` or a prefix
// of it up to a dot; the longest such module wins ("mlp.gate.e_score_correction_bias" over
// "mlp.gate").
TensorRole MatchModule(const std::string& rest, S scope, bool mtp) {
  TensorRole best = R::kUnknown;
  size_t best_len = 0;
  for (const ShardRule& r : kShardTable) {
    if (r.role == R::kUnknown) continue;
    if (r.scope != scope && !(scope == S::kBlock && mtp && r.scope == S::kMtp)) continue;
    const size_t k = std::strlen(r.module);
    const bool match = rest.compare(0, k, r.module) == 0 && (rest.size() == k || rest[k] == '.');
    if (match && k > best_len) {
      best = r.role;
      best_len = k;
    }
  }
  return best;
}

int RowsPerHead(const ShardRule& r, const LayerConfig& l) {
  return r.rows_per_head == 1 ? 1 : r.rows_per_head == 2 ? l.v_head_dim : l.head_dim;
}

TensorShard RowsShard(int64_t rows, const TpSlice& tp) {
  TensorShard s;
  s.whole = false;
  s.rows = rows;
  s.parts.push_back(EvenSplit(rows, tp.rank, tp.size));
  return s;
}

}  // namespace

RowRange EvenSplit(int64_t n, int rank, int size) {
  const int64_t chunk = (n + size - 1) / size;
  const int64_t begin = std::min<int64_t>(n, chunk * rank);
  return {begin, std::min<int64_t>(n, begin + chunk) - begin};
}

StatusOr<HeadSlice> SliceHeads(const LayerConfig& l, int rank, int size) {
  const int nh = l.num_attention_heads, nkv = l.num_key_value_heads;
  if (nh % size != 0 || (nkv % size != 0 && size % nkv != 0)) {
    return InvalidArgument(
        "--tensor-parallel-size %d does not split a layer with %d query / %d kv heads (N must "
        "divide the query heads, and N and the kv heads must divide one another)",
        size, nh, nkv);
  }
  HeadSlice s;
  const int group = nh / nkv;  // query heads per kv head
  s.num_q = nh / size;
  s.q_begin = rank * s.num_q;
  s.kv_begin = s.q_begin / group;
  s.num_kv = (s.q_begin + s.num_q - 1) / group + 1 - s.kv_begin;
  return s;
}

const ShardRule& RuleOf(TensorRole role) { return kShardTable[static_cast<size_t>(role)]; }

bool IsRoutedExpert(TensorRole role) { return RuleOf(role).scope == S::kExpert; }

bool IsDenseProjection(TensorRole role) {
  switch (role) {
    case TensorRole::kQProj:
    case TensorRole::kKProj:
    case TensorRole::kVProj:
    case TensorRole::kQkvProj:
    case TensorRole::kOProj:
    case TensorRole::kGateProj:
    case TensorRole::kUpProj:
    case TensorRole::kDownProj:
    case TensorRole::kEhProj:
      return true;
    default:
      return false;
  }
}

TensorId ClassifyTensor(const std::string& name, const ModelConfig& cfg) {
  TensorId id;
  std::string rest = name;
  int n = TakeIndex("model.layers.", &rest);
  if (n >= 0) {
    id.layer = n;
  } else if ((n = TakeIndex("model.mtp.layers.", &rest)) >= 0) {
    id.mtp_layer = n;
    id.layer = cfg.num_hidden_layers + n;
  } else {
    id.role = MatchModule(rest, S::kModel, false);
    return id;
  }
  id.expert = TakeIndex("mlp.experts.", &rest);
  id.role = id.expert >= 0 ? MatchModule(rest, S::kExpert, false)
                           : MatchModule(rest, S::kBlock, id.mtp_layer >= 0);
  return id;
}

std::string TensorName(const TensorId& id) {
  const ShardRule& r = RuleOf(id.role);
  if (r.scope == S::kModel) return r.module;
  std::string p = id.mtp_layer >= 0 ? "model.mtp.layers." + std::to_string(id.mtp_layer) + "."
                                    : "model.layers." + std::to_string(id.layer) + ".";
  if (id.expert >= 0) p += "mlp.experts." + std::to_string(id.expert) + ".";
  return p + r.module;
}

const LayerConfig* LayerOf(const ModelConfig& cfg, const TensorId& id) {
  if (id.mtp_layer >= 0) return &cfg.mtp_layer;
  if (id.layer >= 0 && id.layer < static_cast<int>(cfg.layers.size())) return &cfg.layers[id.layer];
  return nullptr;
}

double TensorShard::Fraction() const {
  if (whole) return 1.0;
  if (parts.empty()) return 0.0;
  int64_t held = 0;
  for (const RowRange& p : parts) held += p.count;
  return static_cast<double>(held) / static_cast<double>(rows);
}

RowRange HeldExperts(int64_t num_experts, const TpSlice& tp) {
  return tp.expert_parallel ? EvenSplit(num_experts, tp.rank, tp.size) : RowRange{0, num_experts};
}

StatusOr<TensorShard> ShardOf(const TensorId& id, const ModelConfig& cfg, const TpSlice& tp) {
  const ShardRule& r = RuleOf(id.role);
  if (!tp.active()) return TensorShard{};
  if (IsRoutedExpert(id.role) && tp.expert_parallel) {
    const RowRange mine = HeldExperts(cfg.n_routed_experts, tp);
    TensorShard s;
    s.whole = id.expert >= mine.begin && id.expert < mine.begin + mine.count;
    return s;  // whole, or (not whole, no parts) none of it
  }
  switch (r.axis) {
    case A::kWhole:
      return TensorShard{};
    case A::kHidden:
      return RowsShard(cfg.hidden_size, tp);
    case A::kIntermediate:
      return RowsShard(IsRoutedExpert(id.role) ? cfg.moe_intermediate_size : cfg.intermediate_size,
                       tp);
    case A::kVocab:
      return RowsShard(cfg.vocab_size, tp);
    default:
      break;
  }
  const LayerConfig* l = LayerOf(cfg, id);
  if (l == nullptr) return TensorShard{};  // heads of no known layer: left whole
  MIMO_ASSIGN_OR_RETURN(HeadSlice hs, SliceHeads(*l, tp.rank, tp.size));
  TensorShard s;
  s.whole = false;
  if (r.axis == A::kQkvSections) {
    const int64_t q = int64_t{l->num_attention_heads} * l->head_dim;
    const int64_t k = int64_t{l->num_key_value_heads} * l->head_dim;
    const int64_t v = int64_t{l->num_key_value_heads} * l->v_head_dim;
    s.rows = q + k + v;
    s.parts = {{int64_t{hs.q_begin} * l->head_dim, int64_t{hs.num_q} * l->head_dim},
               {q + int64_t{hs.kv_begin} * l->head_dim, int64_t{hs.num_kv} * l->head_dim},
               {q + k + int64_t{hs.kv_begin} * l->v_head_dim, int64_t{hs.num_kv} * l->v_head_dim}};
    return s;
  }
  const int64_t unit = RowsPerHead(r, *l);
  const bool query = r.axis == A::kQueryHeads;
  s.rows = unit * (query ? l->num_attention_heads : l->num_key_value_heads);
  s.parts = {query ? RowRange{hs.q_begin * unit, hs.num_q * unit}
                   : RowRange{hs.kv_begin * unit, hs.num_kv * unit}};
  return s;
}

}  // namespace mimo
