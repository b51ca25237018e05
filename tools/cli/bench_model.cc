// `mimo bench model`: one benchmark that states the machine's limits next to the model's speed,
// all measured in one run: prefill tok/s of an N-token prompt against the fp32 FMA peak of the
// instructions the prefill tiles use, and decode tok/s against the streaming read bandwidth,
// counting the bytes one decode token really reads (the experts the router chose, each distinct
// expert once per step, plus the KV cache the step attends over).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/decode_session.h"
#include "cli/model_loading.h"
#include "cli/roofline_probe.h"
#include "core/progress.h"
#include "engine/sampler.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace mimo::cli {
namespace {

// Visible keys of a query at position pos on a layer (window W > 0: the last W positions).
double VisibleKeys(const LayerConfig& lc, int64_t pos) {
  const int64_t n = pos + 1;
  return static_cast<double>(lc.sliding_window > 0 ? std::min<int64_t>(n, lc.sliding_window) : n);
}

// FLOPs of a prefill of `prompt` tokens at positions 0..prompt-1 of `seqs` sequences, logits of
// the last row of each: every token's Linear work (top-k experts on MoE layers: the mean of the
// experts this rank holds) plus QK^T and PV.
double PrefillFlops(const MimoV2Model& m, int64_t prompt, int seqs) {
  const ModelConfig& cfg = m.config();
  const int L = cfg.num_hidden_layers;
  double per_token = 0, attn = 0, lm_head = 0;
  std::vector<double> expert_elements(L, 0.0);  // [L] of every held expert
  std::vector<int> held(L, 0);                  // [L]
  ForEachWeight(m.weights(), [&](const WeightRef& r) {
    const int l = r.id.layer;
    if (r.matrix == nullptr || l >= L) return;  // vectors; MTP layers do not run in a prefill
    const double elements = static_cast<double>(r.matrix->rows) * r.matrix->cols;
    if (r.id.role == TensorRole::kLmHead) {
      lm_head = elements;
    } else if (IsRoutedExpert(r.id.role)) {
      expert_elements[l] += elements;
      held[l] += r.id.role == TensorRole::kExpertGateProj;
    } else {
      per_token += elements;  // attention, router, dense MLP
    }
  });
  for (int l = 0; l < L; ++l) {
    if (held[l] > 0) per_token += cfg.num_experts_per_tok * (expert_elements[l] / held[l]);
    const LayerConfig& lc = cfg.layers[l];
    for (int64_t t = 0; t < prompt; ++t) {
      attn += 2.0 * lc.num_attention_heads * (lc.head_dim + lc.v_head_dim) * VisibleKeys(lc, t);
    }
  }
  return seqs * (2.0 * per_token * prompt + attn + 2.0 * lm_head);
}

// KV-cache bytes one decode step reads for a query at position pos (K and V of every visible
// key of every layer).
double KvBytesAt(const ModelConfig& cfg, DType kv_dtype, int64_t pos) {
  double b = 0;
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    b += VisibleKeys(lc, pos) * lc.num_key_value_heads * (lc.head_dim + lc.v_head_dim) *
         static_cast<double>(DTypeSize(kv_dtype));
  }
  return b;
}

struct Result {
  double prefill_s = 0, decode_s = 0;
  double weight_bytes = 0, kv_bytes = 0;  // per decode token
  double read_gbps = 0, peak_gflops = 0, prefill_flops = 0;
  double regions_per_step = 0, region_s = 0;  // fork-join regions of a decode step, their cost
};

}  // namespace

int RunBenchModel(const Args& a) {
  const int threads = static_cast<int>(a.GetInt("threads", std::thread::hardware_concurrency()));
  const int prompt = static_cast<int>(a.GetInt("prompt-len", 512));
  const int gen = static_cast<int>(a.GetInt("gen-len", 32));
  const int batch = static_cast<int>(a.GetInt("batch", 1));
  const int64_t probe_mib = a.GetInt("probe-mib", 1024);
  const bool json = a.Has("json");
  if (!a.Has("model") || threads <= 0 || prompt <= 0 || gen < 2 || batch <= 0 || probe_mib <= 0) {
    std::fprintf(stderr,
                 "bench model: need --model; --threads, --prompt-len, --batch, "
                 "--probe-mib > 0, --gen-len >= 2\n");
    return 2;
  }
  if (!SetBenchClock(a.Get("clock", "wall"), threads)) {
    std::fprintf(stderr, "bench model: --clock must be wall or cpu\n");
    return 2;
  }
  LoadedModel lm;
  if (!LoadModelOrReport("bench model", a.Get("model"), threads, &lm, &a)) return 1;
  MimoV2Model& model = *lm.model;
  const ModelConfig& cfg = model.config();
  {
    ProgressLine pl("bench model: reading weights",
                    static_cast<double>(model.checkpoint().TotalFileBytes()), "GB");
    model.checkpoint().ReadThrough(
        lm.pool.get(), [&](uint64_t d, uint64_t) { pl.Update(static_cast<double>(d)); });
    pl.Finish();
  }
  PagedKvOptions kv_opts;
  if (!KvOptionsFromArgs("bench model", a, &kv_opts)) return 1;
  auto kv = MakeKvCacheOrReport("bench model", a, model, batch, prompt + gen, batch * prompt);
  if (!kv) return 1;
  const KernelTable& k = ActiveKernels();
  Result r;
  // The GEMMs run vdpbf16ps under --precision bf16 (where the CPU has it): its
  // peak is the limit then, not the fp32 FMA's.
  const bool bf16 = lm.ctx.precision == Precision::kBf16 && k.linear_rows_bf16 != nullptr &&
                    k.bf16_dot_probe != nullptr;
  // --precision int8 with int8 weights: the int8 GEMMs run vpdpbusd where the CPU has it (the
  // rest of a prompt step is fp32: this peak bounds the whole step from above).
  const bool int8 = lm.ctx.precision == Precision::kInt8 && k.linear_rows_int8 != nullptr;
  const bool int8_peak = int8 && lm.int8_interleaved > 0 && k.int8_dot_probe != nullptr;
  const char* peak_name = bf16 ? "vdpbf16ps" : int8_peak ? "vpdpbusd" : "FMA";
  std::fprintf(stderr, "bench model: probing read bandwidth (%lld MiB) and %s peak (%s)\n",
               static_cast<long long>(probe_mib), peak_name, IsaName(k.isa));
  r.read_gbps =
      MeasureReadBandwidth(*lm.pool, k, static_cast<size_t>(probe_mib) << 20, 5, &BenchNow);
  r.peak_gflops =
      MeasurePeakGflops(*lm.pool,
                        bf16        ? k.bf16_dot_probe
                        : int8_peak ? k.int8_dot_probe
                                    : k.fma_probe,
                        0.2, 3, &BenchNow);
  r.region_s = MeasureRegionSeconds(*lm.pool, 20000, 3, &BenchNow);

  // Prefill: every sequence's prompt in one step (B chunks), logits of each last row.
  std::vector<int32_t> ids(static_cast<size_t>(batch) * prompt);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int32_t>((1 + 7919 * i) % cfg.vocab_size);
  DecodeSession session(lm, *kv, batch);
  std::fprintf(stderr, "bench model: prefill %d x %d tokens\n", batch, prompt);
  double t0 = BenchNow();
  Status st = session.Prefill(ids, prompt);
  r.prefill_s = BenchNow() - t0;
  r.prefill_flops = PrefillFlops(model, prompt, batch);

  // Decode: gen steps of one token per sequence; the first is a warm-up and not timed.
  ProgressLine pl("bench model: decode", gen, "");
  uint64_t regions0 = 0;
  // --ab-fp8-plain: the FP8 plain tiles on for steps 1-2, off for 3-4, on for 5-6, ... (the same
  // tokens either way: the two paths give the same bits), each half timed on its own.
  const bool ab = a.Has("ab-fp8-plain") && lm.fp8_plain_tiles > 0;
  double ab_s[2] = {0, 0};
  int ab_steps[2] = {0, 0};
  for (int i = 0; i < gen && st.ok(); ++i) {
    if (i == 1) {
      t0 = BenchNow();
      regions0 = lm.pool->regions();
    }
    const int half = i >= 1 ? ((i - 1) / 2) % 2 : 0;  // 0: plain on
    if (ab) model.UseFp8PlainBlocks(half == 0);
    const double ts = BenchNow();
    st = session.DecodeGreedy();
    if (ab && i >= 1) {
      ab_s[half] += BenchNow() - ts;
      ++ab_steps[half];
    }
    if (i >= 1) {
      r.weight_bytes += model.last_forward_stats().weight_bytes / batch;
      r.kv_bytes += KvBytesAt(cfg, kv_opts.kv_dtype, prompt + i);
    }
    pl.Update(i + 1);
  }
  r.decode_s = BenchNow() - t0;
  r.regions_per_step = static_cast<double>(lm.pool->regions() - regions0) / (gen - 1);
  pl.Finish();
  if (!st.ok()) {
    std::fprintf(stderr, "mimo bench model: error: %s\n", st.message().c_str());
    return 1;
  }
  const int timed = gen - 1;
  r.weight_bytes /= timed;
  r.kv_bytes /= timed;

  const double prefill_tps = batch * prompt / r.prefill_s;
  const double decode_tps = batch * timed / r.decode_s;
  const double bytes = r.weight_bytes + r.kv_bytes;
  const double achieved = bytes * decode_tps / 1e9;
  const double prefill_gflops = r.prefill_flops / r.prefill_s / 1e9;
  const double roofline = achieved / r.read_gbps, compute = prefill_gflops / r.peak_gflops;
  // The share of a decode step that empty regions alone would take (batch sequences per step).
  const double sync = r.regions_per_step * r.region_s / (r.decode_s / timed);
  if (json) {
    std::printf(
        "{\"isa\": \"%s\", \"threads\": %d, \"clock\": \"%s\", \"batch\": %d, \"prompt_len\": %d, "
        "\"gen_len\": %d, \"kv_cache_dtype\": \"%s\", \"precision\": \"%s\", "
        "\"peak_instruction\": \"%s\", \"prefill_tok_s\": %.6g, "
        "\"decode_tok_s\": %.6g, \"active_bytes_per_token\": %.0f, "
        "\"weight_bytes_per_token\": %.0f, \"kv_bytes_per_token\": %.0f, "
        "\"achieved_gbps\": %.6g, \"measured_read_gbps\": %.6g, \"roofline_fraction\": %.6g, "
        "\"roofline_tok_s\": %.6g, \"prefill_gflops\": %.6g, \"peak_gflops\": %.6g, "
        "\"peak_fraction\": %.6g, \"regions_per_step\": %.6g, \"empty_region_us\": %.6g, "
        "\"sync_fraction\": %.6g, \"fp8_plain_tiles\": %lld, \"fp8_tiles\": %lld}\n",
        IsaName(k.isa), threads, BenchClockIsCpu() ? "cpu" : "wall", batch, prompt, gen,
        std::string(DTypeName(kv_opts.kv_dtype)).c_str(),
        bf16 ? "bf16" : int8 ? "int8" : "exact",
        peak_name,
        prefill_tps, decode_tps, bytes, r.weight_bytes, r.kv_bytes, achieved, r.read_gbps, roofline,
        r.read_gbps * 1e9 / bytes, prefill_gflops, r.peak_gflops, compute, r.regions_per_step,
        r.region_s * 1e6, sync, static_cast<long long>(lm.fp8_plain_tiles),
        static_cast<long long>(lm.fp8_tiles));
  } else {
    std::printf("model: %s; isa %s; %d threads; %s clock; batch %d\n", a.Get("model").c_str(),
                IsaName(k.isa), threads, BenchClockIsCpu() ? "cpu" : "wall", batch);
    std::printf(
        "prefill (%s): %d tokens %.1f tok/s, %.1f GFLOP/s = %.0f%% of the %.1f GFLOP/s %s peak "
        "(%s, all threads, same run)\n",
        bf16 ? "bf16 activations" : int8 ? "int8 activations" : "exact", batch * prompt, prefill_tps, prefill_gflops,
        100 * compute, r.peak_gflops, peak_name, IsaName(k.isa));
    std::printf(
        "decode: %.2f tok/s; %.1f MB/token (weights %.1f MB of the chosen experts + KV "
        "%.2f MB) -> %.2f GB/s = %.0f%% of the %.2f GB/s read bandwidth (same run; "
        "roofline %.1f tok/s)\n",
        decode_tps, bytes / 1e6, r.weight_bytes / 1e6, r.kv_bytes / 1e6, achieved, 100 * roofline,
        r.read_gbps, r.read_gbps * 1e9 / bytes);
    std::printf(
        "sync: %.0f fork-join regions per decode step x %.3f us per empty region (%d threads, "
        "same run) = %.1f%% of a step\n",
        r.regions_per_step, r.region_s * 1e6, threads, 100 * sync);
    if (ab && ab_steps[0] > 0 && ab_steps[1] > 0) {
      const double on = batch * ab_steps[0] / ab_s[0], off = batch * ab_steps[1] / ab_s[1];
      std::printf(
          "fp8 plain A/B (alternating pairs of steps, same run): plain tiles %.2f tok/s, general "
          "path %.2f tok/s, ratio %.3f\n",
          on, off, on / off);
    }
    if (lm.fp8_tiles > 0) {
      std::printf("fp8: %lld of %lld GEMV tiles (4 rows x 128 columns) plain (%.1f%%)\n",
                  static_cast<long long>(lm.fp8_plain_tiles), static_cast<long long>(lm.fp8_tiles),
                  100.0 * lm.fp8_plain_tiles / lm.fp8_tiles);
    }
    if (lm.int8_interleaved > 0) {
      std::printf("int8: %d weights' rows interleaved in tiles of 4 for --precision int8\n",
                  lm.int8_interleaved);
    }
  }
  return 0;
}

}  // namespace mimo::cli
