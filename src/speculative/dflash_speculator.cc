// DFlashSpeculator (see dflash_speculator.h).
#include "speculative/dflash_speculator.h"

#include <algorithm>
#include <climits>

#include "core/check.h"
#include "engine/scheduler.h"
#include "kv/block_pool.h"

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
  Bind(kv, block_size);
  // The features are the target's hidden states after these layers: the tiers below the
  // cache key them by that, so another drafter's features are never restored for these.
  std::vector<uint64_t> layout = {static_cast<uint64_t>(drafter_->feature_width())};
  for (int l : drafter_->config().target_layer_ids) layout.push_back(static_cast<uint64_t>(l));
  kv.EnableFeatureCache(context_cache_bytes_, drafter_->feature_width(), window(),
                        HashWords(layout));
  return Status::Ok();
}

int64_t DFlashSpeculator::SeqState::bytes() const {
  int64_t b = features.bytes() + static_cast<int64_t>(block.size() * sizeof(float));
  for (const std::vector<float>& k : context.k) b += static_cast<int64_t>(k.size() * sizeof(float));
  for (const std::vector<float>& v : context.v) b += static_cast<int64_t>(v.size() * sizeof(float));
  return b;
}

void DFlashSpeculator::RestoreFeatures(SeqState& st, const Request& r, int start_pos) {
  const int64_t F = drafter_->feature_width();
  const int W = window();
  FeatureCache* cache = kv_->feature_cache();
  const int lo = W > 0 ? std::max(0, r.num_tokens() - W) : 0;
  for (int p = lo; p < start_pos;) {
    const int b = p / block_size_;
    const std::vector<float>* rows = cache && b < static_cast<int>(st.prompt_hashes.size())
                                         ? cache->Find(st.prompt_hashes[b])
                                         : nullptr;
    // The scheduler let the hit past the margin only over blocks the cache held.
    MIMO_CHECK(rows != nullptr, "DFlash: sequence %d's features for position %d are not cached",
               r.seq_id, p);
    for (; p < std::min(start_pos, (b + 1) * block_size_); ++p) {
      st.features.Set(p, rows->data() + static_cast<int64_t>(p - b * block_size_) * F, F);
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
      if (b < st.prompt_hashes.size()) {
        kv_->feature_cache()->Insert(st.prompt_hashes[b], std::move(st.block));
      }
      st.block.clear();
    }
  }
}

void DFlashSpeculator::ObserveStep(const SchedulePlan& plan, const float* features,
                                   std::span<Request* const> chunk_requests) {
  // New sequences first take what the feature cache holds for them (before this step's blocks
  // go in, which could evict them).
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    const Request* r = chunk_requests[i];
    SeqState* st = FindState<SeqState>(c.seq_id);
    if (st == nullptr) st = &NewState<SeqState>(c.seq_id);
    if (st->started || r == nullptr) continue;
    st->started = true;
    if (!kv_->feature_cache()) continue;
    st->prompt_hashes = HashFullBlocks(r->prompt(), block_size_, 0);
    if (c.start_pos % block_size_ == 0) st->cache_next = c.start_pos;
    if (c.start_pos > 0) RestoreFeatures(*st, *r, c.start_pos);
  }
  // The blocks the scheduler made resident for these restores may go again.
  if (kv_->feature_cache()) kv_->feature_cache()->Unpin();
  FeatureSpeculator::ObserveStep(plan, features, chunk_requests);
}

void DFlashSpeculator::ObserveChunk(const ScheduledChunk& c, Request* r, const float* rows) {
  SeqState& st = *FindState<SeqState>(c.seq_id);
  if (kv_->feature_cache() && r != nullptr) {
    CollectForCache(st, *r, c.start_pos, c.num_tokens, rows);
  }
  // Positions a block can still see: the context's next one on, and (without a context yet)
  // the last W - 1 before the first anchor.
  const int W = window();
  int lo = st.context.end;
  if (W > 0 && st.context.end == st.context.begin) {
    lo = std::max(lo, r->num_tokens() - W);
  }
  st.features.Keep(c.start_pos, c.num_tokens, lo, rows, drafter_->feature_width());
}

DFlashSpeculator::SeqState* DFlashSpeculator::CatchUpContext(ExecContext& ctx, Request& r,
                                                             std::vector<float>& rows) {
  const int64_t F = drafter_->feature_width();
  const int W = window();
  SeqState* st = FindState<SeqState>(r.seq_id);
  if (st == nullptr) return nullptr;
  DFlashContext& dc = st->context;
  const int committed = r.num_computed;  // the anchor sits at this position
  if (dc.end == dc.begin) {              // the first block: start at its window
    const int first = W > 0 ? std::max(0, committed - (W - 1)) : 0;
    dc.begin = dc.end = first;
  }
  // Committed positions not yet in the context, in order, from the steps that computed them.
  const int count = committed - dc.end;
  rows.resize(static_cast<size_t>(std::max(count, 0)) * F);
  bool complete = count >= 0;
  for (int p = dc.end; complete && p < committed; ++p) {
    const std::vector<float>* f = st->features.Find(p);
    complete = f != nullptr;
    if (complete) std::copy(f->begin(), f->end(), rows.begin() + (p - dc.end) * F);
  }
  MIMO_CHECK(complete, "DFlash: no target features kept for sequence %d's positions %d..%d",
             r.seq_id, dc.end, committed - 1);
  if (count > 0) drafter_->AppendContext(ctx, dc, rows.data(), count);
  st->features.DropBefore(committed);
  return st;
}

void DFlashSpeculator::Propose(ExecContext& ctx, std::span<Request* const> reqs,
                               std::span<const int> max_drafts) {
  const int64_t V = head_.size();
  std::vector<float> rows;
  std::vector<DFlashDrafter::Block> blocks;  // one per request that drafts this step
  std::vector<Request*> who;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request* r = reqs[i];
    r->draft.clear();
    r->draft_probs.clear();
    const int n = std::min(num_drafts_, max_drafts[i]);
    if (n <= 0) continue;
    SeqState* st = CatchUpContext(ctx, *r, rows);
    if (st == nullptr) continue;
    blocks.push_back({&st->context, r->token_at(r->num_computed), n});
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

}  // namespace mimo
