// Every registered backend against a brute-force attention written here from the spec
// (mimo-v2-architecture.md §2.3): scores q.k / sqrt(head_dim), GQA h -> h / (nh / nkv), causal,
// window of W keys including the current one, sink logit in the denominator only.
// The paged cache is built by this test with its own index math and a shuffled block table;
// block-table entries that no query may read point at a block full of NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "attention/registry.h"
#include "core/dtype.h"
#include "core/max_error.h"

namespace mimo {
namespace {

struct SeqSpec {
  int start_pos;
  int num_queries;
};

struct Case {
  int num_heads, num_kv_heads, head_dim, v_head_dim, window;
  bool sinks;
  std::vector<SeqSpec> seqs;
};

// Quantize-dequantize as the cache stores values (test-side encoding, core conversions).
float RoundTrip(float x, DType t, float scale) {
  switch (t) {
    case DType::kBF16:
      return BF16ToF32(F32ToBF16(x));
    case DType::kF8E4M3:
      return F8E4M3ToF32(F32ToF8E4M3(x / scale)) * scale;
    default:
      return x;
  }
}

struct Problem {
  Case c;
  int block_size;
  DType dtype;
  // Per sequence, contiguous keys/values: [ctx, nkv, d].
  std::vector<std::vector<float>> k, v;
  std::vector<float> q;                 // [T, nh, dk]
  std::vector<float> sinks;             // [nh]
  std::vector<float> k_scale, v_scale;  // [nkv]
  // Paged cache.
  std::vector<uint8_t> k_pool, v_pool;
  std::vector<std::vector<int32_t>> tables;
  PagedKvView view;
  AttentionBatch batch;
  AttentionGeometry geom;
};

template <typename T>
void Put(std::vector<uint8_t>& pool, int64_t index, T value) {
  std::memcpy(pool.data() + index * sizeof(T), &value, sizeof(T));
}

void StoreElement(std::vector<uint8_t>& pool, DType t, int64_t index, float x, float scale) {
  switch (t) {
    case DType::kF32:
      Put<float>(pool, index, x);
      break;
    case DType::kBF16:
      Put<uint16_t>(pool, index, F32ToBF16(x));
      break;
    case DType::kF8E4M3:
      Put<uint8_t>(pool, index, F32ToF8E4M3(x / scale));
      break;
    default:
      FAIL();
  }
}

void BuildProblem(const Case& c, int bs, DType dtype, uint32_t seed, Problem* P) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  P->c = c;
  P->block_size = bs;
  P->dtype = dtype;
  int T = 0;
  for (auto& s : c.seqs) T += s.num_queries;
  P->q.resize(static_cast<size_t>(T) * c.num_heads * c.head_dim);
  for (float& x : P->q) x = nd(rng);
  P->sinks.resize(c.num_heads);
  for (float& x : P->sinks) x = nd(rng) * 2.0f;
  P->k_scale.resize(c.num_kv_heads);
  P->v_scale.resize(c.num_kv_heads);
  for (int h = 0; h < c.num_kv_heads; ++h) {
    P->k_scale[h] = 2.0f / 448.0f * (1 + h);  // distinct per-head scales
    P->v_scale[h] = 3.0f / 448.0f * (1 + h);
  }
  // Physical blocks: block 0 is a NaN "poison" block; the rest are shuffled across sequences.
  int total_blocks = 1;
  for (auto& s : c.seqs) total_blocks += (s.start_pos + s.num_queries + bs - 1) / bs;
  std::vector<int32_t> phys(total_blocks - 1);
  std::iota(phys.begin(), phys.end(), 1);
  std::shuffle(phys.begin(), phys.end(), rng);
  const size_t es = DTypeSize(dtype);
  P->k_pool.assign(static_cast<size_t>(total_blocks) * bs * c.num_kv_heads * c.head_dim * es, 0);
  P->v_pool.assign(static_cast<size_t>(total_blocks) * bs * c.num_kv_heads * c.v_head_dim * es, 0);
  for (int64_t i = 0; i < int64_t{bs} * c.num_kv_heads * c.head_dim; ++i)
    StoreElement(P->k_pool, dtype, i, NAN, 1.0f);
  for (int64_t i = 0; i < int64_t{bs} * c.num_kv_heads * c.v_head_dim; ++i)
    StoreElement(P->v_pool, dtype, i, NAN, 1.0f);
  size_t next = 0;
  int row = 0;
  P->k.clear();
  P->v.clear();
  P->tables.assign(c.seqs.size(), {});
  for (size_t si = 0; si < c.seqs.size(); ++si) {
    const SeqSpec& s = c.seqs[si];
    const int ctx = s.start_pos + s.num_queries;
    std::vector<float> k(static_cast<size_t>(ctx) * c.num_kv_heads * c.head_dim);
    std::vector<float> v(static_cast<size_t>(ctx) * c.num_kv_heads * c.v_head_dim);
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    const int nblocks = (ctx + bs - 1) / bs;
    auto& table = P->tables[si];
    for (int b = 0; b < nblocks; ++b) table.push_back(phys[next++]);
    for (int j = 0; j < ctx; ++j) {
      const int64_t slot = int64_t{table[j / bs]} * bs + j % bs;
      for (int h = 0; h < c.num_kv_heads; ++h) {
        for (int d = 0; d < c.head_dim; ++d) {
          float& x = k[(int64_t{j} * c.num_kv_heads + h) * c.head_dim + d];
          StoreElement(P->k_pool, dtype, (slot * c.num_kv_heads + h) * c.head_dim + d, x,
                       P->k_scale[h]);
          x = RoundTrip(x, dtype, P->k_scale[h]);  // the oracle sees what the cache holds
        }
        for (int d = 0; d < c.v_head_dim; ++d) {
          float& x = v[(int64_t{j} * c.num_kv_heads + h) * c.v_head_dim + d];
          StoreElement(P->v_pool, dtype, (slot * c.num_kv_heads + h) * c.v_head_dim + d, x,
                       P->v_scale[h]);
          x = RoundTrip(x, dtype, P->v_scale[h]);
        }
      }
    }
    // Blocks no query of this sequence may read -> the poison block.
    if (c.window > 0) {
      const int lo = std::max(0, s.start_pos - c.window + 1);
      for (int b = 0; b < nblocks; ++b)
        if ((b + 1) * bs - 1 < lo) table[b] = 0;
    }
    P->k.push_back(std::move(k));
    P->v.push_back(std::move(v));
    AttentionSequence as;
    as.query_begin = row;
    as.num_queries = s.num_queries;
    as.start_pos = s.start_pos;
    as.table_begin = static_cast<int>(P->batch.block_tables.size());
    as.num_table_blocks = nblocks;
    P->batch.block_tables.insert(P->batch.block_tables.end(), table.begin(), table.end());
    P->batch.seqs.push_back(as);
    row += s.num_queries;
  }
  P->batch.num_tokens = T;
  P->view.layout = {total_blocks, bs, c.num_kv_heads, c.head_dim, c.v_head_dim, dtype};
  P->view.k = P->k_pool.data();
  P->view.v = P->v_pool.data();
  P->view.k_scale = dtype == DType::kF8E4M3 ? P->k_scale.data() : nullptr;
  P->view.v_scale = dtype == DType::kF8E4M3 ? P->v_scale.data() : nullptr;
  P->geom = {c.num_heads,  c.num_kv_heads, c.head_dim,
             c.v_head_dim, c.window,       1.0f / std::sqrt(static_cast<float>(c.head_dim))};
}

// Brute force from the spec, in double, over the contiguous per-sequence K/V.
std::vector<double> BruteForce(const Problem& P) {
  const Case& c = P.c;
  std::vector<double> out(static_cast<size_t>(P.batch.num_tokens) * c.num_heads * c.v_head_dim);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  int row = 0;
  for (size_t si = 0; si < c.seqs.size(); ++si) {
    const auto& k = P.k[si];
    const auto& v = P.v[si];
    for (int i = 0; i < c.seqs[si].num_queries; ++i, ++row) {
      const int p = c.seqs[si].start_pos + i;
      for (int h = 0; h < c.num_heads; ++h) {
        const int kvh = h / (c.num_heads / c.num_kv_heads);
        std::vector<double> s;
        std::vector<int> keys;
        for (int j = 0; j <= p; ++j) {
          if (c.window > 0 && p - j >= c.window) continue;
          double dot = 0;
          for (int d = 0; d < c.head_dim; ++d)
            dot += double{P.q[(int64_t{row} * c.num_heads + h) * c.head_dim + d]} *
                   k[(int64_t{j} * c.num_kv_heads + kvh) * c.head_dim + d];
          s.push_back(dot * scale);
          keys.push_back(j);
        }
        double m = *std::max_element(s.begin(), s.end());
        if (c.sinks) m = std::max(m, double{P.sinks[h]});
        double denom = c.sinks ? std::exp(P.sinks[h] - m) : 0.0;
        for (double x : s) denom += std::exp(x - m);
        for (size_t t = 0; t < keys.size(); ++t) {
          double w = std::exp(s[t] - m) / denom;
          for (int d = 0; d < c.v_head_dim; ++d)
            out[(int64_t{row} * c.num_heads + h) * c.v_head_dim + d] +=
                w * v[(int64_t{keys[t]} * c.num_kv_heads + kvh) * c.v_head_dim + d];
        }
      }
    }
  }
  return out;
}

std::vector<Case> Cases() {
  return {
      // Full attention, MiMo geometry (K 192 / V 128), GQA 4 -> 2, prefill + decode + chunk.
      {4, 2, 192, 128, 0, false, {{0, 37}, {80, 1}, {50, 30}}},
      // SWA with sinks across the window edge, GQA 8 -> 2, chunks with start_pos > 0.
      {8, 2, 192, 128, 20, true, {{0, 45}, {150, 1}, {100, 40}, {19, 3}}},
      // Window larger than a block; sinks on a full layer; odd head dims.
      {6, 3, 40, 24, 70, true, {{130, 9}, {0, 5}, {64, 64}}},
      // Symmetric dims, no GQA.
      {2, 2, 32, 32, 0, false, {{0, 17}, {33, 2}}},
      // Contexts over several 1024-key segments (cpu_paged splits and merges them): GQA 8:1
      // decode, a 3-query verify step, a prompt chunk across a segment edge.
      {16, 2, 192, 128, 0, true, {{2500, 1}, {1020, 3}, {2040, 20}}},
      // A window across a segment edge, decode and a 2-query step.
      {8, 2, 64, 32, 128, true, {{1100, 1}, {1030, 2}}},
  };
}

class BackendTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(BackendTest, MatchesBruteForceF32) {
  auto [name, bs] = GetParam();
  const AttentionBackend* be = BuiltinAttentionBackends().Find(name);
  ASSERT_NE(be, nullptr);
  ThreadPool pool(2);
  ExecContext ctx{&pool};
  uint32_t seed = 1;
  for (const Case& c : Cases()) {
    Problem P;
    BuildProblem(c, bs, DType::kF32, seed++, &P);
    std::vector<double> want = BruteForce(P);
    std::vector<float> got(want.size(), -1.0f);
    be->Run(ctx, P.geom, P.view, P.batch, P.q.data(), c.sinks ? P.sinks.data() : nullptr,
            got.data());
    test::MaxError err;  // per element: a NaN output (a read of the poison block) fails
    for (size_t i = 0; i < want.size(); ++i) err.Add(want[i], got[i], i);
    EXPECT_LT(err.max, 2e-5) << name << " bs=" << bs << " case window=" << c.window << ": " << err;
  }
}

// bf16/fp8 cache: (a) exact semantics on the stored values (oracle sees the same rounding),
// (b) documented tolerance vs the unquantized f32 attention (docs/PERFORMANCE.md).
TEST_P(BackendTest, QuantizedKvWithinTolerance) {
  auto [name, bs] = GetParam();
  const AttentionBackend* be = BuiltinAttentionBackends().Find(name);
  ExecContext ctx{};
  for (DType t : {DType::kBF16, DType::kF8E4M3}) {
    const Case c = Cases()[1];
    Problem P, exact;
    BuildProblem(c, bs, t, 7, &P);
    BuildProblem(c, bs, DType::kF32, 7, &exact);
    std::vector<double> want_same = BruteForce(P), want_f32 = BruteForce(exact);
    std::vector<float> got(want_same.size());
    be->Run(ctx, P.geom, P.view, P.batch, P.q.data(), P.sinks.data(), got.data());
    test::MaxError err_same, err_f32;  // per element, so a NaN output fails
    double ref_max = 0;                // of the float64 oracle, always finite
    for (size_t i = 0; i < got.size(); ++i) {
      err_same.Add(want_same[i], got[i], i);
      err_f32.Add(want_f32[i], got[i], i);
      ref_max = std::max(ref_max, std::abs(want_f32[i]));
    }
    EXPECT_LT(err_same.max, 2e-5) << KvDTypeName(t) << ": " << err_same;
    const double tol = t == DType::kBF16 ? 0.02 : 0.15;  // of max |out|
    EXPECT_LT(err_f32.max, tol * ref_max) << KvDTypeName(t) << ": " << err_f32;
    EXPECT_GT(err_f32.max, 0.0) << "quantization must be visible";
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendTest,
                         ::testing::Combine(::testing::Values("reference", "cpu_paged"),
                                            ::testing::Values(16, 48, 64)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_bs" +
                                  std::to_string(std::get<1>(info.param));
                         });

// cpu_paged: a query's output depends only on its own position and the cache, never on how the
// step was batched: the rows of a 20-query chunk across a segment edge, computed again one at a
// time as decode steps (the split path), and with or without the thread pool, are bit-identical.
TEST(CpuPaged, RowOutputIndependentOfBatchingAndThreads) {
  const AttentionBackend* be = BuiltinAttentionBackends().Find("cpu_paged");
  ASSERT_NE(be, nullptr);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    const Case c{16, 2, 192, 128, 0, true, {{2040, 20}}};
    Problem P;
    BuildProblem(c, 16, t, 11, &P);
    const int dq = c.num_heads * c.head_dim, dv = c.num_heads * c.v_head_dim;
    ThreadPool pool(2);
    ExecContext threaded{&pool}, serial{};
    std::vector<float> chunk(20 * dv), chunk_serial(20 * dv);
    be->Run(threaded, P.geom, P.view, P.batch, P.q.data(), P.sinks.data(), chunk.data());
    be->Run(serial, P.geom, P.view, P.batch, P.q.data(), P.sinks.data(), chunk_serial.data());
    EXPECT_EQ(0, std::memcmp(chunk.data(), chunk_serial.data(), chunk.size() * sizeof(float)))
        << KvDTypeName(t);
    for (int r : {0, 7, 8, 19}) {
      AttentionBatch one;
      AttentionSequence s = P.batch.seqs[0];
      s.query_begin = 0;
      s.num_queries = 1;
      s.start_pos = 2040 + r;
      one.seqs.push_back(s);
      one.num_tokens = 1;
      one.block_tables = P.batch.block_tables;
      std::vector<float> got(dv);
      be->Run(threaded, P.geom, P.view, one, P.q.data() + r * dq, P.sinks.data(), got.data());
      EXPECT_EQ(0, std::memcmp(got.data(), chunk.data() + r * dv, dv * sizeof(float)))
          << KvDTypeName(t) << " row " << r;
    }
  }
}

TEST(BackendRegistry, EveryBuiltinIsTested) {
  for (const AttentionBackend* b : BuiltinAttentionBackends().backends()) {
    std::string n = b->name();
    EXPECT_TRUE(n == "reference" || n == "cpu_paged") << "add " << n << " to BackendTest";
  }
}

}  // namespace
}  // namespace mimo
