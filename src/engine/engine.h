// The serving engine: many requests of different lengths sharing one model, each step one
// batched forward pass over every scheduled token (vLLM v1's EngineCore, llama.cpp's server
// context). One engine thread owns the scheduler, the KV cache and the model; any thread submits
// and cancels through a locked queue and receives per-request events through its OutputSink.
// The model and the KV cache know nothing of requests. One step reads: schedule (the scheduler
// reserves KV slots) -> plan the KV step (KvCache::PlanStep) -> forward by the plan (the
// speculator observes the rows' features) -> verify drafts / sample -> commit (token ids
// recorded, rejected drafts rolled back, finished requests freed) -> draft the next step's
// tokens. Speculation is a stage of every step, behind the Speculator interface: NoSpeculator
// when it is off, so the step never branches on it; the speculator's state lives in the KV cache.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculator.h"
#include "io/generation_config.h"
#include "kv/kv_cache.h"
#include "model/mimo_v2.h"
#include "tokenizer/bpe.h"

namespace mimo {

struct EngineOptions {
  SchedulerOptions scheduler;
  // Longest sequence (prompt + output). 0: the model's max_position_embeddings, lowered to what
  // one sequence can hold in the KV cache. Set explicitly, a cache too small for it is an error.
  int max_model_len = 0;
  int max_waiting = 1024;  // submissions queued beyond this are refused (ResourceExhausted)
  // Block size, dtype, memory budget, backend, prefix caching. max_sequences, max_context and
  // max_chunk_tokens are derived from the limits above. With no budget, the cache is sized for
  // max_num_seqs sequences of max_model_len, capped at half of physical memory.
  PagedKvOptions kv;
  std::vector<int32_t> eos_token_ids;  // empty: ModelEosIds()
  // Speculative decoding (e.g. spec/MtpSpeculator); null: off.
  std::shared_ptr<Speculator> speculator;
};

// The model's end-of-sequence set: config.json and generation_config.json eos ids, plus
// <|im_end|> and <|endoftext|> looked up by name when a tokenizer is given (V2.5 declares one id).
std::vector<int32_t> ModelEosIds(const ModelConfig& config, const GenerationConfig& gen,
                                 const Tokenizer* tokenizer);

struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  double kv_cache_usage = 0;  // fraction of full-attention KV blocks in use
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  // tokens
  int64_t prefix_cache_hits = 0;     // tokens, from every tier
  PrefixCacheTierStats prefix_tiers;  // the RAM and disk tiers below the KV pool
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t num_steps = 0;
  double weight_bytes_read = 0;  // by every forward pass so far (each distinct expert once a step)
  int64_t finished[static_cast<int>(FinishReason::kCount)] = {};
  int num_kv_free_blocks = 0;  // full-attention group (SWA group when the model has no full layers)
  int num_kv_blocks = 0;
  // Speculative decoding: verification steps with drafts, drafted and accepted tokens, and
  // accepted tokens per draft position.
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
  // Speculator state, held in the KV cache: the drafters' per-sequence state (DFlash's draft
  // context and pending features, MTP's hidden states) and the feature cache of prompt blocks
  // (DFlash), with its bound.
  int64_t spec_draft_state_bytes = 0;
  int64_t spec_feature_cache_bytes = 0;
  int64_t spec_feature_cache_capacity_bytes = 0;
  std::vector<int> kv_free_blocks_per_group;   // every KV-cache group (full, sliding window)
  std::vector<int> kv_total_blocks_per_group;  // allocatable blocks (null block excluded)
};

class Engine {
 public:
  // model, ctx.pool and tokenizer (may be null: no text, no stop strings) must outlive the engine.
  static StatusOr<std::unique_ptr<Engine>> Create(MimoV2Model& model, ExecContext ctx,
                                                  const Tokenizer* tokenizer,
                                                  const EngineOptions& opts);
  ~Engine();  // Shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- Any thread.
  // Validates (every error names the field) and queues the request; returns its id. Errors:
  // InvalidArgument (bad request, prompt or max_tokens beyond the context), ResourceExhausted
  // (waiting queue full).
  StatusOr<uint64_t> Submit(GenerationRequest request, OutputSink sink);
  // Ends a request wherever it is; its blocks are freed before the next step; its sink gets a
  // final event with FinishReason::kAbort. Unknown or finished ids are ignored.
  void Cancel(uint64_t request_id);
  EngineStats Stats() const;
  int max_model_len() const { return max_model_len_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  const KvMemoryPlan& kv_memory_plan() const { return kv_->memory_plan(); }

  // --- Driving: from one thread with Step()/RunUntilIdle(), or Start() an engine thread.
  // Applies queued submissions and cancellations, then runs one step. False when idle.
  bool Step();
  void RunUntilIdle();
  void Start();
  // Stops the engine thread (if started); requests still in flight end with `reason` (kAbort, or
  // kError with `error`, e.g. kShutdownError when a server's drain timed out).
  void Shutdown(FinishReason reason = FinishReason::kAbort, const std::string& error = "");

 private:
  Engine(MimoV2Model& model, ExecContext ctx, const Tokenizer* tokenizer);
  struct Pending {
    uint64_t id;
    std::shared_ptr<const GenerationRequest> params;
    std::shared_ptr<OutputSink> sink;
    double arrival_time;
  };
  bool DrainInputs();
  void Admit(const Pending& p);
  void Finish(Request* r, RequestOutput&& out);
  void Abort(Request* r, FinishReason reason, const std::string& error);
  void AbortAll(FinishReason reason, const std::string& error);  // every request in flight
  // Appends tokens (stop rules, KV token ids, one event); true when the request finished.
  bool EmitTokens(Request* r, std::vector<SampledToken> tokens);
  bool SampleAndEmit(Request* r, const float* logits);
  bool VerifyAndEmit(Request* r, const float* logits, int num_draft);
  // The step's stages, in order (Step reads as this list).
  void AbortUnschedulable(const SchedulePlan& plan);
  bool IdleStep(bool inputs, const SchedulePlan& plan);
  void MarkScheduled(const SchedulePlan& plan);
  bool FailStep(const SchedulePlan& plan, const Status& status);
  void Forward(const SchedulePlan& plan, const KvStepPlan& kv_plan);
  std::vector<Request*> SampleAndCommit(const SchedulePlan& plan);
  void Draft(const std::vector<Request*>& reqs);
  void PublishStats();
  // PublishStats, then deliver the events of the step (outbox_) to their sinks.
  void PublishAndFlush();
  RequestOutput MakeOutput(const Request& r) const;
  void Loop();

  MimoV2Model& model_;
  ExecContext ctx_;
  const Tokenizer* tokenizer_;
  int max_model_len_ = 0;
  int max_waiting_ = 0;
  int64_t vocab_size_ = 0;
  std::vector<int32_t> eos_ids_;

  // Engine thread only.
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  Sampler sampler_;
  std::vector<float> logits_;  // [sampled rows, vocab]
  std::vector<float> hidden_;  // [T, hidden or layers * hidden] the drafter's features of each row
  std::vector<uint32_t> allowed_;  // [ceil(vocab / 32)] a constrained request's mask
  std::shared_ptr<Speculator> spec_;  // never null: NoSpeculator without speculation
  std::unordered_map<uint64_t, std::vector<int>> seqs_of_;  // request id -> seq ids alive
  int next_seq_id_ = 0;
  EngineStats local_stats_;
  // Events made during a step, delivered at its end after the stats are published.
  std::vector<std::pair<std::shared_ptr<OutputSink>, RequestOutput>> outbox_;

  // Shared with submitting threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<uint64_t> cancels_;
  std::atomic<uint64_t> next_request_id_{1};
  bool stop_ = false;
  EngineStats stats_;  // snapshot published after every step
  std::thread thread_;
};

}  // namespace mimo
