// CompileBudget (see compile_budget.h).
#include "grammar/compile_budget.h"

#include <string>

namespace mimo {
namespace {

constexpr const char* kCancelled = "grammar compile cancelled: the request went away";
constexpr const char* kDeadline = "the schema took longer than";

std::string Over(const char* what, int64_t used, int64_t limit) {
  return StrFormat("the schema is too large to compile: it needs more than %lld %s (this one "
                   "reached %lld); simplify it (fewer or shorter bounded strings, smaller "
                   "patterns or repetitions, fewer properties), or raise the server's limit "
                   "(--grammar-limits)",
                   static_cast<long long>(limit), what, static_cast<long long>(used));
}

}  // namespace

CompileBudget::CompileBudget(const GrammarLimits& limits, const std::atomic<bool>* cancel)
    : limits_(limits), cancel_(cancel), start_(std::chrono::steady_clock::now()) {}

Status CompileBudget::Fail(Status s) {
  if (status_.ok()) status_ = std::move(s);
  return status_;
}

Status CompileBudget::ChargeNfaStates(int64_t n) {
  nfa_states_ += n;
  if (nfa_states_ > limits_.max_nfa_states)
    return Fail(ResourceExhausted("%s", Over("automaton states before determinizing",
                                             nfa_states_, limits_.max_nfa_states).c_str()));
  return status_;
}

Status CompileBudget::ChargeStates(int64_t n) {
  states_ += n;
  if (states_ > limits_.max_states)
    return Fail(ResourceExhausted(
        "%s", Over("automaton states", states_, limits_.max_states).c_str()));
  return Check();
}

Status CompileBudget::ChargeTextStates(int64_t n) {
  text_states_ += n;
  if (text_states_ > limits_.max_text_states)
    return Fail(ResourceExhausted("%s", Over("string-pattern states", text_states_,
                                             limits_.max_text_states).c_str()));
  return Check();
}

Status CompileBudget::ChargeTextNodes(int64_t n) {
  text_nodes_ += n;
  if (text_nodes_ > limits_.max_text_nodes)
    return Fail(ResourceExhausted(
        "%s", Over("string-length table entries (states x characters of minLength/maxLength)",
                   text_nodes_, limits_.max_text_nodes)
                  .c_str()));
  return Check();
}

Status CompileBudget::ChargeBytes(int64_t n) {
  bytes_ += n;
  if (bytes_ > limits_.max_bytes)
    return Fail(ResourceExhausted("%s", Over("bytes of tables", bytes_, limits_.max_bytes).c_str()));
  return status_;
}

Status CompileBudget::Check() {
  if (!status_.ok()) return status_;
  if (cancelled()) return Fail(CancelledCompile());
  if (limits_.deadline_s > 0) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (s > limits_.deadline_s)
      return Fail(ResourceExhausted("%s %.0f s to compile (the server's deadline, "
                                    "--grammar-limits); simplify it",
                                    kDeadline, limits_.deadline_s));
  }
  return status_;
}

bool IsCancelledCompile(const Status& s) {
  return s.code() == StatusCode::kResourceExhausted && s.message() == kCancelled;
}

Status CancelledCompile() { return ResourceExhausted(kCancelled); }

bool IsDeadlineCompile(const Status& s) {
  return s.code() == StatusCode::kResourceExhausted && s.message().rfind(kDeadline, 0) == 0;
}

}  // namespace mimo
