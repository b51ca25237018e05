// Draft verification for speculative decoding (the acceptance rule of EAGLE / MTP stacks).
// Greedy: drafts are accepted while they equal the target's argmax; the first mismatch is
// replaced by the target's token (or, all accepted, the target's next token is the bonus).
// Sampling: standard speculative sampling: draft d is accepted with probability
// min(1, p(d) / q(d)); on rejection the token is drawn from the residual max(0, p - q)
// (renormalised); with every draft accepted the bonus is drawn from p. Then the output
// distribution is exactly the target's p for any draft distribution q, including one supported
// on a subset of the vocabulary (a restricted draft head).
#pragma once

#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/speculator.h"

namespace mimo {

// r.draft [K] (and r.draft_probs [K] when sampling) against logits [K + 1, vocab]. Each row is
// processed as the engine processes a row before sampling (penalties over r's history plus the
// tokens accepted before it, min_tokens masking of eos_ids), using r.rng for the draws.
VerifyResult VerifyDrafts(Request& r, const float* logits, int64_t vocab,
                          const std::vector<int32_t>& eos_ids, Sampler& sampler);

// One draw from residual(p, q) ∝ max(0, p - q); from p when p <= q everywhere.
int32_t SampleResidual(const std::vector<TokenProb>& p, const std::vector<TokenProb>& q,
                       double u);

}  // namespace mimo
