// CompileBudget: what one grammar compile may spend, decided before the work. A schema is request
// input: a 13-byte pattern (`(x{100}){100}`) or one string bound (`"minLength": 1e9`) must not
// cost gigabytes or minutes. Each stage of a compile charges what it is about to build - automaton
// states before determinizing (nested repeats multiply), determinized states (each is a walk of
// the vocabulary for its token sets), string-language states (a walk each, up to ~1 MB of token
// profile), the nodes of the token-distance tables of length-bounded strings (states x counted
// characters), the bytes of the tables - and checks a wall-clock deadline and a cancel flag (the
// client went away) at its loop heads. The first limit crossed sticks: later charges fail at once,
// the builders stop at their next check, and the grammar factories return that status
// (ResourceExhausted naming the limit, or DeadlineExceeded/cancelled as ResourceExhausted too).
// Single-threaded: one budget per compile, on the compiling thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace mimo {

// The limits of one compile (`mimo serve --grammar-limits`). Defaults: room for the recorded
// agents' tools (Claude Code's 12 tools, the largest: 3.4k states, 284 string states whose
// profiles a fresh server builds, 10.5M distance-table nodes for its maxLength 524288, 65 MB of
// tables) a few times over, and at most seconds and a few hundred MB on a 2-core machine.
struct GrammarLimits {
  int64_t max_nfa_states = int64_t{1} << 20;  // automaton states built before determinizing
  int64_t max_states = 100000;                // general states of the pushdown automaton
  int64_t max_text_states = 1024;             // states of string languages whose profile is built
  int64_t max_text_nodes = int64_t{1} << 25;  // states x (counted characters + 1), all strings
  int64_t max_bytes = int64_t{256} << 20;     // tables built: masks, distances, new profiles
  double deadline_s = 60;                     // wall clock of the whole compile; <= 0: none
};

class CompileBudget {
 public:
  explicit CompileBudget(const GrammarLimits& limits = {},
                         const std::atomic<bool>* cancel = nullptr);

  // Each adds to its count and returns the budget's status (the first failure sticks).
  Status ChargeNfaStates(int64_t n);
  Status ChargeStates(int64_t n);
  Status ChargeTextStates(int64_t n);
  Status ChargeTextNodes(int64_t n);
  Status ChargeBytes(int64_t n);
  // The deadline and the cancel flag; cheap enough for a loop head (a clock read).
  Status Check();

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const GrammarLimits& limits() const { return limits_; }
  // What was spent (for stats and tests).
  int64_t states() const { return states_; }
  int64_t text_states() const { return text_states_; }
  int64_t text_nodes() const { return text_nodes_; }
  int64_t bytes() const { return bytes_; }
  bool cancelled() const { return cancel_ != nullptr && cancel_->load(std::memory_order_relaxed); }

 private:
  Status Fail(Status s);

  GrammarLimits limits_;
  const std::atomic<bool>* cancel_;
  std::chrono::steady_clock::time_point start_;
  Status status_;
  int64_t nfa_states_ = 0, states_ = 0, text_states_ = 0, text_nodes_ = 0, bytes_ = 0;
};

// The status of a compile stopped because its client went away (the server drops it unanswered).
bool IsCancelledCompile(const Status& s);
Status CancelledCompile();
// The status of a compile stopped at its deadline (it might fit another time, on a quieter host).
bool IsDeadlineCompile(const Status& s);

}  // namespace mimo
