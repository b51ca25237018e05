// MtpSpeculator: drafts with the checkpoint's MTP layers (spec §3). Each step it proposes K
// tokens per request as a chain through MTP layers 0..K-1 at the last verified position t:
// depth k runs on the pair (hidden state, token x_{t+k+1}) at position t, where x_{t+k+1} is
// the verified next token (k = 0) or the previous depth's draft, and predicts x_{t+k+2}.
// Hidden state per depth: by default the main model's pre-final-norm state h_t (SGLang's
// convention, Xiaomi's recommended stack); `chained`: depth k takes depth k-1's block output
// at the same position (LMDeploy's DeepSeek-style chain).
// Each depth keeps its own sliding-window KV cache as a draft sequence of the paged cache's MTP
// pool, owned by the request's sequence (freed with it). Depth k's entries at positions
// p <= t - k have verified inputs; later ones (inputs that were drafts) are rolled back after
// drafting and recomputed once verified. A draft sequence
// starts at the last window of positions before the first draft (the window is all the draft
// query reads), so a long prompt costs the drafter at most window + K positions per depth.
// The draft head scores a vocabulary subset (a frequency-ranked list, e.g. the first 32768 ids
// plus the special tokens): an lm_head pass over the full 152k vocabulary per draft would cost
// as much as the rest of the drafter. Verification keeps the output exact whatever the subset.
// Engine thread only.
#pragma once

#include <memory>
#include <vector>

#include "core/matrix_weight.h"
#include "model/mimo_v2.h"
#include "speculative/feature_speculator.h"

namespace mimo {

struct MtpSpeculatorOptions {
  int num_speculative_tokens = 3;    // K, 1 <= K <= MTP layers
  bool chained = false;              // depth k takes depth k-1's output
  std::vector<int32_t> draft_vocab;  // ids the draft head scores; empty: the whole vocabulary
};

class MtpSpeculator final : public FeatureSpeculator {
 public:
  static StatusOr<std::unique_ptr<MtpSpeculator>> Create(MimoV2Model& model,
                                                         const MtpSpeculatorOptions& opts);

  int num_speculative_tokens() const override { return opts_.num_speculative_tokens; }
  int mtp_sequences_per_sequence() const override { return opts_.num_speculative_tokens; }
  int mtp_chunk_tokens() const override;
  int prefix_hit_margin() const override { return window_ + opts_.num_speculative_tokens; }
  Status Attach(KvCache& kv, int block_size) override;
  void Propose(ExecContext& ctx, std::span<Request* const> reqs,
               std::span<const int> max_drafts) override;

  const MatrixWeight& draft_head() const { return head_.weight(); }  // [draft vocab, hidden]

 private:
  // A request's drafter state, owned by the KV cache with the request's sequence (and its K
  // draft sequences with it).
  struct SeqState final : DraftState {
    std::vector<int> mtp_seq;  // [K] draft sequence ids in the KV cache
    int start = 0;             // first MTP position (block aligned)
    bool started = false;      // draft sequences exist
    std::vector<int> next;     // [K] next position each depth computes
    PositionFeatures hidden;   // position -> main h [hidden]
    std::vector<PositionFeatures> out;  // [K] chained: depth outputs
    int64_t bytes() const override;
  };
  // The requests' drafts as the depths build them.
  struct Drafts {
    std::vector<std::vector<int32_t>> ids;                  // [request][depth]
    std::vector<std::vector<std::vector<TokenProb>>> probs;  // sampling: their distributions
    std::vector<uint8_t> active;                            // the request drafts on
  };
  // One depth's pass over every request still drafting.
  struct DepthPass {
    StepBatch batch;
    std::vector<int32_t> tokens;  // [T]
    std::vector<float> hprev;     // [T, H] the hidden state each row pairs with
    std::vector<int> logit_rows;  // each chunk's last row
    std::vector<size_t> who;      // request index of each chunk
    std::vector<float> logits;    // [chunks, draft vocab]
    std::vector<float> hout;      // [T, H] chained: the depth's block outputs
  };
  MtpSpeculator(MimoV2Model& model, const MtpSpeculatorOptions& opts);
  int64_t feature_width() const override { return model_.config().hidden_size; }
  void ObserveChunk(const ScheduledChunk& c, Request* r, const float* rows) override;
  // Starts the draft sequences of requests that draft for the first time; marks who drafts.
  Drafts StartDrafts(std::span<Request* const> reqs, std::span<const int> max_drafts);
  // Depth k's rows of request i: positions next[k] .. t paired with their tokens and states.
  bool AddDepthRows(int k, Request& r, size_t i, const Drafts& d, DepthPass& pass);
  void RunDepth(ExecContext& ctx, int k, DepthPass& pass);
  // Request i's draft from its logits row, then its depth-k rollback of draft-input positions.
  void TakeDraft(int k, Request& r, size_t i, size_t chunk, DepthPass& pass, Drafts& d);
  int32_t SampleDraft(const float* row, Request& r, std::vector<TokenProb>* q);
  void Trim(SeqState& st) const;

  MimoV2Model& model_;
  MtpSpeculatorOptions opts_;
  int window_ = 0;
  int next_mtp_seq_ = 1 << 30;  // draft sequence ids, apart from the engine's
  Sampler draft_sampler_;
};

}  // namespace mimo
