// TokenConstraint: what a request may generate next (structured outputs: the server wraps a
// src/grammar GrammarMatcher in one). The sampler masks every token outside FillMask; after a
// token is chosen the engine calls Accept; once IsTerminated the request ends with finish
// reason "stop" (the grammar reaching its end ends the output). Speculative verification masks
// each draft row with the state after the drafts accepted before it. Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace mimo {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // bitmask [ceil(vocab / 32)] words: bit set = allowed next. eos_ids are allowed exactly when
  // the constrained text may end here. remaining_tokens: how many tokens the request may still
  // generate, this one included (max_tokens or the context), so that a constraint can steer to
  // its end in time.
  virtual void FillMask(uint32_t* bitmask, std::span<const int32_t> eos_ids,
                        int remaining_tokens) = 0;
  // Advances past `id`; false (state unchanged) when it was not allowed.
  virtual bool Accept(int32_t id) = 0;
  // Complete, and nothing more may follow.
  virtual bool IsTerminated() const = 0;
};

// One constraint per sample (n > 1 samples each get their own).
using ConstraintFactory = std::function<std::unique_ptr<TokenConstraint>()>;

}  // namespace mimo
