// PagedKvAttention: plan the step's slots once, then per layer write K/V and run the backend.
#include "kv/paged_kv_attention.h"

#include <cstring>
#include <set>

#include "core/check.h"
#include "core/log.h"

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

StatusOr<std::unique_ptr<PagedKvAttention>> PagedKvAttention::Create(const ModelConfig& config,
                                                                     const PagedKvOptions& o) {
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
  if (o.follower_spec) {  // tensor-parallel follower: exactly rank 0's blocks
    plan.num_full_blocks = o.follower_spec->num_full_blocks;
    plan.num_swa_blocks = o.follower_spec->num_swa_blocks;
    plan.num_mtp_blocks = o.follower_spec->num_mtp_blocks;
  }

  std::unique_ptr<PagedKvAttention> a(new PagedKvAttention());
  a->config_ = config;
  a->opts_ = o;
  a->plan_ = plan;
  a->backends_ = std::move(backends);
  // One KV-cache group per (kind, window): layers of a group share block tables.
  KvCacheManagerConfig mc;
  mc.block_size = o.block_size;
  mc.enable_prefix_caching = o.enable_prefix_caching;
  // One group per (kind, window, MTP): MTP layers get a pool of their own (their draft sequences
  // are not the main model's).
  std::vector<std::tuple<AttentionKind, int, bool>> keys;
  for (const LayerConfig& l : config.layers) {
    std::tuple<AttentionKind, int, bool> key{
        l.attention, l.attention == AttentionKind::kSlidingWindow ? l.sliding_window : 0, l.mtp};
    int g = 0;
    while (g < static_cast<int>(keys.size()) && keys[g] != key) ++g;
    if (g == static_cast<int>(keys.size())) {
      keys.push_back(key);
      const bool swa = std::get<0>(key) == AttentionKind::kSlidingWindow;
      const int64_t blocks = l.mtp ? plan.num_mtp_blocks
                             : swa ? plan.num_swa_blocks
                                   : plan.num_full_blocks;
      mc.groups.push_back({std::get<0>(key), std::get<1>(key), static_cast<int>(blocks), !l.mtp});
      if (l.mtp) a->mtp_group_ = g;
    }
    a->layer_group_.push_back(g);
  }
  a->manager_ = std::make_unique<KvCacheManager>(mc);
  KvStorageOptions so;
  so.dtype = o.kv_dtype;
  so.fp8_scale_mode = o.fp8_scale_mode;
  so.fp8_scale = o.fp8_scale;
  for (size_t i = 0; i < config.layers.size(); ++i) {
    const LayerConfig& l = config.layers[i];
    PagedKvLayout layout{mc.groups[a->layer_group_[i]].num_blocks,
                         o.block_size,
                         l.num_key_value_heads,
                         l.head_dim,
                         l.v_head_dim,
                         o.kv_dtype};
    a->storage_.emplace_back(layout, so);
  }
  a->layer_done_.assign(config.layers.size(), 0);
  return a;
}

bool PagedKvAttention::SameChunks(const StepBatch& batch) const {
  if (batch.chunks.size() != step_chunks_.size()) return false;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    const SequenceChunk &a = batch.chunks[i], &b = step_chunks_[i];
    if (a.seq_id != b.seq_id || a.token_begin != b.token_begin || a.num_tokens != b.num_tokens ||
        a.start_pos != b.start_pos) {
      return false;
    }
  }
  return true;
}

Status PagedKvAttention::PrepareStep(const StepBatch& batch) {
  // Design: one plan per step. Every layer of the step reuses the same slot mapping and block
  // tables; a batch seen again after a layer ran is the next step (e.g. the same prompt rerun).
  bool any_done = false;
  for (uint8_t d : layer_done_) any_done |= d != 0;
  if (prepared_ && !any_done && SameChunks(batch)) return Status::Ok();
  prepared_ = false;
  std::set<int> seen;
  int rows = 0;
  for (const SequenceChunk& c : batch.chunks) {
    if (!seen.insert(c.seq_id).second) {
      return InvalidArgument("step batch has sequence %d twice", c.seq_id);
    }
    if (c.num_tokens <= 0 || c.start_pos < 0 || c.token_begin < 0 ||
        c.token_begin + c.num_tokens > batch.num_tokens) {
      return InvalidArgument("sequence %d: bad chunk (rows %d+%d of %d, start_pos %d)", c.seq_id,
                             c.token_begin, c.num_tokens, batch.num_tokens, c.start_pos);
    }
    rows += c.num_tokens;
  }
  if (rows != batch.num_tokens) {
    return InvalidArgument("step batch: chunks cover %d rows, num_tokens is %d", rows,
                           batch.num_tokens);
  }
  KvCacheManager& m = *manager_;
  for (const SequenceChunk& c : batch.chunks) {
    // A chunk at position 0 of a sequence that already computed tokens starts a new prompt.
    if (m.HasSequence(c.seq_id) && c.start_pos == 0 && m.num_tokens(c.seq_id) > 0) {
      m.FreeSequence(c.seq_id);
    }
    if (!m.HasSequence(c.seq_id)) {
      if (c.start_pos != 0) {
        return InvalidArgument("sequence %d is not in the KV cache but starts at position %d",
                               c.seq_id, c.start_pos);
      }
      // Started implicitly (tools driving the model by hand): every group, MTP layers included.
      MIMO_RETURN_IF_ERROR(m.AddSequence(c.seq_id, {}, m.all_groups_mask()).status());
    }
    const int cached = m.num_tokens(c.seq_id);
    if (c.start_pos > cached) {
      return InvalidArgument("sequence %d: chunk starts at position %d but the cache holds %d",
                             c.seq_id, c.start_pos, cached);
    }
    if (c.start_pos < cached) MIMO_RETURN_IF_ERROR(m.Rewind(c.seq_id, c.start_pos));
    if (!m.AllocateSlots(c.seq_id, c.num_tokens, 0).has_value()) {
      return ResourceExhausted(
          "KV cache full: no room for %d tokens of sequence %d at position %d (free blocks per "
          "group: full/SWA %d/%d); raise --kv-cache-memory or preempt",
          c.num_tokens, c.seq_id, c.start_pos, m.num_free_blocks(0),
          m.num_groups() > 1 ? m.num_free_blocks(1) : 0);
    }
    m.CommitTokens(c.seq_id, c.num_tokens);
  }
  const int G = m.num_groups();
  step_slots_.assign(G, std::vector<int64_t>(batch.num_tokens, -1));
  step_batches_.assign(G, AttentionBatch{});
  for (int g = 0; g < G; ++g) {
    step_batches_[g].num_tokens = batch.num_tokens;
    for (const SequenceChunk& c : batch.chunks) {
      if (!m.InGroup(c.seq_id, g)) continue;  // e.g. MTP draft sequences outside the MTP pool
      m.SlotMapping(c.seq_id, g, c.start_pos, c.num_tokens, &step_slots_[g][c.token_begin]);
      const std::vector<int32_t>& table = m.BlockTable(c.seq_id, g);
      step_batches_[g].seqs.push_back(
          {c.token_begin, c.num_tokens, c.start_pos, table.data(), static_cast<int>(table.size())});
    }
  }
  step_chunks_ = batch.chunks;
  std::fill(layer_done_.begin(), layer_done_.end(), 0);
  prepared_ = true;
  return Status::Ok();
}

void PagedKvAttention::Forward(ExecContext& ctx, int layer, const AttentionGeometry& g,
                               const StepBatch& batch, const float* q, const float* k,
                               const float* v, const float* sinks, float* out) {
  MIMO_CHECK(layer >= 0 && layer < static_cast<int>(storage_.size()), "layer %d", layer);
  if (!follower_ && (!prepared_ || layer_done_[layer] || !SameChunks(batch))) {
    Status st = PrepareStep(batch);
    MIMO_CHECK(st.ok(), "%s", st.message().c_str());
  }
  if (follower_) {
    MIMO_CHECK(prepared_ && !layer_done_[layer] && SameChunks(batch),
               "tensor-parallel follower: layer %d ran without rank 0's step plan", layer);
  }
  KvLayerStorage& s = storage_[layer];
  MIMO_CHECK(g.num_kv_heads == s.layout().num_kv_heads && g.head_dim == s.layout().head_dim &&
                 g.v_head_dim == s.layout().v_head_dim,
             "layer %d geometry (kv heads %d, K %d, V %d) differs from its cache (%d, %d, %d)",
             layer, g.num_kv_heads, g.head_dim, g.v_head_dim, s.layout().num_kv_heads,
             s.layout().head_dim, s.layout().v_head_dim);
  const int group = layer_group_[layer];
  s.Write(k, v, step_slots_[group].data(), batch.num_tokens);
  backends_[layer].backend->Run(ctx, g, s.view(), step_batches_[group], q, sinks, out);
  layer_done_[layer] = 1;
}

bool PagedKvAttention::ReserveSlots(int seq, int num_new_tokens, int num_lookahead_tokens) {
  prepared_ = false;
  return manager_->AllocateSlots(seq, num_new_tokens, num_lookahead_tokens).has_value();
}

Status PagedKvAttention::AddMtpSequence(int seq, int start_pos) {
  if (mtp_group_ < 0) return InvalidArgument("the model has no MTP layers");
  prepared_ = false;
  return manager_->AddSequenceAt(seq, start_pos, 1u << mtp_group_);
}

Status PagedKvAttention::Rewind(int seq, int num_tokens) {
  prepared_ = false;
  return manager_->Rewind(seq, num_tokens);
}

StatusOr<int> PagedKvAttention::AttachCachedPrefix(int seq, std::span<const int32_t> prompt) {
  if (manager_->HasSequence(seq)) manager_->FreeSequence(seq);
  prepared_ = false;
  return manager_->AddSequence(seq, prompt);
}

void PagedKvAttention::RecordTokenIds(int seq, std::span<const int32_t> token_ids) {
  manager_->RecordTokenIds(seq, token_ids);
}

void PagedKvAttention::FreeSequence(int seq) {
  if (manager_->HasSequence(seq)) manager_->FreeSequence(seq);
  prepared_ = false;
}

// ---- tensor parallelism: the spec and the step plan as words (see kv_attention.h).
namespace {
constexpr int64_t kSpecVersion = 1;
}  // namespace

Status PagedKvAttention::ExportSpec(std::vector<int64_t>* w) const {
  const PagedKvOptions& o = opts_;
  float scale = o.fp8_scale;
  int32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof scale_bits);
  *w = {kSpecVersion,
        static_cast<int64_t>(config_.layers.size()),
        o.block_size,
        static_cast<int64_t>(o.kv_dtype),
        static_cast<int64_t>(o.fp8_scale_mode),
        scale_bits,
        o.strict_backend,
        o.enable_prefix_caching,
        plan_.num_full_blocks,
        plan_.num_swa_blocks,
        plan_.num_mtp_blocks,
        o.max_sequences,
        o.max_context,
        o.max_chunk_tokens,
        o.mtp_sequences_per_sequence,
        o.mtp_chunk_tokens,
        plan_.budget_bytes,
        static_cast<int64_t>(o.attention_backend.size())};
  for (char c : o.attention_backend) w->push_back(c);
  return Status::Ok();
}

StatusOr<PagedKvSpec> DecodePagedKvSpec(const std::vector<int64_t>& w) {
  if (w.size() < 18 || w[0] != kSpecVersion ||
      w.size() != 18 + static_cast<size_t>(w[17])) {
    return InvalidArgument("tensor parallel: malformed KV cache spec from rank 0");
  }
  PagedKvSpec s;
  PagedKvOptions& o = s.options;
  s.num_layers = static_cast<int>(w[1]);
  o.block_size = static_cast<int>(w[2]);
  o.kv_dtype = static_cast<DType>(w[3]);
  o.fp8_scale_mode = static_cast<Fp8ScaleMode>(w[4]);
  const int32_t scale_bits = static_cast<int32_t>(w[5]);
  std::memcpy(&o.fp8_scale, &scale_bits, sizeof scale_bits);
  o.strict_backend = w[6] != 0;
  o.enable_prefix_caching = w[7] != 0;
  s.num_full_blocks = w[8];
  s.num_swa_blocks = w[9];
  s.num_mtp_blocks = w[10];
  o.max_sequences = static_cast<int>(w[11]);
  o.max_context = w[12];
  o.max_chunk_tokens = static_cast<int>(w[13]);
  o.mtp_sequences_per_sequence = static_cast<int>(w[14]);
  o.mtp_chunk_tokens = static_cast<int>(w[15]);
  o.kv_cache_memory_bytes = w[16];
  for (int64_t i = 0; i < w[17]; ++i) o.attention_backend.push_back(static_cast<char>(w[18 + i]));
  return s;
}

StatusOr<std::unique_ptr<PagedKvAttention>> PagedKvAttention::CreateFollower(
    const ModelConfig& config, const PagedKvSpec& spec) {
  PagedKvOptions o = spec.options;
  o.follower_spec = &spec;
  MIMO_ASSIGN_OR_RETURN(std::unique_ptr<PagedKvAttention> a, Create(config, o));
  a->opts_.follower_spec = nullptr;
  a->follower_ = true;
  a->num_groups_ = a->manager_->num_groups();
  return a;
}

Status PagedKvAttention::ExportStep(const StepBatch& batch, std::vector<int64_t>* w) {
  MIMO_RETURN_IF_ERROR(PrepareStep(batch));
  w->clear();
  w->push_back(static_cast<int64_t>(step_batches_.size()));
  for (size_t g = 0; g < step_batches_.size(); ++g) {
    w->insert(w->end(), step_slots_[g].begin(), step_slots_[g].end());
    w->push_back(static_cast<int64_t>(step_batches_[g].seqs.size()));
    for (const AttentionSequence& s : step_batches_[g].seqs) {
      w->insert(w->end(), {s.query_begin, s.num_queries, s.start_pos, s.num_table_blocks});
      w->insert(w->end(), s.block_table, s.block_table + s.num_table_blocks);
    }
  }
  return Status::Ok();
}

Status PagedKvAttention::ImportStep(const StepBatch& batch, const std::vector<int64_t>& w) {
  if (!follower_) return Internal("ImportStep on rank 0's KV cache");
  size_t i = 0;
  auto next = [&]() -> int64_t { return i < w.size() ? w[i++] : -1; };
  const int64_t G = next();
  if (G != num_groups_) return InvalidArgument("step plan has %lld KV groups, this rank %d",
                                               static_cast<long long>(G), num_groups_);
  step_slots_.assign(G, std::vector<int64_t>(batch.num_tokens));
  step_batches_.assign(G, AttentionBatch{});
  imported_tables_.clear();
  std::vector<std::pair<int, int>> table_of;  // (group, seq index) per imported table
  for (int64_t g = 0; g < G; ++g) {
    for (int t = 0; t < batch.num_tokens; ++t) step_slots_[g][t] = next();
    step_batches_[g].num_tokens = batch.num_tokens;
    const int64_t nseq = next();
    for (int64_t s = 0; s < nseq; ++s) {
      AttentionSequence a;
      a.query_begin = static_cast<int>(next());
      a.num_queries = static_cast<int>(next());
      a.start_pos = static_cast<int>(next());
      a.num_table_blocks = static_cast<int>(next());
      std::vector<int32_t> table(std::max(a.num_table_blocks, 0));
      for (int32_t& b : table) b = static_cast<int32_t>(next());
      imported_tables_.push_back(std::move(table));
      table_of.push_back({static_cast<int>(g), static_cast<int>(step_batches_[g].seqs.size())});
      step_batches_[g].seqs.push_back(a);
    }
  }
  if (i != w.size()) return InvalidArgument("malformed step plan from rank 0");
  for (size_t k = 0; k < table_of.size(); ++k) {  // pointers once the vector stopped growing
    step_batches_[table_of[k].first].seqs[table_of[k].second].block_table =
        imported_tables_[k].data();
  }
  step_chunks_ = batch.chunks;
  std::fill(layer_done_.begin(), layer_done_.end(), 0);
  prepared_ = true;
  return Status::Ok();
}

StatusOr<std::unique_ptr<KvAttention>> MakePagedKvAttention(const ModelConfig& config,
                                                            const PagedKvOptions& opts) {
  MIMO_ASSIGN_OR_RETURN(std::unique_ptr<PagedKvAttention> a,
                        PagedKvAttention::Create(config, opts));
  return std::unique_ptr<KvAttention>(std::move(a));
}

}  // namespace mimo
