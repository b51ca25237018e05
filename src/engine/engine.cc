// The engine step: drain the input queue, schedule, one batched forward pass, sample the rows
// that need it, apply stop rules, emit events (see engine.h).
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "core/check.h"
#include "core/log.h"
#include "engine/model_runner.h"

namespace mimo {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
    default:
      return "";
  }
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<int32_t> ModelEosIds(const ModelConfig& config, const GenerationConfig& gen,
                                 const Tokenizer* tokenizer) {
  std::set<int32_t> ids(config.eos_token_ids.begin(), config.eos_token_ids.end());
  ids.insert(gen.eos_token_ids.begin(), gen.eos_token_ids.end());
  if (tokenizer) {
    for (const char* name : {"<|im_end|>", "<|endoftext|>"}) {
      const int32_t id = tokenizer->TokenToId(name);
      if (id >= 0) ids.insert(id);
    }
  }
  return {ids.begin(), ids.end()};
}

Engine::Engine(MimoV2Model& model, ExecContext ctx, const Tokenizer* tokenizer)
    : model_(model), ctx_(ctx), tokenizer_(tokenizer) {}

Engine::~Engine() { Shutdown(); }

StatusOr<std::unique_ptr<Engine>> Engine::Create(MimoV2Model& model, ExecContext ctx,
                                                 const Tokenizer* tokenizer,
                                                 const EngineOptions& o) {
  const ModelConfig& cfg = model.config();
  const SchedulerOptions& so = o.scheduler;
  if (so.max_num_seqs < 1) return InvalidArgument("max_num_seqs must be >= 1, got %d", so.max_num_seqs);
  if (so.max_num_batched_tokens < 1) {
    return InvalidArgument("max_num_batched_tokens must be >= 1, got %d", so.max_num_batched_tokens);
  }
  if (o.max_model_len < 0) return InvalidArgument("max_model_len must be >= 0");
  std::unique_ptr<Engine> e(new Engine(model, ctx, tokenizer));
  const int model_len = o.max_model_len > 0 ? o.max_model_len
                        : cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings
                                                          : 4096;
  // Without a speculator the step's speculative stage is the null one (NoSpeculator).
  e->spec_ = o.speculator ? o.speculator : std::make_shared<NoSpeculator>();
  Speculator* spec = e->spec_.get();
  PagedKvOptions kv = o.kv;
  kv.mtp_sequences_per_sequence = spec->mtp_sequences_per_sequence();
  kv.mtp_chunk_tokens = spec->mtp_chunk_tokens();
  SchedulerOptions sched = so;
  sched.prefix_hit_margin = spec->prefix_hit_margin();
  kv.max_sequences = so.max_num_seqs;
  kv.max_context = model_len;
  kv.max_chunk_tokens = so.max_num_batched_tokens;
  ModelConfig kv_config = cfg;
  // MTP layers (KV layer ids after the main ones) get a cache only when they draft.
  kv_config.layers = model.KvLayerConfigs();
  if (kv.mtp_sequences_per_sequence == 0) kv_config.layers.resize(cfg.num_hidden_layers);
  if (kv.kv_cache_memory_bytes <= 0 && kv.kv_cache_memory_fraction <= 0) {
    // Sized for every sequence at full length unless that exceeds half of physical memory.
    KvMemoryPlanOptions po;
    po.block_size = kv.block_size;
    po.kv_dtype = kv.kv_dtype;
    po.max_sequences = kv.max_sequences;
    po.max_context = kv.max_context;
    po.max_chunk_tokens = kv.max_chunk_tokens;
    MIMO_ASSIGN_OR_RETURN(KvMemoryPlan full, PlanKvMemory(kv_config, po));
    const int64_t half = PhysicalMemoryBytes() / 2;
    if (half > 0 && full.total_bytes > half) kv.kv_cache_memory_bytes = half;
  }
  MIMO_ASSIGN_OR_RETURN(e->kv_, KvCache::Create(kv_config, kv));
  const KvMemoryPlan& plan = e->kv_->memory_plan();
  int max_len = model_len;
  if (plan.num_full_layers > 0 && plan.tokens_that_fit < max_len) {
    if (o.max_model_len > 0) {
      return ResourceExhausted(
          "the KV cache holds %lld tokens, less than max_model_len %d: raise --kv-cache-memory "
          "or lower --max-model-len",
          static_cast<long long>(plan.tokens_that_fit), o.max_model_len);
    }
    max_len = static_cast<int>(plan.tokens_that_fit);
    MIMO_LOG_INFO("max_model_len lowered to %d: what one sequence can hold in the KV cache",
                  max_len);
  }
  e->max_model_len_ = max_len;
  e->max_waiting_ = std::max(1, o.max_waiting);
  e->vocab_size_ = cfg.vocab_size;
  e->eos_ids_ = o.eos_token_ids.empty() ? ModelEosIds(cfg, GenerationConfig{}, tokenizer)
                                        : o.eos_token_ids;
  e->scheduler_ = std::make_unique<Scheduler>(*e->kv_, sched);
  MIMO_RETURN_IF_ERROR(spec->Attach(*e->kv_, kv.block_size));
  // Where a later prompt may resume a sequence: up to the speculator's margin before its end,
  // unless the drafter's features go to the tiers with the K/V (DFlash's feature cache): then a
  // resume at the last boundary restores them, and the sliding-window checkpoints need not
  // cover the margin's boundaries (on the agent sessions with DFlash: 1,709 window blocks on disk
  // for a 1,025-token margin).
  e->kv_->set_checkpoint_lookback(e->kv_->feature_cache() != nullptr ? 1
                                                                     : sched.prefix_hit_margin);
  e->local_stats_.spec_accepted_per_pos.assign(spec->num_speculative_tokens(), 0);
  e->PublishStats();
  return e;
}

StatusOr<uint64_t> Engine::Submit(GenerationRequest req, OutputSink sink) {
  const int len = static_cast<int>(req.prompt_ids.size());
  if (len == 0) return InvalidArgument("the prompt is empty");
  for (int i = 0; i < len; ++i) {
    const int32_t id = req.prompt_ids[i];
    if (id < 0 || id >= vocab_size_) {
      return InvalidArgument("prompt token %d (at position %d) is outside the vocabulary [0, %lld)",
                             id, i, static_cast<long long>(vocab_size_));
    }
  }
  if (len >= max_model_len_) {
    return InvalidArgument(
        "the prompt has %d tokens but the context length (max_model_len) is %d: no room to "
        "generate",
        len, max_model_len_);
  }
  const StopParams& s = req.stop;
  if (s.max_tokens == 0 || s.max_tokens < -1) {
    return InvalidArgument("max_tokens must be >= 1, got %d", s.max_tokens);
  }
  if (s.max_tokens > 0 && static_cast<int64_t>(len) + s.max_tokens > max_model_len_) {
    return InvalidArgument(
        "max_tokens %d plus the prompt's %d tokens exceed the context length (max_model_len) %d",
        s.max_tokens, len, max_model_len_);
  }
  if (s.min_tokens < 0 || (s.max_tokens > 0 && s.min_tokens > s.max_tokens)) {
    return InvalidArgument("min_tokens must be in [0, max_tokens], got %d", s.min_tokens);
  }
  for (int32_t id : s.stop_token_ids) {
    if (id < 0 || id >= vocab_size_) {
      return InvalidArgument("stop_token_ids: %d is outside the vocabulary", id);
    }
  }
  for (const std::string& st : s.stop) {
    if (st.empty()) return InvalidArgument("stop: an empty stop string");
  }
  if (!s.stop.empty() && tokenizer_ == nullptr) {
    return InvalidArgument("stop strings need the model's tokenizer, which is not loaded");
  }
  if (req.n < 1 || req.n > 64) return InvalidArgument("n must be in [1, 64], got %d", req.n);
  MIMO_RETURN_IF_ERROR(req.sampling.Validate(vocab_size_));

  Pending p;
  const uint64_t id = next_request_id_.fetch_add(1);
  p.id = id;
  p.params = std::make_shared<const GenerationRequest>(std::move(req));
  p.sink = std::make_shared<OutputSink>(std::move(sink));
  p.arrival_time = NowSeconds();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (static_cast<int>(pending_.size()) + stats_.num_waiting >= max_waiting_) {
      return ResourceExhausted("the waiting queue is full (%d requests); retry later",
                               max_waiting_);
    }
    pending_.push_back(std::move(p));
  }
  cv_.notify_all();
  return id;
}

void Engine::Cancel(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(request_id);
  }
  cv_.notify_all();
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

RequestOutput Engine::MakeOutput(const Request& r) const {
  RequestOutput o;
  o.request_id = r.request_id;
  o.index = r.index;
  o.num_prompt_tokens = r.num_prompt_tokens();
  o.num_cached_tokens = std::max(r.num_cached_tokens, 0);
  o.num_output_tokens = static_cast<int>(r.output.size());
  o.time = NowSeconds();
  o.arrival_time = r.arrival_time;
  o.first_scheduled_time = r.first_scheduled_time;
  o.first_token_time = r.first_token_time;
  return o;
}

void Engine::Admit(const Pending& p) {
  const GenerationRequest& g = *p.params;
  std::vector<int32_t> unique;
  if (g.sampling.repetition_penalty != 1.0f) {
    unique = g.prompt_ids;
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  }
  const uint64_t seed = g.sampling.seed ? *g.sampling.seed : RandomSeed();
  std::vector<int>& seqs = seqs_of_[p.id];
  int leader = -1;
  for (int i = 0; i < g.n; ++i) {
    auto r = std::make_unique<Request>();
    r->request_id = p.id;
    r->index = i;
    r->seq_id = next_seq_id_++;
    if (next_seq_id_ == (1 << 30)) next_seq_id_ = 0;
    r->params = p.params;
    r->sink = p.sink;
    r->max_tokens = g.stop.max_tokens > 0 ? g.stop.max_tokens
                                          : max_model_len_ - static_cast<int>(g.prompt_ids.size());
    r->rng = SamplerRng(seed + static_cast<uint64_t>(i));  // sample i: seed + i (as vLLM)
    r->prompt_unique = unique;
    r->stop = std::make_unique<StopChecker>(tokenizer_, p.params->stop, eos_ids_);
    if (g.constraint) r->constraint = g.constraint();
    r->arrival_time = p.arrival_time;
    // Samples 1.. reuse sample 0's prompt blocks through the prefix cache once it computed them.
    if (i == 0) {
      leader = r->seq_id;
    } else if (kv_->manager().group(0).pool().caching()) {
      r->prefill_leader = leader;
    }
    seqs.push_back(r->seq_id);
    scheduler_->Add(std::move(r));
  }
}

bool Engine::DrainInputs() {
  std::deque<Pending> pending;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending.swap(pending_);
    cancels.swap(cancels_);
  }
  for (const Pending& p : pending) Admit(p);
  for (uint64_t id : cancels) {
    auto it = seqs_of_.find(id);
    if (it == seqs_of_.end()) continue;
    const std::vector<int> seqs = it->second;
    for (int seq : seqs) {
      if (Request* r = scheduler_->Find(seq)) Abort(r, FinishReason::kAbort, "");
    }
  }
  return !pending.empty() || !cancels.empty();
}

// Emits the final event and forgets the request (its KV blocks are freed at once).
void Engine::Finish(Request* r, RequestOutput&& out) {
  out.finished = true;
  ++local_stats_.finished[static_cast<int>(out.finish_reason)];
  std::shared_ptr<OutputSink> sink = r->sink;
  const uint64_t id = r->request_id;
  const int seq = r->seq_id;
  auto it = seqs_of_.find(id);
  if (it != seqs_of_.end()) {
    it->second.erase(std::remove(it->second.begin(), it->second.end(), seq), it->second.end());
    if (it->second.empty()) seqs_of_.erase(it);
  }
  std::unique_ptr<Request> gone = scheduler_->Remove(seq);
  outbox_.emplace_back(std::move(sink), std::move(out));
}

void Engine::PublishAndFlush() {
  PublishStats();
  // After the stats: a client that saw its request end finds it counted in /metrics.
  std::vector<std::pair<std::shared_ptr<OutputSink>, RequestOutput>> out;
  out.swap(outbox_);
  for (auto& [sink, o] : out) (*sink)(std::move(o));
}

void Engine::Abort(Request* r, FinishReason reason, const std::string& error) {
  RequestOutput out = MakeOutput(*r);
  out.finish_reason = reason;
  out.error = error;
  Finish(r, std::move(out));
}

bool Engine::EmitTokens(Request* r, std::vector<SampledToken> tokens) {
  const GenerationRequest& g = *r->params;
  const bool counts = g.sampling.frequency_penalty != 0.0f || g.sampling.presence_penalty != 0.0f ||
                      g.sampling.repetition_penalty != 1.0f;
  RequestOutput out = MakeOutput(*r);
  StopChecker::Step s;
  for (SampledToken& t : tokens) {
    r->output.push_back(t.id);
    if (counts) ++r->output_counts[t.id];
    kv_->RecordTokenIds(r->seq_id, std::span<const int32_t>(&t.id, 1));
    ++local_stats_.generation_tokens;
    if (r->first_token_time == 0) r->first_token_time = NowSeconds();
    s = r->stop->Append(t.id, static_cast<int>(r->output.size()), r->max_tokens,
                        r->num_tokens() >= max_model_len_);
    out.token_ids.push_back(t.id);
    if (g.sampling.logprobs >= 0) out.logprobs.push_back(std::move(t));
    out.text += s.text;
    if (s.finished) break;  // nothing past a stop
    // The grammar reached its end (the constraint was advanced over all of `tokens`, which end
    // there when it terminates).
    if (&t == &tokens.back() && r->constraint && r->constraint->IsTerminated()) {
      out.text += r->stop->Finish();
      s.finished = true;
      s.by_length = false;
      s.stop_reason = "grammar";
      break;
    }
  }
  out.num_output_tokens = static_cast<int>(r->output.size());
  out.first_token_time = r->first_token_time;
  out.time = NowSeconds();
  if (!s.finished) {
    outbox_.emplace_back(r->sink, std::move(out));
    return false;
  }
  out.finish_reason = s.by_length ? FinishReason::kLength : FinishReason::kStop;
  out.stop_reason = s.stop_reason;
  Finish(r, std::move(out));
  return true;
}

bool Engine::SampleAndEmit(Request* r, const float* logits) {
  const GenerationRequest& g = *r->params;
  const TokenHistory h{r->prompt_unique, &r->output_counts};
  std::vector<int32_t> mask;
  if (static_cast<int>(r->output.size()) < g.stop.min_tokens) mask = r->stop->MinTokensMask(eos_ids_);
  const uint32_t* allowed = nullptr;
  if (r->constraint) {
    allowed_.assign((vocab_size_ + 31) / 32, 0u);
    r->constraint->FillMask(allowed_.data(), eos_ids_,
                            r->max_tokens - static_cast<int>(r->output.size()));
    allowed = allowed_.data();
  }
  SampledToken t = sampler_.Sample(logits, vocab_size_, g.sampling, h, mask, r->rng, allowed);
  if (r->constraint) r->constraint->Accept(t.id);
  return EmitTokens(r, {std::move(t)});
}

// Rows [1 + num_draft] for positions N .. N + num_draft; the accepted drafts and one more token
// are appended. KV written for rejected drafts is rolled back first, so their slots are never
// published to the prefix cache under the accepted tokens' ids.
bool Engine::VerifyAndEmit(Request* r, const float* logits, int num_draft) {
  VerifyResult v = spec_->Verify(*r, logits, vocab_size_, eos_ids_, sampler_);
  const int accepted = v.num_accepted;
  // The verifier's contract: the accepted drafts come first, unchanged, and at most one token
  // follows them. Anything else would corrupt the sequence's KV bookkeeping.
  bool valid = accepted >= 0 && accepted <= num_draft &&
               static_cast<int>(v.tokens.size()) >= accepted &&
               static_cast<int>(v.tokens.size()) <= accepted + 1 && !v.tokens.empty();
  for (int i = 0; valid && i < accepted; ++i) valid = v.tokens[i].id == r->draft[i];
  if (!valid) {
    Abort(r, FinishReason::kError,
          StrFormat("internal error: draft verification returned %d tokens with %d of %d drafts "
                    "accepted",
                    static_cast<int>(v.tokens.size()), accepted, num_draft));
    return true;
  }
  ++local_stats_.spec_num_drafts;
  local_stats_.spec_num_draft_tokens += num_draft;
  local_stats_.spec_num_accepted_tokens += accepted;
  for (int i = 0; i < accepted && i < static_cast<int>(local_stats_.spec_accepted_per_pos.size()); ++i) {
    ++local_stats_.spec_accepted_per_pos[i];
  }
  r->draft.clear();
  r->draft_probs.clear();
  r->num_computed = r->num_tokens() + accepted;  // x_N and the accepted drafts
  const Status st = kv_->Rewind(r->seq_id, r->num_computed);
  MIMO_CHECK(st.ok(), "%s", st.message().c_str());
  return EmitTokens(r, std::move(v.tokens));
}

// Drafts for the next step, for the requests that sampled and continue; max_drafts bounds each
// by its remaining max_tokens and context.
void Engine::Draft(const std::vector<Request*>& reqs) {
  std::vector<int> max_drafts;
  for (Request* r : reqs) {
    const int remaining = r->max_tokens - static_cast<int>(r->output.size());
    max_drafts.push_back(std::max(0, std::min({spec_->num_speculative_tokens(), remaining - 1,
                                               max_model_len_ - r->num_tokens()})));
  }
  spec_->Propose(ctx_, reqs, max_drafts);
}

// The schedule found requests that can never run: they end with an error. (Preempted requests
// lost their drafts with their KV: the speculator's state lives in the cache.)
void Engine::AbortUnschedulable(const SchedulePlan& plan) {
  for (int seq : plan.unschedulable) {
    Request* r = scheduler_->Find(seq);
    Abort(r, FinishReason::kError,
          StrFormat("the request needs more KV cache than there is (%d tokens; the cache holds "
                    "%lld): raise --kv-cache-memory",
                    r->num_tokens(), static_cast<long long>(kv_->memory_plan().tokens_that_fit)));
  }
}

// A step that scheduled nothing: true when it made progress (inputs, failed requests).
bool Engine::IdleStep(bool inputs, const SchedulePlan& plan) {
  const bool progress = inputs || !plan.unschedulable.empty() || !plan.preempted.empty();
  if (!progress && scheduler_->has_work()) {
    // Requests are queued or running, nothing new arrived, and none could be given a token to
    // compute: no later step would differ from this one. End them with an error rather than
    // spin (RunUntilIdle and the serving loop would never return).
    const std::string why = StrFormat(
        "internal error: the engine cannot advance the %d running and %d waiting requests",
        scheduler_->num_running(), scheduler_->num_waiting());
    std::fprintf(stderr, "mimo engine: %s\n", why.c_str());
    AbortAll(FinishReason::kError, why);
    PublishAndFlush();
    return true;
  }
  PublishAndFlush();
  return inputs || !plan.unschedulable.empty();
}

void Engine::MarkScheduled(const SchedulePlan& plan) {
  const double now = NowSeconds();
  for (const ScheduledChunk& c : plan.chunks) {
    Request* r = scheduler_->Find(c.seq_id);
    if (r->first_scheduled_time == 0) {
      r->first_scheduled_time = now;
      local_stats_.prompt_tokens += r->num_prompt_tokens();
      // At once rather than with the step's events, which come after its forward pass.
      if (r->params->report_admission) (*r->sink)(MakeOutput(*r));
    }
  }
}

// The scheduler reserved every slot, so a plan that fails is a bug: the step's requests end
// with it.
bool Engine::FailStep(const SchedulePlan& plan, const Status& status) {
  const std::string why = "internal error: " + status.message();
  std::fprintf(stderr, "mimo engine: %s\n", why.c_str());
  for (const ScheduledChunk& c : plan.chunks) {
    if (Request* r = scheduler_->Find(c.seq_id)) Abort(r, FinishReason::kError, why);
  }
  PublishAndFlush();
  return true;
}

// One batched forward pass by the KV plan: the logits of the rows to sample (and verify) into
// logits_, and what the speculator reads of every row (its features) into hidden_, which it
// observes at once.
void Engine::Forward(const SchedulePlan& plan, const KvStepPlan& kv_plan) {
  const std::vector<int> rows = plan.SampleRows();
  ForwardOutputs fo;
  if (!rows.empty()) {
    logits_.resize(rows.size() * static_cast<size_t>(vocab_size_));
    fo.logit_rows = rows;
    fo.logits = logits_.data();
  }
  if (spec_->reads_features()) {
    // The captured layers (DFlash) or the last hidden state (MTP).
    fo.capture_layers = spec_->capture_layers();
    const size_t width = std::max<size_t>(1, fo.capture_layers.size());
    hidden_.resize(kv_plan.batch.num_tokens * width * model_.config().hidden_size);
    (fo.capture_layers.empty() ? fo.prenorm_hidden : fo.captured) = hidden_.data();
  }
  RunForward(model_, ctx_, *kv_, kv_plan, plan.token_ids.data(), fo);
  local_stats_.weight_bytes_read += model_.last_forward_stats().weight_bytes;
  std::vector<Request*> chunk_reqs;
  for (const ScheduledChunk& c : plan.chunks) chunk_reqs.push_back(scheduler_->Find(c.seq_id));
  spec_->ObserveStep(plan, hidden_.data(), chunk_reqs);
}

// Every sampled chunk's rows: verified (drafts) or sampled, then committed (tokens appended,
// stop rules, events, rejected drafts rolled back, finished requests freed). Returns the
// requests that continue.
std::vector<Request*> Engine::SampleAndCommit(const SchedulePlan& plan) {
  size_t k = 0;
  std::vector<Request*> continuing;
  for (const ScheduledChunk& c : plan.chunks) {
    if (!c.sample) continue;
    Request* r = scheduler_->Find(c.seq_id);
    const float* rows = logits_.data() + k * vocab_size_;
    k += 1 + c.num_draft;
    bool done = c.num_draft > 0 ? VerifyAndEmit(r, rows, c.num_draft) : SampleAndEmit(r, rows);
    if (!done && r->num_computed != r->num_tokens() - 1) {
      // A continuing request computes its newest token next step; any other count means the
      // step's bookkeeping went wrong, and the request could never be scheduled again.
      Abort(r, FinishReason::kError,
            StrFormat("internal error: after a step %d of %d tokens are computed (expected %d)",
                      r->num_computed, r->num_tokens(), r->num_tokens() - 1));
      done = true;
    }
    if (!done) continuing.push_back(r);
  }
  return continuing;
}

// schedule -> plan KV -> forward (the drafter observes its features) -> verify / sample ->
// commit -> draft the next step's tokens. The speculative parts are stages of every step: with
// no speculator they are NoSpeculator's no-ops.
bool Engine::Step() {
  const bool inputs = DrainInputs();
  const SchedulePlan plan = scheduler_->Schedule();
  AbortUnschedulable(plan);
  if (plan.empty()) return IdleStep(inputs, plan);
  MarkScheduled(plan);
  const StatusOr<KvStepPlan> kv_plan = kv_->PlanStep(plan.ToStepBatch());
  if (!kv_plan.ok()) return FailStep(plan, kv_plan.status());
  Forward(plan, *kv_plan);
  scheduler_->OnStepDone(plan);
  Draft(SampleAndCommit(plan));
  kv_->FlushTierWrites();  // the blocks this step cached, to the disk tier's writer
  ++local_stats_.num_steps;
  PublishAndFlush();
  return true;
}

void Engine::PublishStats() {
  EngineStats s = local_stats_;
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  const SchedulerStats& ss = scheduler_->stats();
  s.num_preemptions = ss.num_preemptions;
  s.prefix_cache_queries = ss.prefix_cache_queries;
  s.prefix_cache_hits = ss.prefix_cache_hits;
  s.spec_draft_state_bytes = kv_->draft_state_bytes();
  if (const FeatureCache* fc = kv_->feature_cache()) {
    s.spec_feature_cache_bytes = fc->bytes();
    s.spec_feature_cache_capacity_bytes = fc->capacity_bytes();
  }
  if (const PrefixCacheTiers* t = kv_->tiers()) s.prefix_tiers = t->stats();
  const KvCacheManager& m = kv_->manager();
  for (int i = 0; i < m.num_groups(); ++i) {
    s.kv_free_blocks_per_group.push_back(m.num_free_blocks(i));
    s.kv_total_blocks_per_group.push_back(m.group(i).pool().num_blocks() - 1);
  }
  int g = 0;
  for (int i = 0; i < m.num_groups(); ++i) {
    if (m.group(i).kind_name() == std::string("full")) {
      g = i;
      break;
    }
  }
  if (m.num_groups() > 0) {
    s.num_kv_blocks = m.group(g).pool().num_blocks() - 1;  // the null block is never handed out
    s.num_kv_free_blocks = m.num_free_blocks(g);
    s.kv_cache_usage = s.num_kv_blocks > 0
                           ? 1.0 - static_cast<double>(s.num_kv_free_blocks) / s.num_kv_blocks
                           : 0.0;
  }
  std::lock_guard<std::mutex> lk(mu_);
  stats_ = s;
}

void Engine::RunUntilIdle() {
  while (Step() || scheduler_->has_work()) {
  }
}

void Engine::Loop() {
  for (;;) {
    bool busy = false;
    try {
      busy = Step() || scheduler_->has_work();
    } catch (const std::exception& e) {
      // A step that throws (out of memory, a bug) must not terminate the server: its requests
      // end with an error, and the engine goes on with the next ones.
      std::fprintf(stderr, "mimo engine: step failed: %s; ending the requests in flight\n",
                   e.what());
      AbortAll(FinishReason::kError, std::string("internal error: ") + e.what());
      PublishAndFlush();
    }
    std::unique_lock<std::mutex> lk(mu_);
    if (stop_) return;
    if (!busy) cv_.wait(lk, [&] { return stop_ || !pending_.empty() || !cancels_.empty(); });
    if (stop_) return;
  }
}

void Engine::Start() {
  MIMO_CHECK(!thread_.joinable(), "engine already started");
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Shutdown(FinishReason reason, const std::string& error) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!scheduler_) return;
  // Everything still queued or in flight ends with `reason`.
  DrainInputs();
  AbortAll(reason, error);
  PublishAndFlush();
}

void Engine::AbortAll(FinishReason reason, const std::string& error) {
  std::vector<int> seqs;
  for (const auto& [id, list] : seqs_of_) seqs.insert(seqs.end(), list.begin(), list.end());
  for (int seq : seqs) {
    if (Request* r = scheduler_->Find(seq)) Abort(r, reason, error);
  }
}

}  // namespace mimo
