// DFlashSpeculator (see dflash_speculator.h).
#include "speculative/dflash_speculator.h"

#include <algorithm>
#include <climits>

#include "core/check.h"
#include "engine/scheduler.h"
#include "kv/block_pool.h"
#include "speculative/verify.h"

namespace mimo {

StatusOr<std::unique_ptr<DFlashSpeculator>> DFlashSpeculator::Create(
    MimoV2Model& model, const std::string& model_dir, const DFlashSpeculatorOptions& o) {
  const std::string dir = o.drafter_dir.empty() ? model_dir + "/dflash" : o.drafter_dir;
  std::unique_ptr<DFlashSpeculator> s(new DFlashSpeculator());
  MIMO_ASSIGN_OR_RETURN(s->drafter_, DFlashDrafter::Load(dir, model, o.rope));
  MIMO_ASSIGN_OR_RETURN(s->head_, DraftHead::Create(model.weights().lm_head, o.draft_vocab));
  const int max_drafts = s->drafter_->config().block_size - 1;
  s->num_drafts_ = o.num_speculative_tokens > 0 ? o.num_speculative_tokens : max_drafts;
  if (s->num_drafts_ < 1 || s->num_drafts_ > max_drafts) {
    return InvalidArgument(
        "num_speculative_tokens must be in [1, %d] (the DFlash drafter's block_size - 1), got %d",
        max_drafts, o.num_speculative_tokens);
  }
  if (o.context_cache_bytes < 0) {
    return InvalidArgument("the DFlash context cache size must be >= 0, got %lld bytes",
                           static_cast<long long>(o.context_cache_bytes));
  }
  s->context_cache_bytes_ = o.context_cache_bytes;
  return s;
}

Status DFlashSpeculator::Attach(KvCache& kv, int block_size) {
  (void)kv;  // the draft context lives outside the paged cache
  block_size_ = block_size;
  const int64_t block_bytes =
      int64_t{block_size} * drafter_->feature_width() * static_cast<int64_t>(sizeof(float));
  const int64_t blocks = block_bytes > 0 ? context_cache_bytes_ / block_bytes : 0;
  if (blocks > 0) cache_ = std::make_unique<ContextCache>(static_cast<size_t>(blocks));
  return Status::Ok();
}

const std::vector<float>* DFlashSpeculator::ContextCache::Find(uint64_t h) {
  auto it = map_.find(h);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.second);
  return &it->second.first;
}

void DFlashSpeculator::ContextCache::Insert(uint64_t h, std::vector<float> rows) {
  if (Find(h) != nullptr) return;  // the same tokens give the same features
  while (map_.size() >= capacity_ && !lru_.empty()) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(h);
  map_.emplace(h, std::make_pair(std::move(rows), lru_.begin()));
}

int DFlashSpeculator::RestorablePrefix(std::span<const int32_t> tokens) {
  if (!cache_) return 0;
  const std::vector<uint64_t> hashes = HashFullBlocks(tokens, block_size_, 0);
  int n = 0;
  for (uint64_t h : hashes) {
    if (!cache_->Contains(h)) break;
    n += block_size_;
  }
  return n;
}

void DFlashSpeculator::RestoreFeatures(SeqState& st, const Request& r, int start_pos) {
  const int64_t F = drafter_->feature_width();
  const int W = window();
  const int lo = W > 0 ? std::max(0, r.num_tokens() - W) : 0;
  for (int p = lo; p < start_pos;) {
    const int b = p / block_size_;
    const std::vector<float>* rows = cache_ && b < static_cast<int>(st.prompt_hashes.size())
                                         ? cache_->Find(st.prompt_hashes[b])
                                         : nullptr;
    // The scheduler let the hit past the margin only over blocks the cache held.
    MIMO_CHECK(rows != nullptr, "DFlash: sequence %d's features for position %d are not cached",
               r.seq_id, p);
    for (; p < std::min(start_pos, (b + 1) * block_size_); ++p) {
      const float* f = rows->data() + static_cast<int64_t>(p - b * block_size_) * F;
      st.features[p].assign(f, f + F);
    }
  }
}

void DFlashSpeculator::CollectForCache(SeqState& st, const Request& r, int start_pos, int n,
                                       const float* rows) {
  const int64_t F = drafter_->feature_width();
  for (int j = 0; j < n && st.cache_next >= 0; ++j) {
    const int pos = start_pos + j;
    if (pos != st.cache_next || pos >= r.num_prompt_tokens()) continue;
    st.block.insert(st.block.end(), rows + j * F, rows + (j + 1) * F);
    if (++st.cache_next % block_size_ == 0) {
      const size_t b = static_cast<size_t>(st.cache_next / block_size_ - 1);
      if (b < st.prompt_hashes.size()) cache_->Insert(st.prompt_hashes[b], std::move(st.block));
      st.block.clear();
    }
  }
}

void DFlashSpeculator::ObserveStep(const SchedulePlan& plan, const float* features,
                                   std::span<Request* const> chunk_requests) {
  const int64_t F = drafter_->feature_width();
  const int W = window();
  // New sequences first take what the context cache holds for them (before this step's blocks
  // go in, which could evict them).
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    const Request* r = chunk_requests[i];
    SeqState& st = seqs_[c.seq_id];
    if (st.started || r == nullptr) continue;
    st.started = true;
    if (!cache_) continue;
    st.prompt_hashes = HashFullBlocks(r->prompt(), block_size_, 0);
    if (c.start_pos % block_size_ == 0) st.cache_next = c.start_pos;
    if (c.start_pos > 0) RestoreFeatures(st, *r, c.start_pos);
  }
  int row = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    const Request* r = chunk_requests[i];
    SeqState& st = seqs_[c.seq_id];
    if (cache_ && r != nullptr) {
      CollectForCache(st, *r, c.start_pos, c.num_tokens, features + static_cast<int64_t>(row) * F);
    }
    // Positions a block can still see: the context's next one on, and (without a context yet)
    // the last W - 1 before the first anchor.
    int lo = st.context.end;
    if (W > 0 && st.context.end == st.context.begin) {
      lo = std::max(lo, r->num_tokens() - W);
    }
    for (int j = 0; j < c.num_tokens; ++j) {
      const int pos = c.start_pos + j;
      if (pos < lo) continue;
      const float* f = features + static_cast<int64_t>(row + j) * F;
      st.features[pos].assign(f, f + F);
    }
    row += c.num_tokens;
  }
}

VerifyResult DFlashSpeculator::Verify(Request& r, const float* logits, int64_t vocab,
                                      const std::vector<int32_t>& eos_ids, Sampler& sampler) {
  return VerifyDrafts(r, logits, vocab, eos_ids, sampler);
}

void DFlashSpeculator::Propose(ExecContext& ctx, std::span<Request* const> reqs,
                               std::span<const int> max_drafts) {
  const int64_t F = drafter_->feature_width();
  const int64_t V = head_.size();
  const int W = window();
  std::vector<float> rows;
  std::vector<DFlashDrafter::Block> blocks;  // one per request that drafts this step
  std::vector<Request*> who;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request* r = reqs[i];
    r->draft.clear();
    r->draft_probs.clear();
    const int n = std::min(num_drafts_, max_drafts[i]);
    auto it = seqs_.find(r->seq_id);
    if (n <= 0 || it == seqs_.end()) continue;
    SeqState& st = it->second;
    DFlashContext& dc = st.context;
    const int committed = r->num_computed;  // the anchor sits at this position
    if (dc.end == dc.begin) {               // the first block: start at its window
      const int first = W > 0 ? std::max(0, committed - (W - 1)) : 0;
      dc.begin = dc.end = first;
    }
    // Committed positions not yet in the context, in order, from the steps that computed them.
    const int count = committed - dc.end;
    rows.resize(static_cast<size_t>(std::max(count, 0)) * F);
    bool complete = count >= 0;
    for (int p = dc.end; complete && p < committed; ++p) {
      auto f = st.features.find(p);
      complete = f != st.features.end();
      if (complete) std::copy(f->second.begin(), f->second.end(), rows.begin() + (p - dc.end) * F);
    }
    MIMO_CHECK(complete, "DFlash: no target features kept for sequence %d's positions %d..%d",
               r->seq_id, dc.end, committed - 1);
    if (count > 0) drafter_->AppendContext(ctx, dc, rows.data(), count);
    st.features.erase(st.features.begin(), st.features.lower_bound(committed));
    blocks.push_back({&dc, r->token_at(committed), n});
    who.push_back(r);
  }
  if (blocks.empty()) return;
  int total = 0;
  for (const auto& b : blocks) total += b.num_drafts;
  std::vector<float> logits(static_cast<size_t>(total) * V);          // [all drafts, draft vocab]
  drafter_->DraftBatch(ctx, blocks, logits.data(), &head_.weight());  // one pass for all
  const float* row = logits.data();
  for (size_t b = 0; b < blocks.size(); ++b) {
    Request* r = who[b];
    const bool sampled = !r->params->sampling.greedy();
    for (int j = 0; j < blocks[b].num_drafts; ++j, row += V) {
      const int32_t d = head_.token(Argmax(row, V));
      r->draft.push_back(d);
      if (sampled) r->draft_probs.push_back({{d, 1.0}});  // one-hot: accepted with p(d)
    }
  }
}

void DFlashSpeculator::Release(int seq_id) { seqs_.erase(seq_id); }

}  // namespace mimo
