// Speculative decoding as the engine drives it. The engine owns the step: it schedules each
// decoding request's drafts for verification (1 + drafts tokens in one forward pass), asks the
// Speculator to verify them against the target rows, rolls rejected drafts back in the KV
// cache, applies stop rules to the accepted tokens, and asks for new drafts: a stage of every
// step (NoSpeculator when speculation is off). The drafters and the acceptance rule live in
// src/speculative (MtpSpeculator, DFlashSpeculator over FeatureSpeculator); their per-sequence
// state lives in the KV cache; the model only runs forwards. Engine thread only.
#pragma once

#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "engine/request.h"
#include "engine/sampler.h"

namespace mimo {

class KvCache;
struct SchedulePlan;

// What verification decided: the tokens to append (the accepted drafts, then the target's token
// at the first rejection or the bonus token; none after a grammar that ended on a draft) and how
// many of them are accepted drafts. The engine takes the count from here, never by comparing ids
// (a rejected draft may be replaced by a token with the same id on a fallback path).
struct VerifyResult {
  std::vector<SampledToken> tokens;
  int num_accepted = 0;
};

class Speculator {
 public:
  virtual ~Speculator() = default;
  virtual int num_speculative_tokens() const = 0;
  // KV geometry it needs (see KvMemoryPlanOptions): draft sequences per sequence and positions
  // per draft step; and the tokens a prefix-cache hit must leave to compute.
  virtual int mtp_sequences_per_sequence() const = 0;
  virtual int mtp_chunk_tokens() const = 0;
  virtual int prefix_hit_margin() const = 0;
  // Once, after the engine built its KV cache. Whatever the speculator keeps per sequence lives
  // in that cache and goes with the sequence (KvCache::AddDraftSequence with an owner,
  // KvCache::SetDraftState): it never tracks a request's lifetime. A drafter that restores
  // features of prompt blocks keeps them in the cache's FeatureCache (EnableFeatureCache), which
  // the scheduler reads to let a prefix-cache hit cover them.
  virtual Status Attach(KvCache& kv, int block_size) = 0;

  // Whether the drafter reads the target's features at all (false: no speculation, the forward
  // pass keeps nothing for it).
  virtual bool reads_features() const { return true; }
  // Target layers whose outputs the drafter reads (DFlash); empty: the pre-norm hidden state
  // after the last layer (MTP).
  virtual std::vector<int> capture_layers() const { return {}; }
  // After every forward pass: the step's plan, its rows' features (the pre-norm hidden states
  // [T, hidden], or with capture_layers() the captured layers [T, layers * hidden]), and each
  // chunk's request (nullptr for none).
  virtual void ObserveStep(const SchedulePlan& plan, const float* hidden,
                           std::span<Request* const> chunk_requests) = 0;
  // Verifies r.draft against the target rows logits [1 + draft, vocab] (row i: the
  // distribution of the token after draft i - 1, processed as the engine samples: penalties over
  // r's history plus the tokens accepted before it, min_tokens masking of eos_ids). Returns the
  // tokens to append: the accepted drafts and one more (the target's own token at the first
  // rejection, or the bonus token), each with raw logprobs when asked, and the accepted count.
  // Greedy: exact match with the target's argmax. Sampling: rejection sampling with the draft
  // probabilities, so the output distribution is exactly the target's.
  virtual VerifyResult Verify(Request& r, const float* logits, int64_t vocab,
                              const std::vector<int32_t>& eos_ids, Sampler& sampler) = 0;
  // Proposes drafts (r->draft, and r->draft_probs when sampling) for requests that continue;
  // max_drafts[i] bounds request i's (remaining max_tokens / context).
  virtual void Propose(ExecContext& ctx, std::span<Request* const> reqs,
                       std::span<const int> max_drafts) = 0;
};

// No speculation: the engine's speculative stage with nothing in it. It drafts nothing, so no
// step verifies, and it asks the forward pass for no features; the engine runs it when
// EngineOptions::speculator is null, so its step has no branch on whether speculation is on.
class NoSpeculator final : public Speculator {
 public:
  int num_speculative_tokens() const override { return 0; }
  int mtp_sequences_per_sequence() const override { return 0; }
  int mtp_chunk_tokens() const override { return 0; }
  int prefix_hit_margin() const override { return 0; }
  Status Attach(KvCache&, int) override { return Status::Ok(); }
  bool reads_features() const override { return false; }
  void ObserveStep(const SchedulePlan&, const float*, std::span<Request* const>) override {}
  VerifyResult Verify(Request&, const float*, int64_t, const std::vector<int32_t>&,
                      Sampler&) override {
    return {};  // never called: no request has drafts
  }
  void Propose(ExecContext&, std::span<Request* const>, std::span<const int>) override {}
};

}  // namespace mimo
