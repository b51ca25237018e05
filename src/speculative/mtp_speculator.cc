// MtpSpeculator (see mtp_speculator.h).
#include "speculative/mtp_speculator.h"

#include <algorithm>

#include "core/check.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "kv/kv_cache.h"

namespace mimo {

MtpSpeculator::MtpSpeculator(MimoV2Model& model, const MtpSpeculatorOptions& opts)
    : model_(model), opts_(opts) {}

StatusOr<std::unique_ptr<MtpSpeculator>> MtpSpeculator::Create(MimoV2Model& model,
                                                               const MtpSpeculatorOptions& o) {
  const int layers = model.num_mtp_layers();
  if (layers == 0) return InvalidArgument("speculative decoding with MTP: the checkpoint has no MTP layers");
  if (o.num_speculative_tokens < 1 || o.num_speculative_tokens > layers) {
    return InvalidArgument("num_speculative_tokens must be in [1, %d] (the checkpoint's MTP layers), got %d",
                           layers, o.num_speculative_tokens);
  }
  std::unique_ptr<MtpSpeculator> s(new MtpSpeculator(model, o));
  for (const LayerConfig& l : model.KvLayerConfigs()) {
    if (l.mtp) s->window_ = std::max(s->window_, l.sliding_window);
  }
  MIMO_ASSIGN_OR_RETURN(s->head_, DraftHead::Create(model.weights().lm_head, o.draft_vocab));
  return s;
}

int MtpSpeculator::mtp_chunk_tokens() const {
  // The first draft computes the last window (+ K, + block alignment) of positions.
  return window_ + opts_.num_speculative_tokens + block_size_;
}

Status MtpSpeculator::Attach(KvCache& kv, int block_size) {
  if (!kv.has_draft_pool()) return InvalidArgument("the KV cache has no MTP pool");
  Bind(kv, block_size);
  return Status::Ok();
}

int64_t MtpSpeculator::SeqState::bytes() const {
  int64_t b = hidden.bytes();
  for (const PositionFeatures& o : out) b += o.bytes();
  return b;
}

void MtpSpeculator::Trim(SeqState& st) const {
  int lo = st.started ? *std::min_element(st.next.begin(), st.next.end()) : st.start;
  st.hidden.DropBefore(lo);
  for (PositionFeatures& o : st.out) o.DropBefore(lo - 1);
}

void MtpSpeculator::ObserveChunk(const ScheduledChunk& c, Request* r, const float* rows) {
  const int K = opts_.num_speculative_tokens;
  SeqState* st = FindState<SeqState>(c.seq_id);
  if (st == nullptr) {
    // (Re)admitted: the drafter starts at the last window before the first draft position.
    st = &NewState<SeqState>(c.seq_id);
    const int first_draft_pos = r->num_tokens() - 1;
    st->start = std::max(0, first_draft_pos - window_ - K + 1) / block_size_ * block_size_;
    st->out.resize(K);
  }
  const int lo = st->started ? *std::min_element(st->next.begin(), st->next.end()) : st->start;
  st->hidden.Keep(c.start_pos, c.num_tokens, lo, rows, feature_width());
}

MtpSpeculator::Drafts MtpSpeculator::StartDrafts(std::span<Request* const> reqs,
                                                 std::span<const int> max_drafts) {
  const int K = opts_.num_speculative_tokens;
  Drafts d;
  d.ids.resize(reqs.size());
  d.probs.resize(reqs.size());
  d.active.assign(reqs.size(), 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request* r = reqs[i];
    SeqState* st = FindState<SeqState>(r->seq_id);
    if (st == nullptr || max_drafts[i] <= 0) continue;
    if (!st->started) {
      st->mtp_seq.resize(K);
      st->next.assign(K, st->start);
      bool ok = true;
      for (int k = 0; k < K && ok; ++k) {
        st->mtp_seq[k] = next_mtp_seq_++;
        if (next_mtp_seq_ == (1 << 30) + (1 << 29)) next_mtp_seq_ = 1 << 30;
        ok = kv_->AddDraftSequence(st->mtp_seq[k], st->start, r->seq_id).ok();
      }
      if (!ok) continue;
      st->started = true;
    }
    d.active[i] = 1;
  }
  return d;
}

bool MtpSpeculator::AddDepthRows(int k, Request& r, size_t i, const Drafts& d, DepthPass& pass) {
  SeqState& st = *FindState<SeqState>(r.seq_id);
  const int t = r.num_tokens() - 2;           // last position with a main hidden state
  const int n_verified = r.num_tokens();      // tokens x_0 .. x_{t+1}
  const int p0 = st.next[k];
  const int n = t - p0 + 1;
  if (n <= 0 || !kv_->ReserveSlots(st.mtp_seq[k], n)) return false;
  pass.batch.chunks.push_back({st.mtp_seq[k], pass.batch.num_tokens, n, p0});
  for (int p = p0; p <= t; ++p) {
    const int idx = p + k + 1;  // the token this depth pairs with position p
    pass.tokens.push_back(idx < n_verified ? r.token_at(idx) : d.ids[i][idx - n_verified]);
    const std::vector<float>* h = opts_.chained && k > 0 ? st.out[k - 1].Find(p) : nullptr;
    if (!h) h = st.hidden.Find(p);
    MIMO_CHECK(h != nullptr, "MTP: no hidden state kept for position %d", p);
    pass.hprev.insert(pass.hprev.end(), h->begin(), h->end());
  }
  pass.batch.num_tokens += n;
  pass.logit_rows.push_back(pass.batch.num_tokens - 1);
  pass.who.push_back(i);
  return true;
}

void MtpSpeculator::RunDepth(ExecContext& ctx, int k, DepthPass& pass) {
  const int64_t H = model_.config().hidden_size;
  pass.logits.resize(pass.logit_rows.size() * head_.size());
  MtpOutputs mo;
  mo.logit_rows = pass.logit_rows;
  mo.logits = pass.logits.data();
  mo.head = &head_.weight();
  if (opts_.chained) {
    pass.hout.resize(static_cast<size_t>(pass.batch.num_tokens) * H);
    mo.hidden_out = pass.hout.data();
  }
  StatusOr<KvStepPlan> plan = kv_->PlanStep(pass.batch);
  MIMO_CHECK(plan.ok(), "MTP draft step: %s", plan.status().message().c_str());
  RunMtpForward(model_, ctx, k, *kv_, *plan, pass.hprev.data(), pass.tokens.data(), mo);
}

// Greedy: the draft head's argmax. Sampling: a draw from the draft distribution q, which
// verification needs to keep the output exactly the target's.
int32_t MtpSpeculator::SampleDraft(const float* row, Request& r, std::vector<TokenProb>* q) {
  const int64_t DV = head_.size();
  const SamplingParams& sp = r.params->sampling;
  if (sp.greedy()) return head_.token(Argmax(row, DV));
  *q = draft_sampler_.Distribution(row, DV, sp);
  for (TokenProb& e : *q) e.id = head_.token(e.id);
  const double u = r.rng.Uniform();
  double acc = 0.0;
  for (const TokenProb& e : *q) {
    acc += e.p;
    if (u < acc) return e.id;
  }
  return q->back().id;
}

void MtpSpeculator::TakeDraft(int k, Request& r, size_t i, size_t chunk, DepthPass& pass,
                              Drafts& d) {
  const int64_t H = model_.config().hidden_size;
  SeqState& st = *FindState<SeqState>(r.seq_id);
  const SequenceChunk& ch = pass.batch.chunks[chunk];
  std::vector<TokenProb> q;
  d.ids[i].push_back(SampleDraft(pass.logits.data() + chunk * head_.size(), r, &q));
  if (!r.params->sampling.greedy()) d.probs[i].push_back(std::move(q));
  if (opts_.chained) {
    for (int j = 0; j < ch.num_tokens; ++j) {
      st.out[k].Set(ch.start_pos + j, pass.hout.data() + int64_t{ch.token_begin + j} * H, H);
    }
  }
  // Positions whose input token was a draft are recomputed once it is verified (all of them
  // while the sequence is shorter than the depth: a 1-token prompt at depth 2).
  const int t = r.num_tokens() - 2;
  st.next[k] = std::max(0, t - k + 1);
  const Status rw = kv_->Rewind(st.mtp_seq[k], st.next[k]);
  MIMO_CHECK(rw.ok(), "%s", rw.message().c_str());
}

// Depth by depth, one MTP pass over every request still drafting; a request stops at its bound
// or when its draft sequence has no room.
void MtpSpeculator::Propose(ExecContext& ctx, std::span<Request* const> reqs,
                            std::span<const int> max_drafts) {
  Drafts d = StartDrafts(reqs, max_drafts);
  for (int k = 0; k < opts_.num_speculative_tokens; ++k) {
    DepthPass pass;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (!d.active[i] || max_drafts[i] <= k) continue;
      if (!AddDepthRows(k, *reqs[i], i, d, pass)) d.active[i] = 0;
    }
    if (pass.batch.chunks.empty()) break;
    RunDepth(ctx, k, pass);
    for (size_t c = 0; c < pass.who.size(); ++c) {
      TakeDraft(k, *reqs[pass.who[c]], pass.who[c], c, pass, d);
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i]->draft = std::move(d.ids[i]);
    reqs[i]->draft_probs = std::move(d.probs[i]);
    if (SeqState* st = FindState<SeqState>(reqs[i]->seq_id)) Trim(*st);
  }
}

}  // namespace mimo
