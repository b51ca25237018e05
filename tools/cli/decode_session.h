// The loop the CLI tools that drive the model without the engine share (bench e2e, bench model,
// bench grammar, bench spec, grammar-walk): B sequences of the KV cache, each prompt in one step,
// then one token per sequence per step (greedy, or the tokens the caller picked). Every step is
// planned by the KvCache and run on every rank (engine/model_runner.h). The sequences are freed
// when the session ends, so one cache serves session after session.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cli/model_loading.h"
#include "engine/model_runner.h"
#include "kv/kv_cache.h"

namespace mimo::cli {

class DecodeSession {
 public:
  // Sequences 0 .. num_seqs - 1 of kv (none may be in it yet).
  DecodeSession(LoadedModel& lm, KvCache& kv, int num_seqs);
  ~DecodeSession();
  DecodeSession(const DecodeSession&) = delete;
  DecodeSession& operator=(const DecodeSession&) = delete;

  // ids [num_seqs * prompt_len]: sequence s's prompt is ids[s * prompt_len ...]. One step; each
  // sequence's last row's logits go to logits(s). hidden: optional [num_seqs * prompt_len, H]
  // pre-norm hidden states (ForwardOutputs::prenorm_hidden).
  Status Prefill(std::span<const int32_t> ids, int prompt_len, float* hidden = nullptr);
  // One step of next[s] for every sequence s (next.size() == num_seqs).
  Status Decode(std::span<const int32_t> next, float* hidden = nullptr);
  // One step of the argmax of every sequence's logits.
  Status DecodeGreedy();
  // Any step of the session's sequences (rows of chunk i are sequence chunks[i].seq_id's);
  // logits of the rows out.logit_rows, as ForwardOutputs says.
  Status Step(const StepBatch& batch, const int32_t* tokens, const ForwardOutputs& out);

  float* logits(int s) { return logits_.data() + static_cast<size_t>(s) * vocab_; }  // [vocab]
  int position(int s) const { return kv_.num_tokens(s); }  // tokens computed so far
  int num_seqs() const { return num_seqs_; }
  Status status() const { return status_; }  // why the sequences could not be started

 private:
  LoadedModel& lm_;
  KvCache& kv_;
  int num_seqs_;
  int64_t vocab_;
  std::vector<float> logits_;  // [num_seqs, vocab] of the last step
  std::vector<int32_t> next_;  // [num_seqs]
  Status status_;
};

}  // namespace mimo::cli
