// The sharding table (model/sharding.h) against expectations written here from the config alone:
// head and row ranges per rank, names classified by structure, per-rank byte totals of the
// shipped nano model that add up to the whole model (each tensor once, or once per rank that
// replicates it), and loading (BindWeights + ForEachWeight) holding exactly the bytes the
// header-only accounting (TpWeightBytesPerRank) gives each rank.
#include "model/sharding.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "io/checkpoint.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace mimo {
namespace {

const std::string kNano = std::string(MIMO_SOURCE_DIR) + "/models/mimo-v2-nano";

ModelConfig SmallConfig() {
  ModelConfig c;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.moe_intermediate_size = 96;
  c.vocab_size = 640;
  c.n_routed_experts = 8;
  c.num_hidden_layers = 2;
  LayerConfig full;
  full.num_attention_heads = 8;
  full.num_key_value_heads = 2;
  full.head_dim = 192;
  full.v_head_dim = 128;
  LayerConfig swa = full;
  swa.num_key_value_heads = 8;
  c.layers = {full, swa};
  c.mtp_layer = swa;
  return c;
}

TensorShard Shard(TensorRole role, int layer, int expert, const ModelConfig& c, TpSlice tp) {
  TensorId id;
  id.role = role;
  id.layer = layer;
  id.expert = expert;
  auto s = ShardOf(id, c, tp);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : TensorShard{};
}

TEST(ShardingTest, HeadsSplitAsTheConfigSays) {
  const ModelConfig c = SmallConfig();
  for (int n : {2, 4, 8}) {
    for (int r = 0; r < n; ++r) {
      const TpSlice tp{r, n, false};
      const TensorShard q = Shard(TensorRole::kQProj, 0, -1, c, tp);
      ASSERT_EQ(q.parts.size(), 1u);
      EXPECT_EQ(q.rows, 8 * 192);
      EXPECT_EQ(q.parts[0].begin, r * (8 / n) * 192);
      EXPECT_EQ(q.parts[0].count, (8 / n) * 192);
      // Layer 0 has 2 kv heads: split for N = 2, one shared by N / 2 ranks beyond.
      const int kv_per_rank = n <= 2 ? 2 / n : 1;
      const int kv_begin = n <= 2 ? r * kv_per_rank : r / (n / 2);
      const TensorShard v = Shard(TensorRole::kVProj, 0, -1, c, tp);
      EXPECT_EQ(v.rows, 2 * 128);
      EXPECT_EQ(v.parts[0].begin, kv_begin * 128);
      EXPECT_EQ(v.parts[0].count, kv_per_rank * 128);
      const TensorShard k = Shard(TensorRole::kKProj, 0, -1, c, tp);
      EXPECT_EQ(k.parts[0].begin, kv_begin * 192);
      // Layer 1 (8 kv heads) splits its kv heads like its query heads.
      const TensorShard k1 = Shard(TensorRole::kKProj, 1, -1, c, tp);
      EXPECT_EQ(k1.parts[0].begin, r * (8 / n) * 192);
      const TensorShard sinks = Shard(TensorRole::kSinks, 1, -1, c, tp);
      EXPECT_EQ(sinks.rows, 8);
      EXPECT_EQ(sinks.parts[0].begin, r * 8 / n);
      EXPECT_EQ(sinks.parts[0].count, 8 / n);
      // Fused q|k|v: the same heads in each section.
      const TensorShard qkv = Shard(TensorRole::kQkvProj, 0, -1, c, tp);
      ASSERT_EQ(qkv.parts.size(), 3u);
      EXPECT_EQ(qkv.rows, 8 * 192 + 2 * 192 + 2 * 128);
      EXPECT_EQ(qkv.parts[0].begin, q.parts[0].begin);
      EXPECT_EQ(qkv.parts[1].begin, 8 * 192 + k.parts[0].begin);
      EXPECT_EQ(qkv.parts[2].begin, 8 * 192 + 2 * 192 + v.parts[0].begin);
    }
  }
  TensorId q{TensorRole::kQProj, 0, -1, -1};
  EXPECT_FALSE(ShardOf(q, c, TpSlice{0, 3, false}).ok());  // 8 query heads do not split 3 ways
}

TEST(ShardingTest, RowsVocabularyAndExperts) {
  const ModelConfig c = SmallConfig();
  struct Case {
    TensorRole role;
    int expert;
    int64_t rows;
  };
  const Case cases[] = {{TensorRole::kOProj, -1, 256},        {TensorRole::kGateProj, -1, 512},
                        {TensorRole::kDownProj, -1, 256},     {TensorRole::kLmHead, -1, 640},
                        {TensorRole::kEhProj, -1, 256},       {TensorRole::kExpertUpProj, 3, 96},
                        {TensorRole::kExpertDownProj, 3, 256}};
  for (const Case& k : cases) {
    for (int n : {2, 3, 4}) {
      int64_t next = 0;
      double fraction = 0;
      for (int r = 0; r < n; ++r) {
        const TensorShard s = Shard(k.role, 1, k.expert, c, TpSlice{r, n, false});
        EXPECT_FALSE(s.whole);
        EXPECT_EQ(s.rows, k.rows);
        EXPECT_EQ(s.parts[0].begin, next);
        next += s.parts[0].count;
        fraction += s.Fraction();
      }
      EXPECT_EQ(next, k.rows);  // every row on exactly one rank
      EXPECT_DOUBLE_EQ(fraction, 1.0);
    }
  }
  for (TensorRole whole : {TensorRole::kEmbedding, TensorRole::kInputNorm, TensorRole::kRouter,
                           TensorRole::kRouterBias, TensorRole::kModelNorm, TensorRole::kUnknown}) {
    EXPECT_TRUE(Shard(whole, 1, -1, c, TpSlice{1, 4, false}).whole);
  }
  // Expert parallelism: 8 experts over 4 ranks, 2 whole experts each; not a row split.
  for (int e = 0; e < 8; ++e) {
    for (int r = 0; r < 4; ++r) {
      const TensorShard s = Shard(TensorRole::kExpertGateProj, 1, e, c, TpSlice{r, 4, true});
      EXPECT_EQ(s.whole, e / 2 == r) << e << " " << r;
      EXPECT_EQ(s.Fraction(), e / 2 == r ? 1.0 : 0.0);
    }
  }
  EXPECT_EQ(HeldExperts(8, TpSlice{3, 4, true}).begin, 6);
  EXPECT_EQ(HeldExperts(8, TpSlice{3, 4, false}).count, 8);
  // Expert parallelism leaves everything else as tensor parallelism splits it.
  EXPECT_EQ(Shard(TensorRole::kOProj, 1, -1, c, TpSlice{1, 4, true}).parts[0].begin, 64);
}

TEST(ShardingTest, NamesClassifyByStructure) {
  ModelConfig c = SmallConfig();
  struct Case {
    const char* name;
    TensorRole role;
    int layer, mtp, expert;
    const char* module;
  };
  const Case cases[] = {
      {"model.embed_tokens.weight", TensorRole::kEmbedding, -1, -1, -1, "model.embed_tokens"},
      {"lm_head.weight", TensorRole::kLmHead, -1, -1, -1, "lm_head"},
      {"model.norm.weight", TensorRole::kModelNorm, -1, -1, -1, "model.norm"},
      {"model.layers.1.self_attn.q_proj.weight_scale_inv", TensorRole::kQProj, 1, -1, -1,
       "model.layers.1.self_attn.q_proj"},
      {"model.layers.0.self_attn.qkv_proj.weight", TensorRole::kQkvProj, 0, -1, -1,
       "model.layers.0.self_attn.qkv_proj"},
      {"model.layers.1.self_attn.attention_sink_bias", TensorRole::kSinks, 1, -1, -1,
       "model.layers.1.self_attn.attention_sink_bias"},
      {"model.layers.1.mlp.gate.weight", TensorRole::kRouter, 1, -1, -1, "model.layers.1.mlp.gate"},
      {"model.layers.1.mlp.gate.e_score_correction_bias", TensorRole::kRouterBias, 1, -1, -1,
       "model.layers.1.mlp.gate.e_score_correction_bias"},
      {"model.layers.0.mlp.gate_proj.weight", TensorRole::kGateProj, 0, -1, -1,
       "model.layers.0.mlp.gate_proj"},
      {"model.layers.1.mlp.experts.17.down_proj.weight_scale", TensorRole::kExpertDownProj, 1, -1,
       17, "model.layers.1.mlp.experts.17.down_proj"},
      {"model.mtp.layers.2.eh_proj.weight", TensorRole::kEhProj, 4, 2, -1,
       "model.mtp.layers.2.eh_proj"},
      {"model.mtp.layers.0.pre_mlp_layernorm.weight", TensorRole::kPreMlpNorm, 2, 0, -1,
       "model.mtp.layers.0.pre_mlp_layernorm"},
      {"model.mtp.layers.0.self_attn.o_proj.weight", TensorRole::kOProj, 2, 0, -1,
       "model.mtp.layers.0.self_attn.o_proj"},
  };
  for (const Case& k : cases) {
    const TensorId id = ClassifyTensor(k.name, c);
    EXPECT_EQ(id.role, k.role) << k.name;
    EXPECT_EQ(id.layer, k.layer) << k.name;
    EXPECT_EQ(id.mtp_layer, k.mtp) << k.name;
    EXPECT_EQ(id.expert, k.expert) << k.name;
    EXPECT_EQ(TensorName(id), k.module) << k.name;
  }
  // MTP-only modules are not names of a main layer; unknown modules stay whole.
  EXPECT_EQ(ClassifyTensor("model.layers.0.eh_proj.weight", c).role, TensorRole::kUnknown);
  EXPECT_EQ(ClassifyTensor("model.layers.0.mlp.shared_experts.gate_proj.weight", c).role,
            TensorRole::kUnknown);
  EXPECT_EQ(ClassifyTensor("model.layers.x.input_layernorm.weight", c).role, TensorRole::kUnknown);
}

// How many ranks hold each byte of a nano tensor, by a rule written here: replicated tensors on
// all N, k/v on N / kv_heads ranks when N exceeds a layer's kv heads, everything else once.
double Copies(const std::string& name, const ModelConfig& c, int n) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("norm") || name == "model.embed_tokens.weight" || has("mlp.gate.")) return n;
  if (has("k_proj") || has("v_proj")) {
    const bool mtp = name.rfind("model.mtp.", 0) == 0;
    const int layer = mtp ? 0 : std::stoi(name.substr(13));
    const int kv = (mtp ? c.mtp_layer : c.layers[layer]).num_key_value_heads;
    return n > kv ? n / kv : 1;
  }
  return 1;
}

TEST(ShardingTest, NanoRanksAddUpToTheWholeModel) {
  auto opened = Checkpoint::Open(kNano);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  const Checkpoint& ck = **opened;
  const ModelConfig& c = ck.config();
  for (int n : {2, 4}) {
    for (bool ep : {false, true}) {
      double want = 0;
      for (const std::string& name : ck.TensorNames()) {
        EXPECT_NE(ClassifyTensor(name, c).role, TensorRole::kUnknown) << name;
        want += Copies(name, c, n) * static_cast<double>(ck.FindTensor(name)->entry->nbytes);
      }
      auto per_rank = TpWeightBytesPerRank(ck, n, ep);
      ASSERT_TRUE(per_rank.ok()) << per_rank.status().message();
      double sum = 0;
      for (double b : *per_rank) sum += b;
      EXPECT_DOUBLE_EQ(sum, want) << n << (ep ? " ep" : "");
    }
  }
}

// Loading and accounting read the same table: the bytes BindWeights binds on each rank (walked by
// ForEachWeight) are the bytes TpWeightBytesPerRank gives that rank, but for the fp32 copies of
// sinks and router biases, which the walk counts 0.
TEST(ShardingTest, LoadedSlicesHoldTheAccountedBytes) {
  auto opened = Checkpoint::Open(kNano);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  Checkpoint& ck = **opened;
  const ModelConfig& c = ck.config();
  for (int n : {2, 4}) {
    for (bool ep : {false, true}) {
      auto per_rank = TpWeightBytesPerRank(ck, n, ep);
      ASSERT_TRUE(per_rank.ok());
      for (int r = 0; r < n; ++r) {
        const TpSlice tp{r, n, ep};
        double copies = 0;  // sinks and score biases this rank holds, as stored
        for (const std::string& name : ck.TensorNames()) {
          const TensorId id = ClassifyTensor(name, c);
          if (id.role != TensorRole::kSinks && id.role != TensorRole::kRouterBias) continue;
          copies += ShardOf(id, c, tp)->Fraction() * ck.FindTensor(name)->entry->nbytes;
        }
        auto w = BindWeights(ck, c, tp);
        ASSERT_TRUE(w.ok()) << w.status().message();
        double bound = 0;
        int experts = 0;
        ForEachWeight(*w, [&](const WeightRef& ref) {
          if (!ref.tied) bound += ref.bytes();
          experts += ref.id.role == TensorRole::kExpertGateProj;
        });
        EXPECT_DOUBLE_EQ(bound + copies, (*per_rank)[r]) << n << " " << r << (ep ? " ep" : "");
        int moe_layers = 0;
        for (const LayerConfig& l : c.layers) moe_layers += l.ffn == FfnKind::kMoe;
        EXPECT_EQ(experts, moe_layers * (ep ? c.n_routed_experts / n : c.n_routed_experts));
      }
    }
  }
}

}  // namespace
}  // namespace mimo
