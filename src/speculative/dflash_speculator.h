// DFlashSpeculator: speculative decoding with a DFlash block-diffusion drafter (shared/spec/
// dflash.md section 4). Each step it drafts up to B - 1 tokens per request, every request's
// block in ONE drafter pass (DraftBatch: the drafter's weights read once per step):
// the anchor is the request's newest token (the previous step's bonus, not computed yet), the
// context is the target's features at the committed positions before it. Drafts are greedy
// (the argmax of each block row); verification is the engine's chain rule with the drafts as
// one-hot proposals, so sampled requests stay exactly the target's distribution (a draft d is
// accepted with probability p(d), a rejection redraws from p without d).
// Features are kept per position from the step that computed it and appended to the draft
// context only once the position is committed, so rejected drafts never reach the context;
// a position recomputed later overwrites its features. The draft context and those features
// are the sequence's DraftState in the KV cache (freed with the sequence); the features of
// prompt blocks kept across requests are the KV cache's FeatureCache. Engine thread only.
#pragma once

#include <climits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/dflash_drafter.h"
#include "speculative/feature_speculator.h"

namespace mimo {

struct DFlashSpeculatorOptions {
  std::string drafter_dir;         // <model>/dflash when empty
  int num_speculative_tokens = 0;  // drafts per step, 1 .. B - 1; 0: B - 1
  DFlashRope rope = DFlashRope::kSplit;
  // Memory for the target features of prompt blocks kept across requests (the KV cache's
  // FeatureCache), so a prefix-cache hit restores the draft context of the positions it covers
  // instead of recomputing them (0: none, and a hit leaves the drafter's window to compute).
  int64_t context_cache_bytes = int64_t{256} << 20;
  std::vector<int32_t> draft_vocab;  // ids the drafts are chosen from; empty: the whole vocabulary
};

class DFlashSpeculator final : public FeatureSpeculator {
 public:
  static StatusOr<std::unique_ptr<DFlashSpeculator>> Create(MimoV2Model& model,
                                                            const std::string& model_dir,
                                                            const DFlashSpeculatorOptions& opts);

  int num_speculative_tokens() const override { return num_drafts_; }
  int mtp_sequences_per_sequence() const override { return 0; }
  int mtp_chunk_tokens() const override { return 0; }
  // A prefix-cache hit leaves the window before the first anchor to compute: its features
  // build the draft context (the cache keeps K/V, not features), except over the prompt blocks
  // the KV cache's FeatureCache holds.
  int prefix_hit_margin() const override { return window() > 0 ? window() + 1 : INT_MAX / 4; }
  std::vector<int> capture_layers() const override { return drafter_->config().target_layer_ids; }
  // Binds the KV cache, and gives it the feature cache of context_cache_bytes.
  Status Attach(KvCache& kv, int block_size) override;
  // New sequences first restore what the feature cache holds for them, then every chunk's rows
  // are kept (ObserveChunk).
  void ObserveStep(const SchedulePlan& plan, const float* features,
                   std::span<Request* const> chunk_requests) override;
  void Propose(ExecContext& ctx, std::span<Request* const> reqs,
               std::span<const int> max_drafts) override;

  const DFlashDrafter& drafter() const { return *drafter_; }
  const DraftHead& draft_head() const { return head_; }

 private:
  // A request's drafter state, owned by the KV cache with the request's sequence: its draft
  // context (every draft layer's K/V over the window before the next anchor) and the features of
  // positions not yet appended to it.
  struct SeqState final : DraftState {
    DFlashContext context;
    PositionFeatures features;             // not yet appended
    bool started = false;                  // a step has computed some of its positions
    std::vector<uint64_t> prompt_hashes;   // chained hashes of its full prompt blocks
    int cache_next = -1;       // next prompt position to collect for the feature cache; -1: none
    std::vector<float> block;  // the features of the prompt block being collected
    int64_t bytes() const override;
  };
  int64_t feature_width() const override { return drafter_->feature_width(); }
  void ObserveChunk(const ScheduledChunk& c, Request* r, const float* rows) override;
  // A new sequence's first step starts after a prefix-cache hit: its features for the window
  // before the hit, from the feature cache.
  void RestoreFeatures(SeqState& st, const Request& r, int start_pos);
  // Hands the chunk's prompt rows to the feature cache, a full block at a time.
  void CollectForCache(SeqState& st, const Request& r, int start_pos, int n, const float* rows);
  // Appends the committed positions not yet in r's context; false: it does not draft.
  SeqState* CatchUpContext(ExecContext& ctx, Request& r, std::vector<float>& rows);

  DFlashSpeculator() = default;
  int window() const { return drafter_->config().sliding_window; }

  std::unique_ptr<DFlashDrafter> drafter_;
  int num_drafts_ = 0;
  int64_t context_cache_bytes_ = 0;
};

}  // namespace mimo
