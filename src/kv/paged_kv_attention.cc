// PagedKvAttention: per layer, write K/V at the plan's slots and run the layer's backend.
#include "kv/paged_kv_attention.h"

#include <cmath>
#include <set>
#include <tuple>

#include "core/check.h"
#include "core/log.h"
#include "kv/block_pool.h"

namespace mimo {

StatusOr<DType> ParseKvCacheDType(const std::string& s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::kF32;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "fp8" || s == "fp8_e4m3") return DType::kF8E4M3;
  return InvalidArgument("unknown KV cache dtype '%s' (expected f32, bf16 or fp8)", s.c_str());
}

AttentionRequirements LayerAttentionRequirements(const LayerConfig& l, const PagedKvOptions& o) {
  AttentionRequirements r;
  r.head_dim = l.head_dim;
  r.v_head_dim = l.v_head_dim;
  r.sinks = l.has_sinks;
  r.sliding_window = l.attention == AttentionKind::kSlidingWindow;
  r.kv_dtype = o.kv_dtype;
  r.block_size = o.block_size;
  r.multi_token_queries = true;  // prefill chunks and speculative verification
  r.paged = true;
  return r;
}

StatusOr<std::vector<LayerBackendChoice>> ResolveLayerBackends(const ModelConfig& config,
                                                               const PagedKvOptions& opts) {
  const AttentionBackendRegistry& reg = opts.registry ? *opts.registry : BuiltinAttentionBackends();
  std::vector<LayerBackendChoice> out;
  for (int i = 0; i < static_cast<int>(config.layers.size()); ++i) {
    const LayerConfig& l = config.layers[i];
    auto choice = reg.Select(LayerAttentionRequirements(l, opts),
                             {opts.attention_backend, opts.strict_backend});
    if (!choice.ok()) {
      return Status(choice.status().code(),
                    StrFormat("layer %d: %s", i, choice.status().message().c_str()));
    }
    out.push_back({i, l.attention, choice->backend, choice->reason, choice->warning});
  }
  return out;
}

StatusOr<KvMemoryPlan> PlanKvCacheMemory(const ModelConfig& config, const PagedKvOptions& o) {
  KvMemoryPlanOptions po;
  po.block_size = o.block_size;
  po.kv_dtype = o.kv_dtype;
  po.budget_bytes = o.kv_cache_memory_bytes;
  if (po.budget_bytes <= 0 && o.kv_cache_memory_fraction > 0) {
    if (o.kv_cache_memory_fraction > 1) {
      return InvalidArgument("KV cache memory fraction %g must be in (0, 1]",
                             o.kv_cache_memory_fraction);
    }
    po.budget_bytes = static_cast<int64_t>(o.kv_cache_memory_fraction *
                                           static_cast<double>(PhysicalMemoryBytes()));
  }
  po.max_sequences = o.max_sequences;
  po.max_context = o.max_context;
  po.max_chunk_tokens = o.max_chunk_tokens;
  po.num_full_blocks_override = o.num_full_blocks_override;
  po.mtp_sequences_per_sequence = o.mtp_sequences_per_sequence;
  po.mtp_chunk_tokens = o.mtp_chunk_tokens;
  MIMO_ASSIGN_OR_RETURN(KvMemoryPlan plan, PlanKvMemory(config, po));
  // A cache that no memory could back is refused here, by its size, rather than by the mmap that
  // would fail (an abort) or the OOM killer once it fills.
  const int64_t memory = PhysicalMemoryAndSwapBytes();
  if (memory > 0 && plan.total_bytes > memory) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    return ResourceExhausted(
        "the KV cache would take %.2f GiB (%lld full-attention blocks of %d tokens for %d "
        "sequences), more than the %.2f GiB of RAM and swap here: lower --kv-cache-memory, "
        "--num-kv-blocks, --max-model-len or --max-num-seqs",
        static_cast<double>(plan.total_bytes) / kGiB,
        static_cast<long long>(plan.num_full_blocks), plan.block_size, plan.max_sequences,
        static_cast<double>(memory) / kGiB);
  }
  return plan;
}

KvGroupLayout MakeKvGroupLayout(const ModelConfig& config, const KvMemoryPlan& plan) {
  KvGroupLayout out;
  std::vector<std::tuple<AttentionKind, int, bool>> keys;  // [group] (kind, window, MTP)
  for (const LayerConfig& l : config.layers) {
    const bool swa = l.attention == AttentionKind::kSlidingWindow;
    const std::tuple<AttentionKind, int, bool> key{l.attention, swa ? l.sliding_window : 0, l.mtp};
    int g = 0;
    while (g < static_cast<int>(keys.size()) && keys[g] != key) ++g;
    if (g == static_cast<int>(keys.size())) {
      keys.push_back(key);
      const int64_t blocks = l.mtp ? plan.num_mtp_blocks
                             : swa ? plan.num_swa_blocks
                                   : plan.num_full_blocks;
      out.groups.push_back(
          {l.attention, swa ? l.sliding_window : 0, static_cast<int>(blocks), !l.mtp});
      if (l.mtp) out.mtp_group = g;
    }
    out.layer_group.push_back(g);
  }
  return out;
}

StatusOr<std::unique_ptr<PagedKvAttention>> PagedKvAttention::Create(const ModelConfig& config,
                                                                     const PagedKvOptions& o,
                                                                     const KvMemoryPlan& plan) {
  for (const LayerConfig& l : config.layers) {
    if (l.num_key_value_heads <= 0 || l.head_dim <= 0 || l.v_head_dim <= 0 ||
        l.num_attention_heads % l.num_key_value_heads != 0) {
      return InvalidArgument("layer geometry: %d heads, %d kv heads, K %d, V %d",
                             l.num_attention_heads, l.num_key_value_heads, l.head_dim,
                             l.v_head_dim);
    }
  }
  MIMO_ASSIGN_OR_RETURN(std::vector<LayerBackendChoice> backends, ResolveLayerBackends(config, o));
  std::set<std::string> warned;  // one warning per distinct fallback, not one per layer
  for (const LayerBackendChoice& c : backends) {
    if (!c.warning.empty() && warned.insert(c.warning).second) {
      MIMO_LOG_WARN("%s", c.warning.c_str());
    }
  }
  std::unique_ptr<PagedKvAttention> a(new PagedKvAttention());
  a->backends_ = std::move(backends);
  a->layout_ = MakeKvGroupLayout(config, plan);
  KvStorageOptions so;
  so.dtype = o.kv_dtype;
  so.fp8_scale_mode = o.fp8_scale_mode;
  so.fp8_scale = o.fp8_scale;
  for (size_t i = 0; i < config.layers.size(); ++i) {
    const LayerConfig& l = config.layers[i];
    const PagedKvLayout layout{a->layout_.groups[a->layout_.layer_group[i]].num_blocks,
                               o.block_size,
                               l.num_key_value_heads,
                               l.head_dim,
                               l.v_head_dim,
                               o.kv_dtype};
    a->storage_.emplace_back(layout, so);
  }
  return a;
}

StatusOr<std::unique_ptr<PagedKvAttention>> PagedKvAttention::CreateFromSpec(
    const ModelConfig& config, const KvCacheSpec& spec) {
  if (spec.num_layers != static_cast<int>(config.layers.size())) {
    return InvalidArgument("rank 0's KV cache has %d layers, this rank's model %d", spec.num_layers,
                           static_cast<int>(config.layers.size()));
  }
  KvMemoryPlan plan;  // only the block counts shape the groups
  plan.num_full_blocks = spec.num_full_blocks;
  plan.num_swa_blocks = spec.num_swa_blocks;
  plan.num_mtp_blocks = spec.num_mtp_blocks;
  return Create(config, spec.options, plan);
}

void PagedKvAttention::Forward(ExecContext& ctx, const KvStepPlan& plan, int layer,
                               const AttentionGeometry& g, const float* q, const float* k,
                               const float* v, const float* sinks, float* out) {
  MIMO_CHECK(layer >= 0 && layer < static_cast<int>(storage_.size()), "layer %d", layer);
  KvLayerStorage& s = storage_[layer];
  MIMO_CHECK(g.num_kv_heads == s.layout().num_kv_heads && g.head_dim == s.layout().head_dim &&
                 g.v_head_dim == s.layout().v_head_dim,
             "layer %d geometry (kv heads %d, K %d, V %d) differs from its cache (%d, %d, %d)",
             layer, g.num_kv_heads, g.head_dim, g.v_head_dim, s.layout().num_kv_heads,
             s.layout().head_dim, s.layout().v_head_dim);
  const int group = layout_.layer_group[layer];
  MIMO_CHECK(group < static_cast<int>(plan.groups.size()),
             "the step plan has %d KV groups, layer %d is in group %d",
             static_cast<int>(plan.groups.size()), layer, group);
  const KvGroupStep& step = plan.groups[group];
  s.Write(k, v, step.slots.data(), plan.batch.num_tokens);
  backends_[layer].backend->Run(ctx, g, s.view(), step.attention, q, sinks, out);
}

int64_t PagedKvAttention::GroupBlockBytes(int group) const {
  int64_t bytes = 0;
  for (size_t l = 0; l < storage_.size(); ++l) {
    if (layout_.layer_group[l] == group) bytes += storage_[l].block_bytes();
  }
  return bytes;
}

void PagedKvAttention::ReadGroupBlock(int group, int block, uint8_t* out) const {
  for (size_t l = 0; l < storage_.size(); ++l) {
    if (layout_.layer_group[l] != group) continue;
    storage_[l].ReadBlock(block, out);
    out += storage_[l].block_bytes();
  }
}

void PagedKvAttention::WriteGroupBlock(int group, int block, const uint8_t* in) {
  for (size_t l = 0; l < storage_.size(); ++l) {
    if (layout_.layer_group[l] != group) continue;
    storage_[l].WriteBlock(block, in);
    in += storage_[l].block_bytes();
  }
}

namespace {

// Shape and dtype words of a layer (and its fp8 scales when asked).
void LayerWords(size_t l, const KvLayerStorage& s, bool scales, std::vector<uint64_t>* words) {
  const PagedKvLayout& y = s.layout();
  words->insert(words->end(), {l, static_cast<uint64_t>(y.block_size),
                               static_cast<uint64_t>(y.num_kv_heads),
                               static_cast<uint64_t>(y.head_dim),
                               static_cast<uint64_t>(y.v_head_dim),
                               static_cast<uint64_t>(y.dtype)});
  if (scales && y.dtype == DType::kF8E4M3) {
    for (const std::vector<float>* v : {&s.k_scale(), &s.v_scale()}) {
      for (float f : *v) words->push_back(F32ToBits(f));
    }
  }
}

}  // namespace

std::optional<uint64_t> PagedKvAttention::GroupContentFingerprint(int group) const {
  std::vector<uint64_t> words;
  for (size_t l = 0; l < storage_.size(); ++l) {
    if (layout_.layer_group[l] != group) continue;
    if (!storage_[l].scales_fixed()) return std::nullopt;
    LayerWords(l, storage_[l], true, &words);
  }
  return HashWords(words);
}

uint64_t PagedKvAttention::GroupLayoutFingerprint(int group) const {
  std::vector<uint64_t> words;
  for (size_t l = 0; l < storage_.size(); ++l) {
    if (layout_.layer_group[l] == group) LayerWords(l, storage_[l], false, &words);
  }
  return HashWords(words);
}

std::vector<float> PagedKvAttention::GroupFp8Scales(int group) const {
  std::vector<float> out;
  for (size_t l = 0; l < storage_.size(); ++l) {
    if (layout_.layer_group[l] != group) continue;
    const KvLayerStorage& s = storage_[l];
    if (s.layout().dtype != DType::kF8E4M3 || !s.scales_fixed()) return {};
    out.insert(out.end(), s.k_scale().begin(), s.k_scale().end());
    out.insert(out.end(), s.v_scale().begin(), s.v_scale().end());
  }
  return out;
}

bool PagedKvAttention::PresetGroupFp8Scales(int group, const std::vector<float>& scales) {
  size_t need = 0;
  for (size_t l = 0; l < storage_.size(); ++l) {
    if (layout_.layer_group[l] != group) continue;
    if (storage_[l].layout().dtype != DType::kF8E4M3 || storage_[l].scales_fixed()) return false;
    need += storage_[l].k_scale().size() + storage_[l].v_scale().size();
  }
  if (need != scales.size()) return false;
  for (float f : scales) {
    if (!(f > 0) || !std::isfinite(f)) return false;
  }
  size_t at = 0;
  for (size_t l = 0; l < storage_.size(); ++l) {
    if (layout_.layer_group[l] != group) continue;
    KvLayerStorage& s = storage_[l];
    const size_t nk = s.k_scale().size(), nv = s.v_scale().size();
    std::vector<float> k(scales.begin() + at, scales.begin() + at + nk);
    std::vector<float> v(scales.begin() + at + nk, scales.begin() + at + nk + nv);
    if (!s.PresetFp8Scales(k, v)) return false;  // checked above: only a bad value gets here
    at += nk + nv;
  }
  return true;
}

}  // namespace mimo
