// Weight bytes by kind (as stored, or with MXFP4 experts) and the per-step scratch estimate of
// `mimo inspect`'s memory plan.
#include "cli/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/sharding.h"

namespace mimo::cli {
namespace {

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The bytes of one weight tensor (or its scales) once its group is rewritten to `f`.
double QuantizedBytes(const SafetensorsEntry& e, WeightFormat f) {
  const double stored = static_cast<double>(e.nbytes);
  if (f == WeightFormat::kKeep) return stored;
  if (EndsWith(e.name, ".weight_scale_inv")) {  // FP8 scales: kept under fp8, else replaced
    return f == WeightFormat::kFp8 ? stored : 0;
  }
  if (!EndsWith(e.name, ".weight") || e.dtype == DType::kU8 || e.shape.size() != 2) {
    return stored;  // already MXFP4 (codes or exponents), or not a weight
  }
  if (f == WeightFormat::kFp8 && e.dtype == DType::kF8E4M3) return stored;
  const double rows = static_cast<double>(e.shape[0]);
  const int64_t k = e.shape[1];
  if (f == WeightFormat::kFp8) {
    const double blocks = static_cast<double>((e.shape[0] + 127) / 128) * ((k + 127) / 128);
    return rows * static_cast<double>(k) + 4 * blocks;
  }
  // A byte per weight and an fp32 scale per 32 of a row (as loaded; --precision int8's grouped
  // layout then holds the scales in bf16 and pads rows to 512 columns).
  if (f == WeightFormat::kInt8) {
    return rows * static_cast<double>(k) + 4 * rows * static_cast<double>((k + 31) / 32);
  }
  return rows * static_cast<double>((k + 1) / 2) + rows * static_cast<double>((k + 31) / 32);
}

}  // namespace

StatusOr<WeightBytes> CountWeightBytes(const Checkpoint& ck, const WeightFormats& formats,
                                       const TpSlice& rank) {
  const ModelConfig& c = ck.config();
  WeightBytes w;
  double main_experts = 0;
  for (const std::string& n : ck.TensorNames()) {
    const SafetensorsTensor* t = ck.FindTensor(n);
    if (t == nullptr) return Internal("tensor '%s' listed but not found", n.c_str());
    const SafetensorsEntry& e = *t->entry;
    const TensorId id = ClassifyTensor(n, c);
    MIMO_ASSIGN_OR_RETURN(TensorShard shard, ShardOf(id, c, rank));
    if (id.expert >= 0) {  // model.[mtp.]layers.N.mlp.experts.E.*
      const double b = QuantizedBytes(e, formats.experts);
      w.experts += shard.Fraction() * b;
      if (id.mtp_layer < 0) main_experts += b;
      continue;
    }
    const WeightFormat f = IsDenseProjection(id.role)         ? formats.dense
                           : id.role == TensorRole::kLmHead ? formats.lm_head
                                                             : WeightFormat::kKeep;
    const double b = QuantizedBytes(e, f);
    w.other += shard.Fraction() * b;
    if (id.role == TensorRole::kEmbedding) {
      const double row = static_cast<double>(c.hidden_size) * DTypeSize(e.dtype);
      if (c.tie_word_embeddings && formats.lm_head != WeightFormat::kKeep) {
        // The lm_head becomes its own quantized copy; the embedding still reads one row.
        SafetensorsEntry head = e;
        head.name = "lm_head.weight";
        const double q = QuantizedBytes(head, formats.lm_head);
        w.other += q;
        w.active_per_token += row + q;
      } else {
        w.active_per_token += c.tie_word_embeddings ? b : row;
      }
    } else if ((id.layer >= 0 && id.mtp_layer < 0) || id.role == TensorRole::kModelNorm ||
               id.role == TensorRole::kLmHead) {
      w.active_per_token += b;
    }
  }
  if (c.n_routed_experts > 0) {
    w.active_per_token += main_experts * c.num_experts_per_tok / c.n_routed_experts;
  }
  for (const Checkpoint::SkippedGroup& g : ck.SkippedGroups()) w.towers += g.bytes;
  return w;
}

int64_t EstimateScratchBytes(const ModelConfig& c, const std::vector<LayerConfig>& layers,
                             int64_t tokens_per_step, int64_t sampled_rows) {
  const int64_t T = tokens_per_step, H = c.hidden_size;
  int64_t attention = 0;  // q, k, v, the heads' output
  for (const LayerConfig& l : layers) {
    attention = std::max<int64_t>(
        attention, T * (int64_t{l.num_attention_heads} * (l.head_dim + l.v_head_dim) +
                        int64_t{l.num_key_value_heads} * (l.head_dim + l.v_head_dim)));
  }
  int64_t ffn = 2 * T * c.intermediate_size;  // dense MLP (layer 0, MTP layers): gate, up
  if (c.n_routed_experts > 0) {
    const int64_t router = T * (c.n_routed_experts + 2 * int64_t{c.num_experts_per_tok});
    const int64_t expert = T * (2 * H + 2 * int64_t{c.moe_intermediate_size});
    ffn = std::max(ffn, router + expert);
  }
  const int64_t head = sampled_rows * (H + c.vocab_size);
  return 4 * (3 * T * H + std::max(attention, ffn) + head);
}

namespace {
std::string Gib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(1ull << 30));
  return buf;
}
std::string Bytes(double b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f", b);
  return buf;
}
}  // namespace

std::string FormatMemoryPlan(const MemoryPlan& p) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof(line),
                "memory plan      %s KV cache for %d sequence(s) of %lld tokens, steps of %lld "
                "tokens\n",
                p.kv_dtype.c_str(), p.max_sequences, static_cast<long long>(p.max_context),
                static_cast<long long>(p.tokens_per_step));
  s += line;
  if (p.tensor_parallel > 1) {
    s += "                 per rank (rank 0 of " + std::to_string(p.tensor_parallel) +
         "), but for the bytes read per token: the whole model's\n";
  }
  auto row = [&](const char* label, auto value) {
    std::snprintf(line, sizeof(line), "  %-24s", label);
    s += line;
    for (const MemoryPlanColumn& c : p.columns) {
      const int width = std::max<int>(16, static_cast<int>(c.name.size()));
      std::snprintf(line, sizeof(line), " %*s", width, value(c).c_str());
      s += line;
    }
    s += "\n";
  };
  row("", [](const MemoryPlanColumn& c) { return c.name; });
  row("weights: routed experts", [](const MemoryPlanColumn& c) { return Gib(c.weights.experts); });
  row("weights: other", [](const MemoryPlanColumn& c) { return Gib(c.weights.other); });
  row("KV cache", [](const MemoryPlanColumn& c) { return Gib(c.kv_bytes); });
  row("scratch (estimate)", [](const MemoryPlanColumn& c) { return Gib(c.scratch_bytes); });
  row("total", [](const MemoryPlanColumn& c) { return Gib(c.total()); });
  row("read per decode token", [](const MemoryPlanColumn& c) {
    return Gib(c.weights.active_per_token);
  });
  if (!p.columns.empty() && p.columns[0].weights.towers > 0) {
    s += "  (plus " + Gib(p.columns[0].weights.towers) +
         " of vision/audio towers in the files: never bound, but\n"
         "    --weights-memory copy copies them with the rest)\n";
  }
  s += "  read per decode token: one embedding row, every main layer's attention, dense MLP,\n"
       "    router and top-k / n_routed_experts of its experts, lm_head (MTP layers left out)\n";
  s += "  scratch: the engine thread's per-step activations at the widest layer, one logits row\n"
       "    per sequence (not counted: worker threads' tiles, tokenizer, HTTP server)\n";
  return s;
}

std::string MemoryPlanJson(const MemoryPlan& p) {
  std::string o = "{\"kv_cache_dtype\": \"" + p.kv_dtype + "\"";
  o += ", \"max_context\": " + std::to_string(p.max_context);
  o += ", \"max_sequences\": " + std::to_string(p.max_sequences);
  o += ", \"max_num_batched_tokens\": " + std::to_string(p.tokens_per_step);
  o += ", \"tensor_parallel_size\": " + std::to_string(p.tensor_parallel);
  for (const MemoryPlanColumn& c : p.columns) {
    // The quantized column: "experts_mxfp4" for --experts mxfp4 alone (its key before --dense and
    // --lm-head existed), otherwise "quantized" with its flags.
    const std::string key = c.name == "as stored"         ? "as_stored"
                            : c.name == "--experts mxfp4" ? "experts_mxfp4"
                                                          : "quantized";
    o += ", \"" + key + "\": {";
    if (key == "quantized") o += "\"flags\": \"" + c.name + "\", ";
    o += "\"expert_bytes\": " + Bytes(c.weights.experts);
    o += ", \"other_weight_bytes\": " + Bytes(c.weights.other);
    o += ", \"tower_bytes\": " + Bytes(c.weights.towers);
    o += ", \"kv_cache_bytes\": " + Bytes(c.kv_bytes);
    o += ", \"scratch_bytes\": " + Bytes(c.scratch_bytes);
    o += ", \"total_bytes\": " + Bytes(c.total());
    o += ", \"active_weight_bytes_per_token\": " + Bytes(c.weights.active_per_token) + "}";
  }
  return o + "}";
}

}  // namespace mimo::cli
