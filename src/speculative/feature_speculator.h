// FeatureSpeculator: what the MTP and DFlash speculators share. Both read the target's features
// of every row of a step (MTP the pre-norm hidden state, DFlash the captured layers), keep them
// per position from the step that computed them until the drafter reads them, score drafts with
// a DraftHead, and leave verification to the engine's chain rule (VerifyDrafts). Their
// per-sequence state is a DraftState the KV cache owns: it is created on a sequence's first
// step and freed with the sequence (finished, cancelled or preempted), so neither tracks a
// request's lifetime. Engine thread only.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "engine/speculator.h"
#include "kv/kv_cache.h"
#include "speculative/draft_head.h"

namespace mimo {

struct ScheduledChunk;

// Feature rows by position, kept until the drafter reads them; a position computed again (after
// a rollback) overwrites its row.
class PositionFeatures {
 public:
  // Keeps the rows [n, width] of positions start_pos .. start_pos + n - 1 from position lo on.
  void Keep(int start_pos, int n, int lo, const float* rows, int64_t width);
  void Set(int pos, const float* row, int64_t width) { rows_[pos].assign(row, row + width); }
  const std::vector<float>* Find(int pos) const;
  void DropBefore(int pos) { rows_.erase(rows_.begin(), rows_.lower_bound(pos)); }
  int64_t bytes() const;

 private:
  std::map<int, std::vector<float>> rows_;  // position -> [width]
};

class FeatureSpeculator : public Speculator {
 public:
  // Walks the step's chunks with their feature rows: ObserveChunk for each.
  void ObserveStep(const SchedulePlan& plan, const float* features,
                   std::span<Request* const> chunk_requests) override;
  VerifyResult Verify(Request& r, const float* logits, int64_t vocab,
                      const std::vector<int32_t>& eos_ids, Sampler& sampler) override;

  int draft_vocab_size() const { return static_cast<int>(head_.size()); }
  const DraftHead& head() const { return head_; }

 protected:
  // The width of one row's features.
  virtual int64_t feature_width() const = 0;
  // One chunk of the step: its request and its rows' features [c.num_tokens, feature_width()].
  virtual void ObserveChunk(const ScheduledChunk& c, Request* r, const float* rows) = 0;
  void Bind(KvCache& kv, int block_size) {
    kv_ = &kv;
    block_size_ = block_size;
  }
  // The sequence's state in the KV cache: null before its first step.
  template <class State>
  State* FindState(int seq) const {
    return static_cast<State*>(kv_->draft_state(seq));  // only this speculator sets them
  }
  template <class State>
  State& NewState(int seq) {
    auto st = std::make_unique<State>();
    State& ref = *st;
    kv_->SetDraftState(seq, std::move(st));
    return ref;
  }

  KvCache* kv_ = nullptr;
  int block_size_ = 16;  // the KV cache's
  DraftHead head_;       // the target's lm_head rows of the draft vocabulary
};

}  // namespace mimo
