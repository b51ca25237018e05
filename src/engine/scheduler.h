// The scheduler: which requests run in the next step, and which of their tokens. No prefill or
// decode phase (vLLM v1): every request has num_computed and num_tokens; each step spends a
// token budget so computed catches up with known tokens, which covers prefill, chunked prefill,
// decode, prefix-cache hits and recomputation after preemption with one rule. The result is a
// SchedulePlan: plain data (rows, positions, input ids, rows to sample) that a multi-process
// engine can broadcast. Owns the Requests; drives the KV cache's block tables (never its tensors).
// Not thread-safe; engine thread only.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "attention/kv_attention.h"
#include "engine/request.h"
#include "kv/kv_cache.h"

namespace mimo {

struct SchedulerOptions {
  int max_num_seqs = 16;             // running requests at most
  int max_num_batched_tokens = 512;  // token budget of one step (and largest chunk)
  // A prefix-cache hit leaves at least this many tokens to compute (speculative decoding: the
  // drafter needs the hidden states of the last window of positions), except over the leading
  // blocks whose features the KV cache's FeatureCache holds (KvCache::FeatureCachedPrefix).
  int prefix_hit_margin = 0;
};

// One request's rows in a step: positions start_pos .. start_pos + num_tokens - 1.
struct ScheduledChunk {
  int seq_id = 0;
  int start_pos = 0;
  int num_tokens = 0;
  bool sample = false;  // the chunk reaches the request's last known token: sample its last row
  int num_draft = 0;    // of its tokens, drafts to verify (sample: its last 1 + num_draft rows)
};

struct SchedulePlan {
  std::vector<ScheduledChunk> chunks;  // in row order
  std::vector<int32_t> token_ids;      // [num_tokens] input id of every row
  // Requests that can never run (alone they do not fit the cache): the engine fails them.
  std::vector<int> unschedulable;
  std::vector<int> preempted;  // requests preempted while planning (their drafts dropped)

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  bool empty() const { return chunks.empty(); }
  StepBatch ToStepBatch() const;
  // Rows whose logits are needed, in chunk order: for every sampled chunk its last 1 + num_draft.
  std::vector<int> SampleRows() const;
};

struct SchedulerStats {
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up at first admission
  int64_t prefix_cache_hits = 0;     // of those, tokens served from the cache
};

class Scheduler {
 public:
  Scheduler(KvCache& kv, const SchedulerOptions& opts);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request (FCFS).
  void Add(std::unique_ptr<Request> r);
  // Plans the next step and reserves its KV slots (preempting when the cache is full).
  SchedulePlan Schedule();
  // The step's forward pass ran: its tokens are computed.
  void OnStepDone(const SchedulePlan& plan);
  // Forgets a request (finished, cancelled or failed); its KV blocks are freed at once.
  std::unique_ptr<Request> Remove(int seq_id);
  Request* Find(int seq_id);

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  const SchedulerStats& stats() const { return stats_; }
  const std::vector<Request*>& running() const { return running_; }

 private:
  bool WaitsForLeader(const Request& r) const;
  void ScheduleRunning(SchedulePlan* plan, int* budget, bool* preempted);
  void AdmitWaiting(SchedulePlan* plan, int* budget);
  void Preempt(Request* victim);
  void AddChunk(Request* r, int num_tokens, SchedulePlan* plan);

  KvCache& kv_;
  SchedulerOptions opts_;
  std::unordered_map<int, std::unique_ptr<Request>> requests_;  // by seq id
  std::vector<Request*> running_;  // admission order: the last one is preempted first
  std::deque<Request*> waiting_;   // FCFS; preempted requests go back to the front
  std::vector<int> preempted_;     // this step's
  SchedulerStats stats_;
};

}  // namespace mimo
