// MtpSpeculator (see mtp_speculator.h).
#include "speculative/mtp_speculator.h"

#include <algorithm>

#include "core/check.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "kv/kv_cache.h"
#include "speculative/verify.h"

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
  kv_ = &kv;
  block_size_ = block_size;
  return Status::Ok();
}

void MtpSpeculator::Trim(SeqState& st) const {
  int lo = st.started ? *std::min_element(st.next.begin(), st.next.end()) : st.start;
  st.hidden.erase(st.hidden.begin(), st.hidden.lower_bound(lo));
  for (auto& m : st.out) m.erase(m.begin(), m.lower_bound(lo - 1));
}

void MtpSpeculator::ObserveStep(const SchedulePlan& plan, const float* hidden,
                                std::span<Request* const> chunk_requests) {
  const int64_t H = model_.config().hidden_size;
  const int K = opts_.num_speculative_tokens;
  int row = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    Request* r = chunk_requests[i];
    auto it = seqs_.find(c.seq_id);
    if (it == seqs_.end()) {
      // (Re)admitted: the drafter starts at the last window before the first draft position.
      SeqState st;
      const int first_draft_pos = r->num_tokens() - 1;
      st.start = std::max(0, first_draft_pos - window_ - K + 1) / block_size_ * block_size_;
      st.out.resize(K);
      it = seqs_.emplace(c.seq_id, std::move(st)).first;
    }
    SeqState& st = it->second;
    const int lo = st.started ? *std::min_element(st.next.begin(), st.next.end()) : st.start;
    for (int j = 0; j < c.num_tokens; ++j) {
      const int pos = c.start_pos + j;
      if (pos < lo) continue;
      const float* h = hidden + static_cast<int64_t>(row + j) * H;
      st.hidden[pos].assign(h, h + H);
    }
    row += c.num_tokens;
  }
}

VerifyResult MtpSpeculator::Verify(Request& r, const float* logits, int64_t vocab,
                                   const std::vector<int32_t>& eos_ids, Sampler& sampler) {
  return VerifyDrafts(r, logits, vocab, eos_ids, sampler);
}

void MtpSpeculator::Propose(ExecContext& ctx, std::span<Request* const> reqs,
                            std::span<const int> max_drafts) {
  const int64_t H = model_.config().hidden_size;
  const int64_t DV = head_.size();
  const int K = opts_.num_speculative_tokens;
  std::vector<std::vector<int32_t>> drafts(reqs.size());
  std::vector<std::vector<std::vector<TokenProb>>> probs(reqs.size());
  std::vector<uint8_t> active(reqs.size(), 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request* r = reqs[i];
    auto it = seqs_.find(r->seq_id);
    if (it == seqs_.end() || max_drafts[i] <= 0) continue;
    SeqState& st = it->second;
    if (!st.started) {
      st.mtp_seq.resize(K);
      st.next.assign(K, st.start);
      bool ok = true;
      for (int k = 0; k < K && ok; ++k) {
        st.mtp_seq[k] = next_mtp_seq_++;
        if (next_mtp_seq_ == (1 << 30) + (1 << 29)) next_mtp_seq_ = 1 << 30;
        ok = kv_->AddDraftSequence(st.mtp_seq[k], st.start).ok();
      }
      if (!ok) continue;
      st.started = true;
    }
    active[i] = 1;
  }
  for (int k = 0; k < K; ++k) {
    StepBatch batch;
    std::vector<int32_t> tokens;   // [T]
    std::vector<float> hprev;      // [T, H]
    std::vector<int> logit_rows;
    std::vector<size_t> who;       // request index of each chunk
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (!active[i] || max_drafts[i] <= k) continue;
      Request* r = reqs[i];
      SeqState& st = seqs_[r->seq_id];
      const int t = r->num_tokens() - 2;  // last position with a main hidden state
      const int n_verified = r->num_tokens();  // tokens x_0 .. x_{t+1}
      const int p0 = st.next[k];
      const int n = t - p0 + 1;
      if (n <= 0 || !kv_->ReserveSlots(st.mtp_seq[k], n)) {
        active[i] = 0;
        continue;
      }
      batch.chunks.push_back({st.mtp_seq[k], batch.num_tokens, n, p0});
      for (int p = p0; p <= t; ++p) {
        const int idx = p + k + 1;  // the token this depth pairs with position p
        tokens.push_back(idx < n_verified ? r->token_at(idx) : drafts[i][idx - n_verified]);
        const std::vector<float>* h = nullptr;
        if (opts_.chained && k > 0) {
          auto o = st.out[k - 1].find(p);
          if (o != st.out[k - 1].end()) h = &o->second;
        }
        if (!h) {
          auto hit = st.hidden.find(p);
          MIMO_CHECK(hit != st.hidden.end(), "MTP: no hidden state kept for position %d", p);
          h = &hit->second;
        }
        hprev.insert(hprev.end(), h->begin(), h->end());
      }
      batch.num_tokens += n;
      logit_rows.push_back(batch.num_tokens - 1);
      who.push_back(i);
    }
    if (batch.chunks.empty()) break;
    std::vector<float> logits(logit_rows.size() * DV);  // [chunks, draft vocab]
    std::vector<float> hout;
    MtpOutputs mo;
    mo.logit_rows = logit_rows;
    mo.logits = logits.data();
    mo.head = &head_.weight();
    if (opts_.chained) {
      hout.resize(static_cast<size_t>(batch.num_tokens) * H);
      mo.hidden_out = hout.data();
    }
    StatusOr<KvStepPlan> plan = kv_->PlanStep(batch);
    MIMO_CHECK(plan.ok(), "MTP draft step: %s", plan.status().message().c_str());
    RunMtpForward(model_, ctx, k, *kv_, *plan, hprev.data(), tokens.data(), mo);
    for (size_t c = 0; c < who.size(); ++c) {
      const size_t i = who[c];
      Request* r = reqs[i];
      SeqState& st = seqs_[r->seq_id];
      const SequenceChunk& ch = batch.chunks[c];
      const float* row = logits.data() + c * DV;
      const SamplingParams& sp = r->params->sampling;
      if (sp.greedy()) {
        drafts[i].push_back(head_.token(Argmax(row, DV)));
      } else {
        std::vector<TokenProb> q = draft_sampler_.Distribution(row, DV, sp);
        for (TokenProb& e : q) e.id = head_.token(e.id);
        double u = r->rng.Uniform(), acc = 0.0;
        int32_t pick = q.back().id;
        for (const TokenProb& e : q) {
          acc += e.p;
          if (u < acc) {
            pick = e.id;
            break;
          }
        }
        drafts[i].push_back(pick);
        probs[i].push_back(std::move(q));
      }
      if (opts_.chained) {
        for (int j = 0; j < ch.num_tokens; ++j) {
          const float* h = hout.data() + static_cast<int64_t>(ch.token_begin + j) * H;
          st.out[k][ch.start_pos + j].assign(h, h + H);
        }
      }
      // Positions whose input token was a draft are recomputed once it is verified (all of
      // them while the sequence is shorter than the depth: a 1-token prompt at depth 2).
      const int t = r->num_tokens() - 2;
      st.next[k] = std::max(0, t - k + 1);
      const Status rw = kv_->Rewind(st.mtp_seq[k], st.next[k]);
      MIMO_CHECK(rw.ok(), "%s", rw.message().c_str());
    }
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i]->draft = std::move(drafts[i]);
    reqs[i]->draft_probs = std::move(probs[i]);
    auto it = seqs_.find(reqs[i]->seq_id);
    if (it != seqs_.end()) Trim(it->second);
  }
}

void MtpSpeculator::Release(int seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  if (it->second.started) {
    for (int s : it->second.mtp_seq) kv_->FreeSequence(s);
  }
  seqs_.erase(it);
}

}  // namespace mimo
