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
// a position recomputed later overwrites its features. Engine thread only.
#pragma once

#include <climits>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/speculator.h"
#include "model/dflash_drafter.h"
#include "speculative/draft_head.h"

namespace mimo {

struct DFlashSpeculatorOptions {
  std::string drafter_dir;         // <model>/dflash when empty
  int num_speculative_tokens = 0;  // drafts per step, 1 .. B - 1; 0: B - 1
  DFlashRope rope = DFlashRope::kSplit;
  // Memory for the target features of prompt blocks kept across requests, so a prefix-cache
  // hit restores the draft context of the positions it covers instead of recomputing them
  // (0: none, and a hit leaves the drafter's window to compute).
  int64_t context_cache_bytes = int64_t{256} << 20;
  std::vector<int32_t> draft_vocab;  // ids the drafts are chosen from; empty: the whole vocabulary
};

class DFlashSpeculator final : public Speculator {
 public:
  static StatusOr<std::unique_ptr<DFlashSpeculator>> Create(MimoV2Model& model,
                                                            const std::string& model_dir,
                                                            const DFlashSpeculatorOptions& opts);

  int num_speculative_tokens() const override { return num_drafts_; }
  int mtp_sequences_per_sequence() const override { return 0; }
  int mtp_chunk_tokens() const override { return 0; }
  // A prefix-cache hit leaves the window before the first anchor to compute: its features
  // build the draft context (the cache keeps K/V, not features).
  int prefix_hit_margin() const override { return window() > 0 ? window() + 1 : INT_MAX / 4; }
  // The prompt blocks whose features the context cache holds, from the first on.
  int RestorablePrefix(std::span<const int32_t> tokens) override;
  std::vector<int> capture_layers() const override { return drafter_->config().target_layer_ids; }
  Status Attach(KvCache& kv, int block_size) override;
  void ObserveStep(const SchedulePlan& plan, const float* features,
                   std::span<Request* const> chunk_requests) override;
  VerifyResult Verify(Request& r, const float* logits, int64_t vocab,
                      const std::vector<int32_t>& eos_ids, Sampler& sampler) override;
  void Propose(ExecContext& ctx, std::span<Request* const> reqs,
               std::span<const int> max_drafts) override;
  void Release(int seq_id) override;

  const DFlashDrafter& drafter() const { return *drafter_; }
  int draft_vocab_size() const { return static_cast<int>(head_.size()); }
  const DraftHead& draft_head() const { return head_; }

 private:
  struct SeqState {
    DFlashContext context;
    std::map<int, std::vector<float>> features;  // position -> [feature width], not yet appended
    bool started = false;                        // a step has computed some of its positions
    std::vector<uint64_t> prompt_hashes;         // chained hashes of its full prompt blocks
    int cache_next = -1;       // next prompt position to collect for the context cache; -1: none
    std::vector<float> block;  // the features of the prompt block being collected
  };
  // Features [block_size, feature width] of full prompt blocks by chained content hash, least
  // recently used evicted first.
  class ContextCache {
   public:
    explicit ContextCache(size_t capacity_blocks) : capacity_(capacity_blocks) {}
    bool Contains(uint64_t h) const { return map_.count(h) != 0; }
    const std::vector<float>* Find(uint64_t h);  // marks it used
    void Insert(uint64_t h, std::vector<float> rows);
    size_t size() const { return map_.size(); }

   private:
    size_t capacity_;
    std::list<uint64_t> lru_;  // most recently used first
    std::unordered_map<uint64_t, std::pair<std::vector<float>, std::list<uint64_t>::iterator>> map_;
  };
  // A new sequence's first step starts after a prefix-cache hit: its features for the window
  // before the hit, from the context cache.
  void RestoreFeatures(SeqState& st, const Request& r, int start_pos);
  // Hands the chunk's prompt rows to the context cache, a full block at a time.
  void CollectForCache(SeqState& st, const Request& r, int start_pos, int n, const float* rows);

  DFlashSpeculator() = default;
  int window() const { return drafter_->config().sliding_window; }

  std::unique_ptr<DFlashDrafter> drafter_;
  DraftHead head_;  // the target's lm_head rows of the draft vocabulary
  int num_drafts_ = 0;
  std::unordered_map<int, SeqState> seqs_;  // by the request's seq id
  int64_t context_cache_bytes_ = 0;
  int block_size_ = 0;                   // the KV cache's, so blocks align with prefix hits
  std::unique_ptr<ContextCache> cache_;  // null when disabled
};

}  // namespace mimo
