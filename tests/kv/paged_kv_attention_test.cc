// KvCache + PagedKvAttention end to end at the attention level: several sequences with chunked
// prefill and decode against a brute-force oracle written from the spec (§2.3) over each
// sequence's full K/V history; prefix-cache reuse equal to recomputation across the SWA window
// edge; bounded SWA blocks; backend selection errors and warnings through the factory; what
// PlanStep refuses (it never starts, frees or rewinds a sequence itself).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "core/max_error.h"
#include "kv/kv_cache.h"

namespace mimo {
namespace {

LayerConfig Layer(bool swa, int nh, int nkv, int dk, int dv, int window, bool sinks) {
  LayerConfig l;
  l.attention = swa ? AttentionKind::kSlidingWindow : AttentionKind::kFull;
  l.num_attention_heads = nh;
  l.num_key_value_heads = nkv;
  l.head_dim = dk;
  l.v_head_dim = dv;
  l.sliding_window = swa ? window : 0;
  l.has_sinks = sinks;
  return l;
}

// A MiMo-shaped miniature: full layer (4 heads, 2 kv, K 192 / V 128), SWA layer (4 heads,
// 4 kv, window 20, sinks).
ModelConfig MiniConfig() {
  ModelConfig c;
  c.layers = {Layer(false, 4, 2, 192, 128, 0, false), Layer(true, 4, 4, 192, 128, 20, true)};
  c.num_hidden_layers = 2;
  return c;
}

AttentionGeometry Geometry(const LayerConfig& l) {
  return {l.num_attention_heads,
          l.num_key_value_heads,
          l.head_dim,
          l.v_head_dim,
          l.sliding_window,
          1.0f / std::sqrt(static_cast<float>(l.head_dim))};
}

// Deterministic pseudo-random rows: value = f(key, index).
float Val(uint64_t key, int64_t i) {
  uint64_t z = key * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
  z ^= z >> 29;
  return static_cast<float>(static_cast<int64_t>(z % 2001) - 1000) / 500.0f;
}

// K/V/Q of a token depend on its whole prefix (as in a real model): key = chain hash.
struct SeqTokens {
  std::vector<uint64_t> prefix_key;  // [pos]
};
uint64_t Chain(uint64_t parent, int32_t token) { return parent * 1000003ull + token + 17; }

struct History {                         // contiguous K/V per layer for the oracle
  std::vector<std::vector<float>> k, v;  // [layer][pos * nkv * d]
};

// Brute force over the contiguous history, from the spec.
void Oracle(const LayerConfig& l, const float* q, int pos, const std::vector<float>& K,
            const std::vector<float>& V, const float* sinks, double* out) {
  const int nh = l.num_attention_heads, nkv = l.num_key_value_heads;
  for (int h = 0; h < nh; ++h) {
    const int kvh = h / (nh / nkv);
    std::vector<double> s;
    std::vector<int> js;
    for (int j = 0; j <= pos; ++j) {
      if (l.sliding_window > 0 && pos - j >= l.sliding_window) continue;
      double dot = 0;
      for (int d = 0; d < l.head_dim; ++d)
        dot += double{q[h * l.head_dim + d]} * K[(int64_t{j} * nkv + kvh) * l.head_dim + d];
      s.push_back(dot / std::sqrt(double{1.0} * l.head_dim));
      js.push_back(j);
    }
    double m = -1e300;
    for (double x : s) m = std::max(m, x);
    if (sinks) m = std::max(m, double{sinks[h]});
    double den = sinks ? std::exp(sinks[h] - m) : 0;
    for (double x : s) den += std::exp(x - m);
    for (int d = 0; d < l.v_head_dim; ++d) out[h * l.v_head_dim + d] = 0;
    for (size_t t = 0; t < js.size(); ++t) {
      double w = std::exp(s[t] - m) / den;
      for (int d = 0; d < l.v_head_dim; ++d)
        out[h * l.v_head_dim + d] += w * V[(int64_t{js[t]} * nkv + kvh) * l.v_head_dim + d];
    }
  }
}

// Drives a KvCache through steps as its callers do (sequences started and rewound explicitly,
// then each step planned); keeps per-sequence token keys and the oracle history.
class Driver {
 public:
  Driver(const ModelConfig& c, KvCache* cache) : c_(c), cache_(cache) {
    for (const LayerConfig& l : c.layers) {
      std::vector<float> s(l.num_attention_heads);
      for (int h = 0; h < l.num_attention_heads; ++h) s[h] = Val(77, h) * 2;
      sinks_.push_back(s);
    }
  }
  // Appends tokens to a sequence (its prompt or generated tokens).
  void AddTokens(int seq, const std::vector<int32_t>& t) {
    auto& keys = tokens_[seq].prefix_key;
    for (int32_t x : t) keys.push_back(Chain(keys.empty() ? 1 : keys.back(), x));
  }
  // One step: chunks (seq, start, n). Returns out per layer, [T, nh, dv], and checks the oracle
  // when `check`.
  std::vector<std::vector<float>> Step(const std::vector<SequenceChunk>& chunks, bool check,
                                       test::MaxError* max_err) {
    StepBatch b;
    b.chunks = chunks;
    int T = 0;
    for (auto& ch : b.chunks) {
      ch.token_begin = T;
      T += ch.num_tokens;
    }
    b.num_tokens = T;
    for (const auto& ch : b.chunks) {
      if (!cache_->HasSequence(ch.seq_id)) {
        EXPECT_TRUE(cache_->StartSequence(ch.seq_id).ok());
      } else if (ch.start_pos < cache_->num_tokens(ch.seq_id)) {  // re-run the tail
        EXPECT_TRUE(cache_->Rewind(ch.seq_id, ch.start_pos).ok());
      }
    }
    StatusOr<KvStepPlan> plan = cache_->PlanStep(b);
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    if (!plan.ok()) return {};
    ThreadPool pool(2);
    ExecContext ctx{&pool};
    std::vector<std::vector<float>> outs;
    for (int li = 0; li < static_cast<int>(c_.layers.size()); ++li) {
      const LayerConfig& l = c_.layers[li];
      const int nh = l.num_attention_heads, nkv = l.num_key_value_heads;
      std::vector<float> q(size_t{1} * T * nh * l.head_dim), k(size_t{1} * T * nkv * l.head_dim),
          v(size_t{1} * T * nkv * l.v_head_dim), out(size_t{1} * T * nh * l.v_head_dim);
      for (const auto& ch : b.chunks) {
        for (int i = 0; i < ch.num_tokens; ++i) {
          const uint64_t key = tokens_[ch.seq_id].prefix_key.at(ch.start_pos + i) * 7 + li;
          const int row = ch.token_begin + i;
          for (int e = 0; e < nh * l.head_dim; ++e)
            q[size_t{1} * row * nh * l.head_dim + e] = Val(key, e);
          for (int e = 0; e < nkv * l.head_dim; ++e)
            k[size_t{1} * row * nkv * l.head_dim + e] = Val(key + 1, e);
          for (int e = 0; e < nkv * l.v_head_dim; ++e)
            v[size_t{1} * row * nkv * l.v_head_dim + e] = Val(key + 2, e);
        }
      }
      cache_->attention().Forward(ctx, *plan, li, Geometry(l), q.data(), k.data(), v.data(),
                                  l.has_sinks ? sinks_[li].data() : nullptr, out.data());
      if (check) {
        for (const auto& ch : b.chunks) {
          auto& hist = hist_[ch.seq_id];
          hist.k.resize(c_.layers.size());
          hist.v.resize(c_.layers.size());
          auto& K = hist.k[li];
          auto& V = hist.v[li];
          K.resize(size_t{1} * ch.start_pos * nkv * l.head_dim);  // rewinds drop the tail
          V.resize(size_t{1} * ch.start_pos * nkv * l.v_head_dim);
          const int row0 = ch.token_begin;
          K.insert(K.end(), k.begin() + size_t{1} * row0 * nkv * l.head_dim,
                   k.begin() + size_t{1} * (row0 + ch.num_tokens) * nkv * l.head_dim);
          V.insert(V.end(), v.begin() + size_t{1} * row0 * nkv * l.v_head_dim,
                   v.begin() + size_t{1} * (row0 + ch.num_tokens) * nkv * l.v_head_dim);
          std::vector<double> want(size_t{1} * nh * l.v_head_dim);
          for (int i = 0; i < ch.num_tokens; ++i) {
            const int row = row0 + i;
            Oracle(l, &q[size_t{1} * row * nh * l.head_dim], ch.start_pos + i, K, V,
                   l.has_sinks ? sinks_[li].data() : nullptr, want.data());
            for (size_t e = 0; e < want.size(); ++e) {
              const size_t at = size_t{1} * row * nh * l.v_head_dim + e;
              max_err->Add(want[e], out[at], static_cast<int64_t>(at));  // NaN fails
            }
          }
        }
      }
      outs.push_back(std::move(out));
    }
    return outs;
  }

 private:
  const ModelConfig& c_;
  KvCache* cache_;
  std::vector<std::vector<float>> sinks_;
  std::map<int, SeqTokens> tokens_;
  std::map<int, History> hist_;
};

std::vector<int32_t> Toks(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 131 + salt * 7) % 5000;
  return t;
}

class PagedTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PagedTest, SeveralSequencesMatchOracle) {
  auto [backend, bs] = GetParam();
  ModelConfig c = MiniConfig();
  PagedKvOptions o;
  o.attention_backend = backend;
  o.strict_backend = true;
  o.block_size = bs;
  o.max_sequences = 3;
  o.max_context = 200;
  o.max_chunk_tokens = 64;
  auto attn = KvCache::Create(c, o);
  ASSERT_TRUE(attn.ok()) << attn.status().message();
  Driver d(c, attn->get());
  d.AddTokens(1, Toks(120, 1));
  d.AddTokens(2, Toks(120, 2));
  d.AddTokens(3, Toks(120, 3));
  test::MaxError err;
  // Interleaved chunked prefill and decode, start_pos > 0, several sequences per step.
  d.Step({{1, 0, 37, 0}}, true, &err);
  d.Step({{2, 0, 50, 0}, {1, 0, 1, 37}}, true, &err);
  d.Step({{1, 0, 1, 38}, {3, 0, 5, 0}, {2, 0, 20, 50}}, true, &err);
  for (int s = 0; s < 30; ++s) d.Step({{1, 0, 1, 39 + s}, {2, 0, 1, 70 + s}}, true, &err);
  d.Step({{3, 0, 64, 5}}, true, &err);
  // Speculative-style rewind: sequence 1 re-runs its last 2 positions with the same tokens.
  d.Step({{1, 0, 3, 67}}, true, &err);
  EXPECT_LT(err.max, 2e-5) << err;
  // SWA blocks held per sequence stay within window + chunk + one block.
  const KvCacheManager& m = (*attn)->manager();
  EXPECT_LE(m.group(1).NumOwnedBlocks(2), (20 - 1 + 1 + bs - 1) / bs + 1);
}

TEST_P(PagedTest, QuantizedKvStaysClose) {
  auto [backend, bs] = GetParam();
  ModelConfig c = MiniConfig();
  for (DType t : {DType::kBF16, DType::kF8E4M3}) {
    PagedKvOptions o;
    o.attention_backend = backend;
    o.block_size = bs;
    o.kv_dtype = t;
    o.max_context = 128;
    o.max_chunk_tokens = 64;
    auto attn = KvCache::Create(c, o);
    ASSERT_TRUE(attn.ok());
    Driver d(c, attn->get());
    d.AddTokens(1, Toks(80, 4));
    test::MaxError err;
    d.Step({{1, 0, 60, 0}}, true, &err);
    d.Step({{1, 0, 1, 60}}, true, &err);
    // Documented tolerances (docs/PERFORMANCE.md): |out| is O(1) here.
    EXPECT_LT(err.max, t == DType::kBF16 ? 0.02 : 0.15) << KvDTypeName(t) << ": " << err;
    EXPECT_GT(err.max, 1e-6) << "quantization must show";
  }
}

// Prefix caching: a sequence served from cached blocks gives exactly the outputs of a fresh
// computation, including SWA queries whose window reaches into the cached blocks.
TEST_P(PagedTest, PrefixCacheEqualsRecompute) {
  auto [backend, bs] = GetParam();
  ModelConfig c = MiniConfig();
  PagedKvOptions o;
  o.attention_backend = backend;
  o.block_size = bs;
  o.max_sequences = 2;
  o.max_context = 256;
  o.max_chunk_tokens = 64;
  auto cached = KvCache::Create(c, o);
  o.enable_prefix_caching = false;
  auto fresh = KvCache::Create(c, o);
  ASSERT_TRUE(cached.ok() && fresh.ok());
  auto a = Toks(140, 5);
  auto b = a;
  b.resize(130);
  auto tail = Toks(40, 6);
  b.insert(b.end(), tail.begin(), tail.end());  // shares 130 tokens with a
  Driver dc(c, cached->get()), df(c, fresh->get());
  test::MaxError err;
  // Sequence 10: prompt a in chunks, ids recorded, then freed.
  dc.AddTokens(10, a);
  for (int p = 0; p < 140; p += 64) {
    int n = std::min(64, 140 - p);
    dc.Step({{10, 0, n, p}}, false, &err);
    (*cached)->RecordTokenIds(10, std::span<const int32_t>(a).subspan(p, n));
  }
  (*cached)->FreeSequence(10);
  // Sequence 11 on prompt b starts from the cache.
  auto hit = (*cached)->AttachCachedPrefix(11, b);
  ASSERT_TRUE(hit.ok());
  const int P = *hit;
  EXPECT_EQ(P, 128 / bs * bs);  // largest full block inside the 130 shared tokens
  ASSERT_GT(P, 20);             // the SWA window of the first query lies in cached blocks
  dc.AddTokens(11, b);
  df.AddTokens(11, b);
  // Fresh: whole prompt from 0. Cached: from P.
  std::vector<std::vector<float>> fresh_out(2), cached_out(2);
  for (int p = 0; p < 170; p += 50) {
    auto o2 = df.Step({{11, 0, std::min(50, 170 - p), p}}, true, &err);
    for (int l = 0; l < 2; ++l) fresh_out[l].insert(fresh_out[l].end(), o2[l].begin(), o2[l].end());
  }
  for (int p = P; p < 170; p += 17) {
    auto o2 = dc.Step({{11, 0, std::min(17, 170 - p), p}}, false, &err);
    for (int l = 0; l < 2; ++l)
      cached_out[l].insert(cached_out[l].end(), o2[l].begin(), o2[l].end());
  }
  EXPECT_LT(err.max, 2e-5) << err;
  for (int l = 0; l < 2; ++l) {
    const int row = 4 * 128;  // nh * v_head_dim
    ASSERT_EQ(cached_out[l].size(), size_t{1} * (170 - P) * row);
    for (size_t e = 0; e < cached_out[l].size(); ++e) {
      ASSERT_EQ(cached_out[l][e], fresh_out[l][size_t{1} * P * row + e])
          << "layer " << l << " pos " << P + e / row;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PagedTest,
                         ::testing::Combine(::testing::Values("reference", "cpu_paged"),
                                            ::testing::Values(16, 64)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_bs" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(PagedKvAttention, FactoryErrorsAndChoices) {
  ModelConfig c = MiniConfig();
  PagedKvOptions o;
  o.attention_backend = "no_such_backend";
  auto bad = KvCache::Create(c, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no_such_backend"), std::string::npos);
  o.attention_backend = "";
  auto layers = ResolveLayerBackends(c, o);
  ASSERT_TRUE(layers.ok());
  ASSERT_EQ(layers->size(), 2u);
  EXPECT_STREQ((*layers)[0].backend->name(), "cpu_paged");
  EXPECT_EQ((*layers)[1].kind, AttentionKind::kSlidingWindow);
  EXPECT_TRUE(ParseKvCacheDType("bf16").ok());
  EXPECT_FALSE(ParseKvCacheDType("int4").ok());
  // Explicit incapable backend through a registry with a symmetric-only backend.
  struct Sym final : AttentionBackend {
    AttentionCapabilities caps;
    Sym() {
      caps.kv_dtypes = {DType::kF32};
      caps.multi_token_queries = true;
    }
    const char* name() const override { return "sym"; }
    const AttentionCapabilities& capabilities() const override { return caps; }
    void Run(ExecContext&, const AttentionGeometry&, const PagedKvView&, const AttentionBatch&,
             const float*, const float*, float*) const override {}
  };
  AttentionBackendRegistry reg;
  reg.Register(std::make_unique<Sym>(), 50);
  reg.Register(MakeCpuPagedAttentionBackend(), 10);
  o.registry = &reg;
  o.attention_backend = "sym";
  auto fb = ResolveLayerBackends(c, o);
  ASSERT_TRUE(fb.ok());
  EXPECT_STREQ((*fb)[0].backend->name(), "cpu_paged");
  EXPECT_FALSE((*fb)[0].warning.empty());
  o.strict_backend = true;
  auto strict = KvCache::Create(c, o);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("layer 0"), std::string::npos);
}

TEST(KvCache, PlanStepReportsNoRoomAndBadChunks) {
  ModelConfig c = MiniConfig();
  PagedKvOptions o;
  o.block_size = 16;
  o.max_context = 32;  // 2 full blocks for 1 sequence
  o.max_chunk_tokens = 32;
  auto a = KvCache::Create(c, o);
  ASSERT_TRUE(a.ok());
  KvCache& kv = **a;
  ASSERT_TRUE(kv.StartSequence(1).ok());
  EXPECT_EQ(kv.StartSequence(1).code(), StatusCode::kInvalidArgument);  // already there
  StepBatch ok{{{1, 0, 32, 0}}, 32};
  EXPECT_TRUE(kv.PlanStep(ok).ok());
  EXPECT_EQ(kv.num_tokens(1), 32);
  ASSERT_TRUE(kv.StartSequence(2).ok());
  StepBatch full{{{2, 0, 16, 0}}, 16};
  Status st = kv.PlanStep(full).status();
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.message();
  EXPECT_EQ(kv.num_tokens(2), 0);
  StepBatch gap{{{1, 0, 1, 40}}, 1};
  EXPECT_EQ(kv.PlanStep(gap).status().code(), StatusCode::kInvalidArgument);
  StepBatch unknown{{{9, 0, 1, 0}}, 1};  // never started: not created implicitly
  EXPECT_EQ(kv.PlanStep(unknown).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(kv.HasSequence(9));
  StepBatch dup{{{1, 0, 1, 32}, {1, 1, 1, 33}}, 2};
  EXPECT_EQ(kv.PlanStep(dup).status().code(), StatusCode::kInvalidArgument);
  // A chunk behind the computed tokens is refused, not a hidden rewind or restart.
  StepBatch behind{{{1, 0, 2, 30}}, 2};
  EXPECT_EQ(kv.PlanStep(behind).status().code(), StatusCode::kInvalidArgument);
  StepBatch restart{{{1, 0, 4, 0}}, 4};
  EXPECT_EQ(kv.PlanStep(restart).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.num_tokens(1), 32);
  // Rewound by its owner, the same chunk is planned, at the slots it had.
  ASSERT_TRUE(kv.Rewind(1, 30).ok());
  auto again = kv.PlanStep(behind);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(kv.num_tokens(1), 32);
  ASSERT_EQ(again->groups.size(), 2u);
  const KvGroupStep& g0 = again->groups[0];
  ASSERT_EQ(g0.slots.size(), 2u);
  ASSERT_EQ(g0.attention.seqs.size(), 1u);
  const AttentionSequence& s = g0.attention.seqs[0];
  EXPECT_EQ(s.start_pos, 30);
  ASSERT_EQ(s.num_table_blocks, 2);
  const int32_t* table = g0.attention.table(s);
  EXPECT_EQ(g0.slots[0], int64_t{table[1]} * 16 + 14);  // position 30: block 1, offset 14
  EXPECT_EQ(g0.slots[1], int64_t{table[1]} * 16 + 15);
  kv.FreeSequence(1);
  EXPECT_FALSE(kv.HasSequence(1));
  EXPECT_TRUE(kv.PlanStep(full).ok());  // its blocks went back to the pool
}

}  // namespace
}  // namespace mimo
