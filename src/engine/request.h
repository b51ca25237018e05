// What the engine serves: a submission (prompt ids, sampling and stop rules, n samples), the
// per-sample Request the scheduler moves waiting -> running -> finished (or preempted ->
// waiting), and the events a submission's sink receives. Plain data; no JSON, no HTTP.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop_checker.h"
#include "engine/token_constraint.h"

namespace mimo {

enum class FinishReason : uint8_t { kNone, kStop, kLength, kAbort, kError, kCount };
// "stop" | "length" | "abort" | "error" (OpenAI / vLLM finish_reason names).
const char* FinishReasonName(FinishReason r);

// One submission. n > 1 asks for n samples of the same prompt; they share its KV blocks
// through the prefix cache (samples 1..n-1 start once sample 0 has computed the prompt).
struct GenerationRequest {
  std::vector<int32_t> prompt_ids;  // [num_prompt_tokens]
  SamplingParams sampling;
  StopParams stop;
  int n = 1;
  ConstraintFactory constraint;  // structured output; null: unconstrained
  // Deliver an event with no tokens when each sample is first scheduled, before its prompt is
  // computed: it carries the prefix-cache hit (num_cached_tokens), which Anthropic's
  // message_start reports before a long prefill.
  bool report_admission = false;
};

// Monotonic seconds (steady clock) since an arbitrary origin; the event timestamps.
double NowSeconds();

// One event for one sample: the tokens it produced in a step, or its end.
struct RequestOutput {
  uint64_t request_id = 0;
  int index = 0;                       // sample index (0 .. n-1)
  std::vector<int32_t> token_ids;      // new tokens (a stop token included)
  std::vector<SampledToken> logprobs;  // one per new token when logprobs were asked
  std::string text;                    // new text (held back while it may start a stop string)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;  // the stop string, or the stop token id as text
  std::string error;        // set with FinishReason::kError
  // Counts and timings (seconds, NowSeconds clock).
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;  // prompt tokens served by the prefix cache at first admission
  int num_output_tokens = 0;  // so far
  double time = 0;            // when this event was made
  double arrival_time = 0;
  double first_scheduled_time = 0;  // 0 until scheduled (queue time = this - arrival)
  double first_token_time = 0;      // 0 until the first token
};

// Called on the engine thread for every event of a submission; must be quick and must not call
// back into the engine synchronously (queue the event and return).
using OutputSink = std::function<void(RequestOutput&&)>;

enum class RequestStatus : uint8_t { kWaiting, kRunning, kPreempted, kFinished };

// One sample of a submission: a sequence in the KV cache. Owned by the Scheduler; engine thread
// only. vLLM's Request: num_computed_tokens catches up with num_tokens() step by step, which
// covers prefill, chunked prefill, decode and recomputation after preemption alike.
struct Request {
  uint64_t request_id = 0;
  int index = 0;
  int seq_id = 0;  // KV-cache sequence id, unique among live requests
  std::shared_ptr<const GenerationRequest> params;
  std::shared_ptr<OutputSink> sink;
  std::vector<int32_t> output;  // sampled ids so far
  // Speculative decoding: proposed tokens after the last verified one, scheduled for
  // verification in the next step, and (sampling) each draft's distribution.
  std::vector<int32_t> draft;
  std::vector<std::vector<TokenProb>> draft_probs;
  int num_computed = 0;         // tokens whose K/V are in the cache
  int num_cached_tokens = -1;   // prefix hit at first admission (-1: not admitted yet)
  int max_tokens = 0;           // effective limit (from the request and the context length)
  RequestStatus status = RequestStatus::kWaiting;
  // n > 1: samples 1.. wait for sample 0 to compute the prompt, then hit its cached blocks.
  int prefill_leader = -1;  // seq id of sample 0, or -1
  bool prompt_computed = false;
  // Sampling state.
  SamplerRng rng{0};
  std::unordered_map<int32_t, int> output_counts;  // penalties
  std::vector<int32_t> prompt_unique;              // sorted distinct prompt ids (repetition)
  std::unique_ptr<StopChecker> stop;
  std::unique_ptr<TokenConstraint> constraint;  // from params->constraint, or null
  // Timings.
  double arrival_time = 0, first_scheduled_time = 0, first_token_time = 0;

  const std::vector<int32_t>& prompt() const { return params->prompt_ids; }
  int num_prompt_tokens() const { return static_cast<int>(params->prompt_ids.size()); }
  int num_tokens() const { return num_prompt_tokens() + static_cast<int>(output.size()); }
  int num_tokens_with_spec() const { return num_tokens() + static_cast<int>(draft.size()); }
  // Prompt, then output, then drafts.
  int32_t token_at(int pos) const {
    if (pos < num_prompt_tokens()) return params->prompt_ids[pos];
    pos -= num_prompt_tokens();
    return pos < static_cast<int>(output.size()) ? output[pos] : draft[pos - output.size()];
  }
  bool finished() const { return status == RequestStatus::kFinished; }
};

}  // namespace mimo
