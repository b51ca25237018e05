// Token-budget scheduling with chunked prefill, prefix-cache admission and preemption by
// recomputation (see scheduler.h).
#include "engine/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace mimo {

StepBatch SchedulePlan::ToStepBatch() const {
  StepBatch b;
  int row = 0;
  for (const ScheduledChunk& c : chunks) {
    b.chunks.push_back({c.seq_id, row, c.num_tokens, c.start_pos});
    row += c.num_tokens;
  }
  b.num_tokens = row;
  return b;
}

std::vector<int> SchedulePlan::SampleRows() const {
  std::vector<int> rows;
  int row = 0;
  for (const ScheduledChunk& c : chunks) {
    row += c.num_tokens;
    if (!c.sample) continue;
    for (int r = row - 1 - c.num_draft; r < row; ++r) rows.push_back(r);
  }
  return rows;
}

Scheduler::Scheduler(KvCache& kv, const SchedulerOptions& opts) : kv_(kv), opts_(opts) {
  MIMO_CHECK(opts.max_num_seqs > 0 && opts.max_num_batched_tokens > 0,
             "scheduler limits: %d sequences, %d tokens", opts.max_num_seqs,
             opts.max_num_batched_tokens);
}

void Scheduler::Add(std::unique_ptr<Request> r) {
  Request* p = r.get();
  MIMO_CHECK(!requests_.count(p->seq_id), "sequence %d scheduled twice", p->seq_id);
  p->status = RequestStatus::kWaiting;
  requests_.emplace(p->seq_id, std::move(r));
  waiting_.push_back(p);
}

Request* Scheduler::Find(int seq_id) {
  auto it = requests_.find(seq_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

bool Scheduler::WaitsForLeader(const Request& r) const {
  if (r.prefill_leader < 0) return false;
  auto it = requests_.find(r.prefill_leader);
  return it != requests_.end() && !it->second->prompt_computed;
}

void Scheduler::AddChunk(Request* r, int n, SchedulePlan* plan) {
  // Drafts the budget cut off are dropped (they are only proposals).
  const int reach = r->num_computed + n;
  if (reach < r->num_tokens_with_spec()) {
    const int keep = std::max(0, reach - r->num_tokens());
    r->draft.resize(keep);
    if (r->draft_probs.size() > r->draft.size()) r->draft_probs.resize(r->draft.size());
  }
  const bool sample = reach == r->num_tokens_with_spec();
  plan->chunks.push_back({r->seq_id, r->num_computed, n, sample,
                          sample ? static_cast<int>(r->draft.size()) : 0});
  for (int i = 0; i < n; ++i) plan->token_ids.push_back(r->token_at(r->num_computed + i));
}

void Scheduler::Preempt(Request* victim) {
  MIMO_CHECK(!running_.empty() && running_.back() == victim, "preempting out of order");
  running_.pop_back();
  kv_.FreeSequence(victim->seq_id);  // recomputed on readmission (mostly from the prefix cache)
  victim->num_computed = 0;
  victim->draft.clear();
  victim->draft_probs.clear();
  preempted_.push_back(victim->seq_id);
  victim->status = RequestStatus::kPreempted;
  waiting_.push_front(victim);
  ++stats_.num_preemptions;
}

// Running requests first, in admission order. When the cache has no room for one, the most
// recently admitted request is preempted (its blocks freed, its tokens recomputed later), until
// there is room or the request itself was the one preempted.
void Scheduler::ScheduleRunning(SchedulePlan* plan, int* budget, bool* preempted) {
  for (size_t i = 0; i < running_.size() && *budget > 0; ++i) {
    Request* r = running_[i];
    const int n = std::min(r->num_tokens_with_spec() - r->num_computed, *budget);
    if (n <= 0) continue;
    bool reserved = false;
    while (!(reserved = kv_.ReserveSlots(r->seq_id, n))) {
      Request* victim = running_.back();
      Preempt(victim);
      *preempted = true;
      if (victim == r) break;
    }
    if (!reserved) break;  // r was the last running request
    AddChunk(r, n, plan);
    *budget -= n;
  }
}

// Then waiting requests, FCFS, while the budget, the sequence limit and the cache allow. A
// request first attaches the longest cached prefix of its tokens; only the rest is computed.
void Scheduler::AdmitWaiting(SchedulePlan* plan, int* budget) {
  for (auto it = waiting_.begin(); it != waiting_.end() && *budget > 0 &&
                                   static_cast<int>(running_.size()) < opts_.max_num_seqs;) {
    Request* r = *it;
    if (WaitsForLeader(*r)) {
      ++it;
      continue;
    }
    std::vector<int32_t> tokens(r->prompt());
    tokens.insert(tokens.end(), r->output.begin(), r->output.end());
    // Lookup over a shortened list caps the hit so that the margin is computed, unless the
    // drafter restores the features of the positions the hit covers from the feature cache
    // (+ 1: the lookup keeps the list's last token to compute).
    size_t lookup = static_cast<size_t>(
        std::max<int64_t>(1, static_cast<int64_t>(tokens.size()) - opts_.prefix_hit_margin + 1));
    const int restorable = kv_.FeatureCachedPrefix(tokens);
    lookup = std::max(lookup, std::min(tokens.size(), static_cast<size_t>(restorable) + 1));
    StatusOr<int> hit =
        kv_.AttachCachedPrefix(r->seq_id, std::span<const int32_t>(tokens).first(
                                              std::min(lookup, tokens.size())));
    MIMO_CHECK(hit.ok(), "%s", hit.status().message().c_str());
    const int n = std::min(r->num_tokens() - *hit, *budget);
    if (!kv_.ReserveSlots(r->seq_id, n)) {
      kv_.FreeSequence(r->seq_id);
      // Nothing else holds memory: this request can never run.
      if (running_.empty() && plan->empty()) plan->unschedulable.push_back(r->seq_id);
      break;
    }
    kv_.RecordTokenIds(r->seq_id, std::span<const int32_t>(tokens).subspan(*hit));
    r->num_computed = *hit;
    if (r->num_cached_tokens < 0) {
      r->num_cached_tokens = std::min(*hit, r->num_prompt_tokens());
      stats_.prefix_cache_queries += r->num_prompt_tokens();
      stats_.prefix_cache_hits += r->num_cached_tokens;
    }
    r->status = RequestStatus::kRunning;
    it = waiting_.erase(it);
    running_.push_back(r);
    AddChunk(r, n, plan);
    *budget -= n;
  }
}

SchedulePlan Scheduler::Schedule() {
  SchedulePlan plan;
  preempted_.clear();
  int budget = opts_.max_num_batched_tokens;
  bool preempted = false;
  ScheduleRunning(&plan, &budget, &preempted);
  // After a preemption the cache is full: admitting would only preempt again (vLLM does the same).
  if (!preempted) AdmitWaiting(&plan, &budget);
  plan.preempted = preempted_;
  return plan;
}

void Scheduler::OnStepDone(const SchedulePlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) {
    Request* r = Find(c.seq_id);
    MIMO_CHECK(r != nullptr && r->num_computed == c.start_pos, "step of unknown sequence %d",
               c.seq_id);
    r->num_computed += c.num_tokens;
    if (r->num_computed >= r->num_prompt_tokens() && !r->prompt_computed) {
      r->prompt_computed = true;
      kv_.CheckpointSequence(r->seq_id);  // where the conversation's next turn resumes
    }
  }
}

std::unique_ptr<Request> Scheduler::Remove(int seq_id) {
  auto it = requests_.find(seq_id);
  if (it == requests_.end()) return nullptr;
  std::unique_ptr<Request> r = std::move(it->second);
  requests_.erase(it);
  running_.erase(std::remove(running_.begin(), running_.end(), r.get()), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), r.get()), waiting_.end());
  kv_.FreeSequence(seq_id);
  r->status = RequestStatus::kFinished;
  return r;
}

}  // namespace mimo
