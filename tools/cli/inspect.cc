// `mimo inspect --model DIR [--json]`: what a checkpoint contains (the sibling it is, config
// summary, tensors, bytes by dtype, FP8 layouts, MXFP4 weights, MTP layers, skipped multimodal
// tensors), with --max-context the KV memory plan, and the memory plan (weights as experts / other,
// KV cache, scratch, bytes read per decode token; with --experts mxfp4 also as if the routed
// experts were MXFP4), from the headers alone: no weight is read.
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/memory_plan.h"
#include "io/checkpoint.h"
#include "kv/kv_memory_plan.h"
#include "kv/paged_kv_attention.h"
#include "model/tensor_parallel.h"

namespace mimo::cli {
namespace {

// Minimal JSON emission (the CLI has no JSON library by design).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.7g", v);  // values are float: 7 digits round-trip them
  return buf;
}

struct KindSummary {
  int layers = 0;
  const LayerConfig* first = nullptr;
};

std::string AttentionJson(const KindSummary& k) {
  if (!k.first) return "null";
  const LayerConfig& l = *k.first;
  return "{\"layers\": " + std::to_string(k.layers) +
         ", \"num_attention_heads\": " + std::to_string(l.num_attention_heads) +
         ", \"num_key_value_heads\": " + std::to_string(l.num_key_value_heads) +
         ", \"head_dim\": " + std::to_string(l.head_dim) +
         ", \"v_head_dim\": " + std::to_string(l.v_head_dim) +
         ", \"rotary_dim\": " + std::to_string(l.rotary_dim) +
         ", \"rope_theta\": " + Num(l.rope_theta) +
         ", \"sliding_window\": " + std::to_string(l.sliding_window) +
         ", \"sinks\": " + (l.has_sinks ? "true" : "false") + "}";
}

void PrintAttention(const char* what, const KindSummary& k) {
  if (!k.first) return;
  const LayerConfig& l = *k.first;
  std::printf(
      "%-16s %d layers: %d heads, %d kv heads, head_dim %d, v_head_dim %d, rotary %d, "
      "theta %g",
      what, k.layers, l.num_attention_heads, l.num_key_value_heads, l.head_dim, l.v_head_dim,
      l.rotary_dim, l.rope_theta);
  if (l.sliding_window) std::printf(", window %d", l.sliding_window);
  std::printf(", sinks %s\n", l.has_sinks ? "yes" : "no");
}

std::string HumanBytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / double(1ull << 20));
  else
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

// The memory plan's columns: as stored, and with --experts mxfp4. KV cache and scratch as the
// engine sizes them: --max-context (4096) x --max-sequences (1) at --kv-cache-dtype (bf16), chunks
// of --max-num-batched-tokens (512, serve's default). Under --tensor-parallel-size N: rank 0's
// share (its rows of each weight by the sharding table, KV cache of its kv heads).
StatusOr<MemoryPlan> PlanMemory(const Args& args, const Checkpoint& ck,
                                const ModelConfig& kv_config, int tp, bool ep) {
  MIMO_ASSIGN_OR_RETURN(const WeightFormats formats, WeightFormatsFromArgs(args));
  MIMO_ASSIGN_OR_RETURN(DType kv_dtype, ParseKvCacheDType(args.Get("kv-cache-dtype", "bf16")));
  MemoryPlan plan;
  plan.kv_dtype = KvDTypeName(kv_dtype);
  plan.max_context = args.GetInt("max-context", 4096);
  plan.max_sequences = static_cast<int>(args.GetInt("max-sequences", 1));
  plan.tokens_per_step = args.GetInt("max-num-batched-tokens", 512);
  plan.tensor_parallel = tp;
  if (plan.tokens_per_step < 1 || plan.tokens_per_step > (1 << 24)) {
    return InvalidArgument("--max-num-batched-tokens must be in [1, 2^24]");
  }
  KvMemoryPlanOptions po;
  po.block_size = static_cast<int>(args.GetInt("block-size", 16));
  po.kv_dtype = kv_dtype;
  po.max_context = plan.max_context;
  po.max_sequences = plan.max_sequences;
  po.max_chunk_tokens = static_cast<int>(plan.tokens_per_step);
  po.budget_bytes = args.GetInt("kv-cache-memory", 0);
  ModelConfig kv_rank = kv_config;
  if (tp > 1) {
    MIMO_ASSIGN_OR_RETURN(kv_rank.layers, TpKvLayerConfigs(ck.config(), ck.NumMtpLayers(), 0, tp));
  }
  MIMO_ASSIGN_OR_RETURN(KvMemoryPlan kv, PlanKvMemory(kv_rank, po));
  const double scratch = static_cast<double>(EstimateScratchBytes(
      ck.config(), kv_config.layers, plan.tokens_per_step, plan.max_sequences));
  const TpSlice rank0{0, tp, ep};  // the sharding table's rows of rank 0
  MIMO_ASSIGN_OR_RETURN(WeightBytes stored, CountWeightBytes(ck, WeightFormats{}, rank0));
  std::vector<std::pair<std::string, WeightBytes>> columns = {{"as stored", stored}};
  if (formats.any()) {
    MIMO_ASSIGN_OR_RETURN(WeightBytes q, CountWeightBytes(ck, formats, rank0));
    columns.push_back({formats.Flags(), q});
  }
  for (auto& [name, w] : columns) {
    MemoryPlanColumn c;
    c.name = name;
    c.weights = w;
    c.kv_bytes = static_cast<double>(kv.total_bytes);
    c.scratch_bytes = scratch;
    plan.columns.push_back(c);
  }
  return plan;
}

int RunInspect(int argc, char** argv) {
  Args args;
  std::string error;
  if (!args.Parse(argc, argv,
                  {"model", "max-context", "block-size", "kv-cache-dtype", "max-sequences",
                   "kv-cache-memory", "tensor-parallel-size", "experts", "dense", "lm-head",
                   "max-num-batched-tokens"},
                  {"json", "expert-parallel"}, &error) ||
      !args.Has("model")) {
    std::fprintf(stderr,
                 "error: %s\nusage: mimo inspect --model DIR [--json] [--max-context N "
                 "[--block-size N] [--kv-cache-dtype f32|bf16|fp8] [--max-sequences N] "
                 "[--kv-cache-memory BYTES]] [--tensor-parallel-size N [--expert-parallel]] "
                 "[--experts|--dense|--lm-head fp8|int8|mxfp4] [--max-num-batched-tokens N]\n",
                 error.empty() ? "--model is required" : error.c_str());
    return 2;
  }
  auto opened = Checkpoint::Open(args.Get("model"));
  if (!opened.ok()) {
    std::fprintf(stderr, "error: %s\n", opened.status().message().c_str());
    return 1;
  }
  const Checkpoint& ck = **opened;
  auto layouts = ck.Fp8LayoutCounts();
  if (!layouts.ok()) {
    std::fprintf(stderr, "error: %s\n", layouts.status().message().c_str());
    return 1;
  }
  auto mxfp4 = ck.Mxfp4WeightCount();
  if (!mxfp4.ok()) {
    std::fprintf(stderr, "error: %s\n", mxfp4.status().message().c_str());
    return 1;
  }
  const ModelVariant variant = ck.Variant();
  const std::vector<Checkpoint::SkippedGroup> skipped = ck.SkippedGroups();
  const ModelConfig& c = ck.config();
  KindSummary full, swa;
  int moe_layers = 0;
  for (const LayerConfig& l : c.layers) {
    KindSummary& k = l.attention == AttentionKind::kFull ? full : swa;
    if (!k.first) k.first = &l;
    k.layers++;
    moe_layers += l.ffn == FfnKind::kMoe;
  }
  const std::string arch = c.architectures.empty() ? "" : c.architectures[0];
  // KV memory plan (--max-context): bytes per token of full layers, the fixed SWA bytes per
  // sequence, and how many tokens fit. Like the engine's cache it covers the MTP layers too
  // (sliding-window layers after the main ones, MimoV2Model::KvLayerConfigs).
  std::optional<KvMemoryPlan> kv_plan;
  ModelConfig kv_config = c;
  for (int i = 0; i < ck.NumMtpLayers(); ++i) kv_config.layers.push_back(c.mtp_layer);
  if (args.Has("max-context")) {
    KvMemoryPlanOptions po;
    po.block_size = static_cast<int>(args.GetInt("block-size", 16));
    auto dt = ParseKvCacheDType(args.Get("kv-cache-dtype", "bf16"));
    if (!dt.ok()) {
      std::fprintf(stderr, "error: %s\n", dt.status().message().c_str());
      return 2;
    }
    po.kv_dtype = *dt;
    po.max_context = args.GetInt("max-context", 4096);
    po.max_sequences = static_cast<int>(args.GetInt("max-sequences", 1));
    po.budget_bytes = args.GetInt("kv-cache-memory", 0);
    auto plan = PlanKvMemory(kv_config, po);
    if (!plan.ok()) {
      std::fprintf(stderr, "error: %s\n", plan.status().message().c_str());
      return 1;
    }
    kv_plan = *plan;
  }
  // --tensor-parallel-size N: what each rank holds (weights from the headers; KV for the same
  // --max-context plan with the rank's kv heads only).
  const int tp = static_cast<int>(args.GetInt("tensor-parallel-size", 1));
  const bool ep = args.Has("expert-parallel");
  std::vector<double> rank_bytes;
  std::optional<KvMemoryPlan> rank_kv;
  double lm_bytes = 0;
  if (tp > 1) {
    auto per_rank = TpWeightBytesPerRank(ck, tp, ep);
    if (!per_rank.ok()) {
      std::fprintf(stderr, "error: %s\n", per_rank.status().message().c_str());
      return 1;
    }
    rank_bytes = *per_rank;
    for (const std::string& n : ck.TensorNames()) lm_bytes += ck.FindTensor(n)->entry->nbytes;
    if (kv_plan) {
      ModelConfig rank_config = kv_config;
      auto layers = TpKvLayerConfigs(c, ck.NumMtpLayers(), 0, tp);
      if (!layers.ok()) {
        std::fprintf(stderr, "error: %s\n", layers.status().message().c_str());
        return 1;
      }
      rank_config.layers = *layers;
      KvMemoryPlanOptions po;
      po.block_size = kv_plan->block_size;
      po.kv_dtype = kv_plan->kv_dtype;
      po.max_context = kv_plan->max_context;
      po.max_sequences = kv_plan->max_sequences;
      po.budget_bytes = args.GetInt("kv-cache-memory", 0);
      auto plan = PlanKvMemory(rank_config, po);
      if (!plan.ok()) {
        std::fprintf(stderr, "error: %s\n", plan.status().message().c_str());
        return 1;
      }
      rank_kv = *plan;
    }
  } else if (tp < 1 || ep) {
    std::fprintf(stderr, "error: --tensor-parallel-size must be >= 1 (> 1 for --expert-parallel)\n");
    return 2;
  }
  const auto bytes = ck.BytesByDType();
  const size_t num_tensors = ck.TensorNames().size();
  auto memory_plan = PlanMemory(args, ck, kv_config, tp, ep);
  if (!memory_plan.ok()) {
    std::fprintf(stderr, "error: %s\n", memory_plan.status().message().c_str());
    return 2;
  }

  if (args.Has("json")) {
    std::string o = "{";
    o += "\"variant\": " + JsonString(variant.name) +
         ", \"variant_generation\": " + JsonString(variant.generation) +
         ", \"variant_size\": " + JsonString(variant.size) +
         ", \"variant_reason\": " + JsonString(variant.reason);
    o += ", \"architecture\": " + JsonString(arch) +
         ", \"model_type\": " + JsonString(c.model_type);
    o += ", \"num_hidden_layers\": " + std::to_string(c.num_hidden_layers);
    o += ", \"hidden_size\": " + std::to_string(c.hidden_size);
    o += ", \"vocab_size\": " + std::to_string(c.vocab_size);
    o += ", \"full_attention\": " + AttentionJson(full);
    o += ", \"sliding_window_attention\": " + AttentionJson(swa);
    o += ", \"asymmetric_kv\": " + std::string(c.has_asymmetric_kv() ? "true" : "false");
    o += ", \"moe_layers\": " + std::to_string(moe_layers);
    o += ", \"dense_layers\": " + std::to_string(c.num_hidden_layers - moe_layers);
    o += ", \"n_routed_experts\": " + std::to_string(c.n_routed_experts);
    o += ", \"num_experts_per_tok\": " + std::to_string(c.num_experts_per_tok);
    o += ", \"n_group\": " + std::to_string(c.n_group);
    o += ", \"topk_group\": " + std::to_string(c.topk_group);
    o += ", \"routed_scaling_factor\": " + Num(c.routed_scaling_factor);
    o += ", \"attention_value_scale\": " + Num(c.attention_value_scale);
    o += ", \"layernorm_epsilon\": " + Num(c.layernorm_epsilon);
    o += ", \"fp8\": " + std::string(c.fp8 ? "true" : "false");
    o += ", \"mxfp4_weights\": " + std::to_string(*mxfp4);
    o += ", \"moe_router_dtype\": " + JsonString(c.moe_router_dtype);
    o += ", \"num_nextn_predict_layers\": " + std::to_string(c.num_nextn_predict_layers);
    o += ", \"num_files\": " + std::to_string(ck.NumFiles());
    o += ", \"num_tensors\": " + std::to_string(num_tensors);
    o += ", \"num_skipped_multimodal_tensors\": " + std::to_string(ck.SkippedTensorNames().size());
    o += ", \"skipped_tensors\": [";
    for (size_t i = 0; i < ck.SkippedTensorNames().size(); ++i) {
      o += (i ? ", " : "") + JsonString(ck.SkippedTensorNames()[i]);
    }
    o += "], \"skipped_groups\": {";
    for (size_t i = 0; i < skipped.size(); ++i) {
      o += (i ? ", " : "") + JsonString(skipped[i].prefix) + ": {\"tensors\": " +
           std::to_string(skipped[i].tensors) + ", \"bytes\": " +
           std::to_string(skipped[i].bytes) + "}";
    }
    o += "}";
    o += ", \"mtp_layers\": " + std::to_string(ck.NumMtpLayers());
    o += ", \"bytes_by_dtype\": {";
    bool first = true;
    for (const auto& [dtype, n] : bytes) {
      o += (first ? "" : ", ") + JsonString(std::string(DTypeName(dtype))) + ": " +
           std::to_string(n);
      first = false;
    }
    o += "}, \"fp8_layouts\": {";
    first = true;
    for (const auto& [layout, n] : *layouts) {
      o += (first ? "" : ", ") + JsonString(std::string(Fp8LayoutName(layout))) + ": " +
           std::to_string(n);
      first = false;
    }
    o += "}, \"notes\": [";
    for (size_t i = 0; i < c.parse_notes.size(); ++i) {
      o += (i ? ", " : "") + JsonString(c.parse_notes[i]);
    }
    o += "]";
    if (kv_plan) {
      const KvMemoryPlan& p = *kv_plan;
      o += ", \"kv_cache\": {\"kv_dtype\": " + JsonString(std::string(DTypeName(p.kv_dtype)));
      o += ", \"block_size\": " + std::to_string(p.block_size);
      o += ", \"num_full_layers\": " + std::to_string(p.num_full_layers);
      o += ", \"num_swa_layers\": " + std::to_string(p.num_swa_layers);
      o += ", \"swa_blocks_per_sequence\": " + std::to_string(p.swa_blocks_per_sequence);
      o += ", \"max_context\": " + std::to_string(p.max_context);
      o += ", \"full_bytes_per_token\": " + std::to_string(p.full_bytes_per_token);
      o += ", \"swa_bytes_per_sequence\": " + std::to_string(p.swa_bytes_per_sequence);
      o += ", \"full_bytes_per_sequence\": " + std::to_string(p.full_bytes_per_sequence);
      o += ", \"unbounded_swa_bytes_per_sequence\": " +
           std::to_string(p.unbounded_swa_bytes_per_sequence);
      o += ", \"total_bytes\": " + std::to_string(p.total_bytes);
      o += ", \"tokens_that_fit\": " + std::to_string(p.tokens_that_fit) + "}";
    }
    if (tp > 1) {
      o += ", \"tensor_parallel\": {\"size\": " + std::to_string(tp) +
           ", \"expert_parallel\": " + (ep ? "true" : "false") +
           ", \"language_model_bytes\": " + Num(lm_bytes) + ", \"weight_bytes_per_rank\": [";
      for (int r = 0; r < tp; ++r) o += (r ? ", " : "") + Num(rank_bytes[r]);
      o += "]";
      if (rank_kv) {
        o += ", \"kv_cache_per_rank\": {\"full_bytes_per_token\": " +
             std::to_string(rank_kv->full_bytes_per_token) + ", \"swa_bytes_per_sequence\": " +
             std::to_string(rank_kv->swa_bytes_per_sequence) + ", \"total_bytes\": " +
             std::to_string(rank_kv->total_bytes) + ", \"tokens_that_fit\": " +
             std::to_string(rank_kv->tokens_that_fit) + "}";
      }
      o += "}";
    }
    o += ", \"memory_plan\": " + MemoryPlanJson(*memory_plan);
    o += "}";
    std::printf("%s\n", o.c_str());
    return 0;
  }

  std::printf("model            %s\n", ck.dir().c_str());
  std::printf("variant          %s (%s storage, %s size: %s)\n", variant.name.c_str(),
              variant.generation.c_str(), variant.size.c_str(), variant.reason.c_str());
  std::printf("architecture     %s (%s)\n", arch.c_str(), c.model_type.c_str());
  std::printf("layers           %d: %d full attention, %d sliding window; %d MoE, %d dense\n",
              c.num_hidden_layers, full.layers, swa.layers, moe_layers,
              c.num_hidden_layers - moe_layers);
  PrintAttention("full attention", full);
  PrintAttention("sliding window", swa);
  std::printf("asymmetric KV    %s\n", c.has_asymmetric_kv() ? "yes" : "no");
  std::printf("sizes            hidden %d, vocab %d, intermediate %d, moe_intermediate %d\n",
              c.hidden_size, c.vocab_size, c.intermediate_size, c.moe_intermediate_size);
  std::printf(
      "experts          %d routed, top-%d, groups %d (keep %d), routed_scaling_factor %g, "
      "norm_topk_prob %s\n",
      c.n_routed_experts, c.num_experts_per_tok, c.n_group, c.topk_group, c.routed_scaling_factor,
      c.norm_topk_prob ? "yes" : "no");
  std::printf(
      "norm / values    layernorm_epsilon %g, attention_value_scale %g, tied embeddings "
      "%s\n",
      c.layernorm_epsilon, c.attention_value_scale, c.tie_word_embeddings ? "yes" : "no");
  std::printf("MTP layers       %d\n", ck.NumMtpLayers());
  std::printf("tensors          %zu in %zu file(s); %zu multimodal tensors skipped\n", num_tensors,
              ck.NumFiles(), ck.SkippedTensorNames().size());
  for (const Checkpoint::SkippedGroup& g : skipped) {
    std::printf("skipped          %s* %d tensors, %s (not loaded: vision/audio towers)\n",
                g.prefix.c_str(), g.tensors, HumanBytes(g.bytes).c_str());
  }
  std::printf("bytes by dtype  ");
  for (const auto& [dtype, n] : bytes) {
    std::printf(" %s %s;", std::string(DTypeName(dtype)).c_str(), HumanBytes(n).c_str());
  }
  std::printf("\n");
  if (c.fp8) {
    std::printf("fp8              block %dx%d, %zu ignored layers; layouts:",
                c.weight_block_size[0], c.weight_block_size[1], c.ignored_layers.size());
    for (const auto& [layout, n] : *layouts) {
      std::printf(" %s x%d", std::string(Fp8LayoutName(layout)).c_str(), n);
    }
    std::printf("\n");
  } else {
    std::printf("fp8              no\n");
  }
  if (c.mxfp4 || *mxfp4 > 0) {
    std::printf("mxfp4            %d weights (E2M1 codes + one E8M0 exponent per %d columns)\n",
                *mxfp4, c.mxfp4_block_size);
  }
  std::printf("router           %s; num_nextn_predict_layers %d\n", c.moe_router_dtype.c_str(),
              c.num_nextn_predict_layers);
  for (const std::string& note : c.parse_notes) std::printf("note             %s\n", note.c_str());
  if (kv_plan) {
    std::printf("\nKV cache (%d main + %d MTP layers)\n%s", c.num_hidden_layers,
                ck.NumMtpLayers(), FormatKvMemoryPlan(*kv_plan).c_str());
    // The prefix cache's tiers hold the main layers' blocks (README, "Prefix cache below the KV
    // pool"): every full-attention block, and the sliding-window blocks of a checkpoint (what a
    // hit at the last two block boundaries reads, KvCacheManager::HitWindowBlocks).
    int64_t full = 0, swa = 0;
    int window = 0;
    const int64_t es = static_cast<int64_t>(DTypeSize(kv_plan->kv_dtype));
    for (const LayerConfig& l : c.layers) {
      const int64_t t = int64_t{l.num_key_value_heads} * (l.head_dim + l.v_head_dim) * es;
      if (l.attention == AttentionKind::kSlidingWindow) {
        swa += t;
        window = std::max(window, l.sliding_window);
      } else {
        full += t;
      }
    }
    const int bs = kv_plan->block_size, k = 1 << 20;
    const int64_t blocks = window > 0 ? k - ((k - 1) * bs - window + 1) / bs : 0;
    std::printf(
        "  prefix cache tiers: %lld bytes per token of prefix (full layers) + %.2f MiB per "
        "checkpoint (sliding-window layers, %lld blocks; two per turn)\n\n",
        static_cast<long long>(full), static_cast<double>(blocks * bs * swa) / (1 << 20),
        static_cast<long long>(blocks));
  }
  if (tp > 1) {
    std::printf("\ntensor parallel  %d ranks%s: language model %s; weights per rank:", tp,
                ep ? ", expert parallel" : "", HumanBytes(static_cast<uint64_t>(lm_bytes)).c_str());
    for (int r = 0; r < tp; ++r) {
      std::printf(" %s", HumanBytes(static_cast<uint64_t>(rank_bytes[r])).c_str());
    }
    std::printf(" (rank 0 holds %.1f%% of the whole)\n", 100.0 * rank_bytes[0] / lm_bytes);
    if (rank_kv) {
      std::printf("KV cache per rank (its kv heads only)\n%s\n", FormatKvMemoryPlan(*rank_kv).c_str());
    }
  }
  std::printf("\n%s", FormatMemoryPlan(*memory_plan).c_str());
  return 0;
}

}  // namespace

MIMO_CLI_COMMAND("inspect",
                 "--model DIR [--json] [--max-context N ...] [--tensor-parallel-size N "
                 "[--expert-parallel]]",
                 RunInspect);

}  // namespace mimo::cli
