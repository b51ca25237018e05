// MtpSpeculator: drafts with the checkpoint's MTP layers (spec §3). Each step it proposes K
// tokens per request as a chain through MTP layers 0..K-1 at the last verified position t:
// depth k runs on the pair (hidden state, token x_{t+k+1}) at position t, where x_{t+k+1} is
// the verified next token (k = 0) or the previous depth's draft, and predicts x_{t+k+2}.
// Hidden state per depth: by default the main model's pre-final-norm state h_t (SGLang's
// convention, Xiaomi's recommended stack); `chained`: depth k takes depth k-1's block output
// at the same position (LMDeploy's DeepSeek-style chain).
// Each depth keeps its own sliding-window KV cache as a draft sequence of the paged cache's MTP
// pool. Depth k's entries at positions p <= t - k have verified inputs; later ones (inputs that
// were drafts) are rolled back after drafting and recomputed once verified. A draft sequence
// starts at the last window of positions before the first draft (the window is all the draft
// query reads), so a long prompt costs the drafter at most window + K positions per depth.
// The draft head scores a vocabulary subset (a frequency-ranked list, e.g. the first 32768 ids
// plus the special tokens): an lm_head pass over the full 152k vocabulary per draft would cost
// as much as the rest of the drafter. Verification keeps the output exact whatever the subset.
// Engine thread only.
#pragma once

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/matrix_weight.h"
#include "engine/speculator.h"
#include "model/mimo_v2.h"
#include "speculative/draft_head.h"

namespace mimo {

struct MtpSpeculatorOptions {
  int num_speculative_tokens = 3;    // K, 1 <= K <= MTP layers
  bool chained = false;              // depth k takes depth k-1's output
  std::vector<int32_t> draft_vocab;  // ids the draft head scores; empty: the whole vocabulary
};

class MtpSpeculator final : public Speculator {
 public:
  static StatusOr<std::unique_ptr<MtpSpeculator>> Create(MimoV2Model& model,
                                                         const MtpSpeculatorOptions& opts);

  int num_speculative_tokens() const override { return opts_.num_speculative_tokens; }
  int mtp_sequences_per_sequence() const override { return opts_.num_speculative_tokens; }
  int mtp_chunk_tokens() const override;
  int prefix_hit_margin() const override { return window_ + opts_.num_speculative_tokens; }
  Status Attach(KvCache& kv, int block_size) override;
  void ObserveStep(const SchedulePlan& plan, const float* hidden,
                   std::span<Request* const> chunk_requests) override;
  VerifyResult Verify(Request& r, const float* logits, int64_t vocab,
                      const std::vector<int32_t>& eos_ids, Sampler& sampler) override;
  void Propose(ExecContext& ctx, std::span<Request* const> reqs,
               std::span<const int> max_drafts) override;
  void Release(int seq_id) override;

  int draft_vocab_size() const { return static_cast<int>(head_.size()); }
  const MatrixWeight& draft_head() const { return head_.weight(); }  // [draft vocab, hidden]

 private:
  struct SeqState {
    std::vector<int> mtp_seq;  // [K] draft sequence ids in the KV cache
    int start = 0;             // first MTP position (block aligned)
    bool started = false;      // draft sequences exist
    std::vector<int> next;     // [K] next position each depth computes
    std::map<int, std::vector<float>> hidden;            // position -> main h [hidden]
    std::vector<std::map<int, std::vector<float>>> out;  // [K] chained: depth outputs
  };
  MtpSpeculator(MimoV2Model& model, const MtpSpeculatorOptions& opts);
  void Trim(SeqState& st) const;

  MimoV2Model& model_;
  MtpSpeculatorOptions opts_;
  KvCache* kv_ = nullptr;
  int block_size_ = 16;
  int window_ = 0;
  DraftHead head_;                          // the lm_head rows of the draft vocabulary
  std::unordered_map<int, SeqState> seqs_;  // by the request's seq id
  int next_mtp_seq_ = 1 << 30;              // draft sequence ids, apart from the engine's
  Sampler draft_sampler_;
};

}  // namespace mimo
