// The model over the paged KV cache against the float64 PyTorch reference, inside ctest: the
// fixture tests/data/reference_fixture (scripts/make_reference_fixture.py) is a small generated
// checkpoint holding everything a wrong model gets wrong silently (FP8 weights with two scale
// columns, MXFP4 experts with a BF16 router and F32 bias, routed_scaling_factor 2.5, sinks on
// the full and the sliding-window layer, RoPE theta 1e6 / 1e4, value scale 0.612, a 4-key
// window), with the reference's logits for 24 ids. Prefill, decode (one token a step) and 5-token
// chunks must each match every position within rel_tol x max|logit| with the same argmax.
// tests/python/test_reference_fixture.py keeps the committed files equal to what the script and
// the reference produce.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/max_error.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/mimo_v2.h"

namespace mimo {
namespace {

const std::string kDir = std::string(MIMO_SOURCE_DIR) + "/tests/data/reference_fixture";

struct Fixture {
  std::unique_ptr<MimoV2Model> model;
  std::vector<int32_t> ids;
  std::vector<float> want;  // [ids, vocab]
  int64_t vocab = 0;
  double rel_tol = 0;
};

const Fixture& Load() {
  static const Fixture f = [] {
    Fixture x;
    std::ifstream meta(kDir + "/meta.json");
    EXPECT_TRUE(meta.good()) << kDir << "/meta.json missing";
    const nlohmann::json j = nlohmann::json::parse(meta);
    for (int id : j.at("ids")) x.ids.push_back(id);
    x.vocab = j.at("vocab_size").get<int64_t>();
    x.rel_tol = j.at("rel_tol").get<double>();
    std::ifstream bin(kDir + "/reference_logits.f32", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(bin)),
                            std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.size(), x.ids.size() * x.vocab * sizeof(float));
    x.want.resize(bytes.size() / sizeof(float));
    std::memcpy(x.want.data(), bytes.data(), x.want.size() * sizeof(float));
    auto m = MimoV2Model::Load(kDir);
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (m.ok()) x.model = std::move(m).value();
    return x;
  }();
  return f;
}

// Logits [ids, vocab] with `chunk` tokens a step through a fresh paged cache.
std::vector<float> RunFixture(const Fixture& f, int chunk, DType kv_dtype) {
  const int n = static_cast<int>(f.ids.size());
  ThreadPool pool(2);
  ExecContext ctx{&pool};
  PagedKvOptions o;
  o.kv_dtype = kv_dtype;
  o.block_size = 4;
  o.max_sequences = 1;
  o.max_context = n;
  o.max_chunk_tokens = chunk;
  ModelConfig kv_config = f.model->config();
  kv_config.layers = f.model->KvLayerConfigs();
  auto kv = KvCache::Create(kv_config, o);
  EXPECT_TRUE(kv.ok()) << kv.status().message();
  if (!kv.ok()) return {};
  std::vector<float> out(static_cast<size_t>(n) * f.vocab);
  EXPECT_TRUE((*kv)->StartSequence(0).ok());
  for (int t = 0; t < n; t += chunk) {
    const int m = std::min(chunk, n - t);
    StepBatch b;
    b.chunks.push_back({0, 0, m, t});
    b.num_tokens = m;
    const StatusOr<KvStepPlan> plan = (*kv)->PlanStep(b);
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    if (!plan.ok()) return {};
    ForwardOutputs fo;
    fo.logits = out.data() + static_cast<int64_t>(t) * f.vocab;
    f.model->Forward(ctx, *plan, f.ids.data() + t, (*kv)->attention(), fo);
    (*kv)->RecordTokenIds(0, std::span<const int32_t>(f.ids.data() + t, m));
  }
  return out;
}

int64_t Argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

TEST(ReferenceLogits, PrefillDecodeAndChunksMatchTheFloat64Reference) {
  const Fixture& f = Load();
  ASSERT_NE(f.model, nullptr);
  ASSERT_EQ(f.model->config().vocab_size, f.vocab);
  double scale = 0;
  for (float x : f.want) scale = std::max(scale, std::abs(static_cast<double>(x)));
  const double tol = f.rel_tol * scale;
  const int n = static_cast<int>(f.ids.size());
  for (int chunk : {n, 1, 5}) {
    const std::vector<float> got = RunFixture(f, chunk, DType::kF32);
    ASSERT_EQ(got.size(), f.want.size());
    test::MaxError err;
    int argmax_differs = 0;
    for (int t = 0; t < n; ++t) {
      const float* g = got.data() + static_cast<int64_t>(t) * f.vocab;
      const float* w = f.want.data() + static_cast<int64_t>(t) * f.vocab;
      for (int64_t v = 0; v < f.vocab; ++v) err.Add(std::abs(static_cast<double>(g[v]) - w[v]), t);
      argmax_differs += Argmax(g, f.vocab) != Argmax(w, f.vocab);
    }
    std::printf("chunk %d: max |engine - reference| %.3g (tolerance %.3g) at position %lld\n",
                chunk, err.max, tol, static_cast<long long>(err.worst));
    EXPECT_LE(err.max, tol) << "chunk " << chunk << ": " << err;
    EXPECT_EQ(argmax_differs, 0) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace mimo
