// DecodeSession (see decode_session.h).
#include "cli/decode_session.h"

#include "engine/sampler.h"

namespace mimo::cli {

DecodeSession::DecodeSession(LoadedModel& lm, KvCache& kv, int num_seqs)
    : lm_(lm), kv_(kv), num_seqs_(num_seqs), vocab_(lm.model->config().vocab_size) {
  logits_.resize(static_cast<size_t>(num_seqs) * vocab_);
  next_.resize(num_seqs);
  for (int s = 0; s < num_seqs && status_.ok(); ++s) status_ = kv_.StartSequence(s);
}

DecodeSession::~DecodeSession() {
  for (int s = 0; s < num_seqs_; ++s) kv_.FreeSequence(s);
}

Status DecodeSession::Step(const StepBatch& batch, const int32_t* tokens,
                           const ForwardOutputs& out) {
  MIMO_RETURN_IF_ERROR(status_);
  MIMO_ASSIGN_OR_RETURN(KvStepPlan plan, kv_.PlanStep(batch));
  RunForward(*lm_.model, lm_.ctx, kv_, plan, tokens, out);
  return Status::Ok();
}

Status DecodeSession::Prefill(std::span<const int32_t> ids, int prompt_len, float* hidden) {
  if (static_cast<int64_t>(ids.size()) != int64_t{num_seqs_} * prompt_len) {
    return InvalidArgument("prefill: %zu ids for %d prompts of %d", ids.size(), num_seqs_,
                           prompt_len);
  }
  StepBatch b;
  ForwardOutputs out;
  for (int s = 0; s < num_seqs_; ++s) {
    b.chunks.push_back({s, s * prompt_len, prompt_len, position(s)});
    out.logit_rows.push_back((s + 1) * prompt_len - 1);
  }
  b.num_tokens = num_seqs_ * prompt_len;
  out.logits = logits_.data();
  out.prenorm_hidden = hidden;
  return Step(b, ids.data(), out);
}

Status DecodeSession::Decode(std::span<const int32_t> next, float* hidden) {
  if (static_cast<int>(next.size()) != num_seqs_) {
    return InvalidArgument("decode: %zu tokens for %d sequences", next.size(), num_seqs_);
  }
  StepBatch b;
  for (int s = 0; s < num_seqs_; ++s) b.chunks.push_back({s, s, 1, position(s)});
  b.num_tokens = num_seqs_;
  ForwardOutputs out;
  out.logits = logits_.data();
  out.prenorm_hidden = hidden;
  return Step(b, next.data(), out);
}

Status DecodeSession::DecodeGreedy() {
  for (int s = 0; s < num_seqs_; ++s) next_[s] = Argmax(logits(s), vocab_);
  return Decode(next_);
}

}  // namespace mimo::cli
