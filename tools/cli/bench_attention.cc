// `mimo bench attention`: one layer's decode attention over a long paged context, against the
// machine's read bandwidth and FMA peak probed in the same run. The cache is a shuffled block
// table over pools allocated as the engine allocates them (core/Tensor), filled with values
// drawn like real K/V through the engine's cache write; the default shape is a MiMo-V2-Flash
// full-attention layer at 32k keys.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/registry.h"
#include "cli/command.h"
#include "cli/roofline_probe.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/dispatch.h"
#include "kv/kv_cache_write.h"
#include "kv/paged_kv_attention.h"

namespace mimo::cli {

int RunBenchAttention(const Args& a) {
  const int context = static_cast<int>(a.GetInt("context", 32768));
  const int threads = static_cast<int>(a.GetInt("threads", 2));
  const int heads = static_cast<int>(a.GetInt("heads", 32));
  const int kv_heads = static_cast<int>(a.GetInt("kv-heads", 4));
  const int dk = static_cast<int>(a.GetInt("head-dim", 192));
  const int dv = static_cast<int>(a.GetInt("v-head-dim", 128));
  const int bs = static_cast<int>(a.GetInt("block-size", 16));
  const int queries = static_cast<int>(a.GetInt("queries", 1));
  const int reps = static_cast<int>(a.GetInt("reps", 20));
  const int64_t probe_mib = a.GetInt("probe-mib", 1024);
  const std::string backend_name = a.Get("backend", "cpu_paged");
  auto dt = ParseKvCacheDType(a.Get("kv-cache-dtype", "bf16"));
  if (!dt.ok()) {
    std::fprintf(stderr, "bench attention: %s\n", dt.status().message().c_str());
    return 2;
  }
  if (context < queries || queries <= 0 || threads <= 0 || heads <= 0 || kv_heads <= 0 ||
      heads % kv_heads != 0 || dk <= 0 || dv <= 0 || bs <= 0 || reps <= 0 || probe_mib <= 0) {
    std::fprintf(stderr,
                 "bench attention: need context >= queries > 0, heads a multiple of kv-heads, and "
                 "positive dims, block size, threads, reps and probe-mib\n");
    return 2;
  }
  const AttentionBackend* be = BuiltinAttentionBackends().Find(backend_name);
  if (be == nullptr) {
    std::fprintf(stderr, "bench attention: unknown backend '%s'\n", backend_name.c_str());
    return 2;
  }
  ThreadPool pool(threads);
  ExecContext ctx{&pool};
  const KernelTable& kern = ActiveKernels();
  const int num_blocks = (context + bs - 1) / bs;
  PagedKvLayout L{num_blocks, bs, kv_heads, dk, dv, *dt};
  Tensor k_pool(*dt, {L.k_elements()}), v_pool(*dt, {L.v_elements()});  // as the engine's pools
  std::vector<float> k_scale(kv_heads, 4.0f / 448.0f), v_scale(kv_heads, 4.0f / 448.0f);
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::mt19937 rng(3);
  std::shuffle(table.begin(), table.end(), rng);  // blocks anywhere in the pool, as after churn
  // Values like real K/V (normal, unit scale), stored by the engine's own cache write, a chunk
  // of tokens at a time through the block table.
  {
    const KvCacheWriteTarget dst{L, k_pool.data(), v_pool.data(), k_scale.data(), v_scale.data()};
    constexpr int kChunk = 1024;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> kc(static_cast<size_t>(kChunk) * kv_heads * dk);
    std::vector<float> vc(static_cast<size_t>(kChunk) * kv_heads * dv);
    std::vector<int64_t> slots(kChunk);
    for (int t0 = 0; t0 < context; t0 += kChunk) {
      const int n = std::min(kChunk, context - t0);
      for (float& x : kc) x = nd(rng);
      for (float& x : vc) x = nd(rng);
      for (int i = 0; i < n; ++i) {
        slots[i] = int64_t{table[(t0 + i) / bs]} * bs + (t0 + i) % bs;
      }
      WriteKvCache(dst, kc.data(), vc.data(), slots.data(), n);
    }
  }
  PagedKvView view{L, k_pool.data(), v_pool.data(), k_scale.data(), v_scale.data()};
  AttentionBatch batch;
  batch.seqs.push_back({0, queries, context - queries, 0, num_blocks});
  batch.block_tables.assign(table.begin(), table.end());
  batch.num_tokens = queries;
  AttentionGeometry g{heads, kv_heads, dk, dv, 0, 1.0f / std::sqrt(static_cast<float>(dk))};
  std::vector<float> q(static_cast<size_t>(queries) * heads * dk),
      out(static_cast<size_t>(queries) * heads * dv);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : q) x = nd(rng);
  std::vector<float> sinks(heads, 0.5f);
  std::vector<double> ms;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = BenchNow();
    be->Run(ctx, g, view, batch, q.data(), sinks.data(), out.data());
    if (r > 0) ms.push_back((BenchNow() - t0) * 1e3);  // the first call warms up
  }
  for (float x : out) {
    if (!std::isfinite(x)) {
      std::fprintf(stderr, "bench attention: non-finite output\n");
      return 1;
    }
  }
  std::sort(ms.begin(), ms.end());
  const double best = ms.front(), median = ms[ms.size() / 2];
  const double kv_bytes = static_cast<double>(context) * kv_heads * (dk + dv) * DTypeSize(*dt);
  // Multiply-adds: every query head against every visible key (q.k and the value sum).
  double flops = 0;
  for (int i = 0; i < queries; ++i) flops += 2.0 * heads * (dk + dv) * (context - queries + 1 + i);
  const double probe_gbps =
      MeasureReadBandwidth(pool, kern, static_cast<size_t>(probe_mib) << 20, 3, &BenchNow);
  const double peak_gflops = MeasurePeakGflops(pool, kern.fma_probe, 0.2, 3, &BenchNow);
  const double gbps = kv_bytes / (best * 1e-3) / 1e9, gflops = flops / (best * 1e-3) / 1e9;
  if (a.Has("json")) {
    std::printf(
        "{\"backend\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"context\": %d, \"queries\": %d, "
        "\"kv_cache_dtype\": \"%s\", \"best_ms\": %.6g, \"median_ms\": %.6g, \"kv_bytes\": %.0f, "
        "\"achieved_gbps\": %.6g, \"measured_read_gbps\": %.6g, \"bandwidth_fraction\": %.6g, "
        "\"gflops\": %.6g, \"peak_gflops\": %.6g, \"peak_fraction\": %.6g}\n",
        be->name(), IsaName(kern.isa), threads, context, queries, KvDTypeName(*dt), best, median,
        kv_bytes, gbps, probe_gbps, gbps / probe_gbps, gflops, peak_gflops, gflops / peak_gflops);
  } else {
    std::printf(
        "attention %s (%s, %d threads): %d keys x %d kv heads (K %d, V %d, %s), %d query heads, "
        "%d queries\n  best %.3f ms (median %.3f) for %.1f MB of K/V: %.1f GB/s = %.0f%% of the "
        "%.1f GB/s read probe; %.1f GFLOP/s = %.0f%% of the %.0f GFLOP/s FMA probe\n",
        be->name(), IsaName(kern.isa), threads, context, kv_heads, dk, dv, KvDTypeName(*dt), heads,
        queries, best, median, kv_bytes / 1e6, gbps, 100 * gbps / probe_gbps, probe_gbps, gflops,
        100 * gflops / peak_gflops, peak_gflops);
  }
  return 0;
}

}  // namespace mimo::cli
