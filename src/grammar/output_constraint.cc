// OutputConstraint: phases (opening, reasoning block, answer) over a GrammarMatcher and the tag
// tables of `<think>`, `</think>` and the tool-call tag.
#include "grammar/output_constraint.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace mimo {
namespace {

// The chat output parser's own tags (chat/reasoning_parser.cc).
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

void Set(uint32_t* mask, int32_t id, bool on) {
  if (on) {
    mask[id >> 5] |= 1u << (id & 31);
  } else {
    mask[id >> 5] &= ~(1u << (id & 31));
  }
}

bool AllSpace(std::string_view b) {
  if (b.empty()) return false;
  for (char c : b)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
  return true;
}

}  // namespace

StatusOr<std::shared_ptr<const OutputPlan>> OutputPlan::Make(OutputFormat f) {
  using A = OutputFormat::Answer;
  using R = OutputFormat::Reasoning;
  auto p = std::shared_ptr<OutputPlan>(new OutputPlan());
  if (f.answer != A::kFree && !f.grammar) return InvalidArgument("output format: no grammar");
  if (f.grammar) f.vocab = f.grammar->vocab_ptr();
  if (!f.vocab) return InvalidArgument("output format: no vocabulary");
  if (f.reasoning != R::kNone && f.think_end_id < 0)
    return InvalidArgument("output format: reasoning needs the </think> token");
  if (f.reasoning == R::kOptional && f.think_start_id < 0)
    return InvalidArgument("output format: optional reasoning needs the <think> token");
  if (f.tool_call_tag.empty()) return InvalidArgument("output format: empty tool-call tag");
  const TokenVocabulary& vocab = *f.vocab;
  const bool free_start = f.answer != A::kGrammar;
  if (f.reasoning != R::kNone) p->close_ = vocab.TagTableFor(kThinkClose);
  if (f.reasoning != R::kNone || f.answer == A::kGrammarAfterTag || f.forbid_tool_calls)
    p->call_ = vocab.TagTableFor(f.tool_call_tag);
  if (f.reasoning == R::kOptional && free_start) p->open_ = vocab.TagTableFor(kThinkOpen);
  p->answer_tokens_ = 0;
  p->tag_tokens_ = f.answer == A::kFree && f.forbid_tool_calls ? kNoEnd : 0;
  if (f.grammar) {
    GrammarMatcher m(f.grammar);
    if (f.answer == A::kGrammar) p->answer_tokens_ = m.TokensToEnd();
    p->tag_tokens_ = m.AcceptString(f.tool_call_tag) ? m.TokensToEnd() : kNoEnd;
  }
  p->close_cost_ = 1 + std::min(p->answer_tokens_, p->tag_tokens_);
  p->close_required_ = f.answer == A::kGrammar || f.reasoning_budget >= 0;
  p->f_ = std::move(f);
  return std::shared_ptr<const OutputPlan>(std::move(p));
}

int32_t OutputPlan::MinTokens() const {
  switch (f_.reasoning) {
    case OutputFormat::Reasoning::kNone:
    case OutputFormat::Reasoning::kOptional:  // skipping the block is shortest
      return answer_tokens_;
    case OutputFormat::Reasoning::kOpen:
      return close_required_ ? close_cost_ : 0;
  }
  return 0;
}

OutputConstraint::OutputConstraint(std::shared_ptr<const OutputPlan> plan)
    : plan_(std::move(plan)), f_(plan_->f_), vocab_(*f_.vocab) {
  if (f_.grammar) matcher_ = std::make_unique<GrammarMatcher>(f_.grammar);
  switch (f_.reasoning) {
    case OutputFormat::Reasoning::kNone:
      phase_ = Phase::kAnswer;
      StartAnswer(false);
      break;
    case OutputFormat::Reasoning::kOptional:
      phase_ = Phase::kOpening;
      break;
    case OutputFormat::Reasoning::kOpen:
      phase_ = Phase::kReasoning;
      break;
  }
}

bool OutputConstraint::IsEos(int32_t id) const {
  return std::find(eos_.begin(), eos_.end(), id) != eos_.end();
}

void OutputConstraint::StartAnswer(bool after_call_tag) {
  call_state_ = 0;
  grammar_active_ = f_.answer == OutputFormat::Answer::kGrammar;
  if (!after_call_tag) return;
  if (f_.answer != OutputFormat::Answer::kFree) {
    grammar_active_ = true;
    const bool ok = matcher_->AcceptString(f_.tool_call_tag);
    MIMO_CHECK(ok, "the call tag was allowed but the grammar refuses it");
  }
}

void OutputConstraint::FillMask(uint32_t* bitmask, std::span<const int32_t> eos_ids,
                                int32_t remaining) {
  eos_.assign(eos_ids.begin(), eos_ids.end());
  const int32_t words = vocab_.mask_words();
  switch (phase_) {
    case Phase::kAnswer:
      FillAnswerMask(bitmask, eos_ids, remaining);
      break;
    case Phase::kReasoning:
      FillReasoningMask(bitmask, eos_ids, remaining);
      break;
    case Phase::kOpening: {
      FillAnswerMask(bitmask, eos_ids, remaining);
      // As the parser: a text that starts with `<think>` (after whitespace) is reasoning; only
      // the token opens the block here, so the spellings of it that a free answer could begin
      // with are refused.
      if (plan_->open_) {
        for (int32_t id : plan_->open_->starters()) Set(bitmask, id, false);
      }
      if (f_.think_start_id < vocab_.size()) {
        Set(bitmask, f_.think_start_id,
            !plan_->close_required_ || remaining - 1 >= plan_->close_cost_);
      }
      break;
    }
  }
  for (int32_t w = 0; w < words; ++w)
    if (bitmask[w] != 0) return;
  // Past every budget (the engine's max_tokens below MinTokens, or a context cut): the output
  // cannot end complete; keep it going as well-formed as it can.
  if (phase_ == Phase::kReasoning) {
    if (f_.think_end_id < vocab_.size()) Set(bitmask, f_.think_end_id, true);
  } else if (AnswerGrammar()) {
    matcher_->FillNextTokenMask(bitmask, eos_ids);
  } else {
    std::memset(bitmask, 0xff, sizeof(uint32_t) * words);
  }
}

void OutputConstraint::FillAnswerMask(uint32_t* bitmask, std::span<const int32_t> eos_ids,
                                      int32_t remaining) {
  if (AnswerGrammar()) return matcher_->FillMaskWithin(bitmask, eos_ids, remaining);
  std::memset(bitmask, 0xff, sizeof(uint32_t) * vocab_.mask_words());
  if (!plan_->call_) return;
  // The call tag: under auto, the grammar takes over once it is written (if the call still fits);
  // under none it is refused; written partly by a token (the rest of it would be the call's
  // first bytes) it is refused too.
  const bool trigger = f_.answer == OutputFormat::Answer::kGrammarAfterTag;
  for (const TagTable::Completion& c : plan_->call_->completions(call_state_)) {
    const bool at_end = c.end == static_cast<int32_t>(vocab_.bytes(c.id).size());
    Set(bitmask, c.id, trigger && at_end && remaining - 1 >= plan_->tag_tokens_);
  }
}

int OutputConstraint::Closes(int32_t id, bool* at_end) const {
  const std::string_view b = vocab_.bytes(id);
  int32_t e1 = -1, e2 = -1;
  plan_->close_->Advance(close_state_, b, &e1);
  plan_->call_->Advance(call_state_, b, &e2);
  // The parser ends the reasoning at whichever tag starts first.
  const int32_t s1 = e1 < 0 ? 1 << 30 : e1 - static_cast<int32_t>(kThinkClose.size());
  const int32_t s2 = e2 < 0 ? 1 << 30 : e2 - static_cast<int32_t>(f_.tool_call_tag.size());
  if (e1 < 0 && e2 < 0) return 0;
  const bool first_close = s1 <= s2;
  *at_end = (first_close ? e1 : e2) == static_cast<int32_t>(b.size());
  return first_close ? 1 : 2;
}

void OutputConstraint::FillReasoningMask(uint32_t* bitmask, std::span<const int32_t> eos_ids,
                                         int32_t remaining) {
  const OutputPlan& p = *plan_;
  // Another reasoning token: within the budget, and leaving room to close and answer.
  const bool more = (f_.reasoning_budget < 0 || used_ < f_.reasoning_budget) &&
                    (!p.close_required_ || remaining - 1 >= p.close_cost_);
  std::memset(bitmask, more ? 0xff : 0x00, sizeof(uint32_t) * vocab_.mask_words());
  // Ending the output inside the block: only when nothing needs to follow it.
  for (int32_t e : eos_ids)
    if (e >= 0 && e < vocab_.size())
      Set(bitmask, e, more && f_.answer != OutputFormat::Answer::kGrammar);
  auto decide = [&](int32_t id) {
    bool at_end = false;
    const int kind = Closes(id, &at_end);
    bool ok = false;
    if (kind == 1) ok = at_end && remaining - 1 >= p.answer_tokens_;
    // The call tag ends the block too (the call is the answer); for a free answer it is not a
    // way to close it by force (that is `</think>`).
    if (kind == 2)
      ok = at_end && p.tag_tokens_ < kNoEnd && remaining - 1 >= p.tag_tokens_ &&
           (more || f_.answer != OutputFormat::Answer::kFree);
    Set(bitmask, id, ok);
  };
  for (const TagTable::Completion& c : p.close_->completions(close_state_)) decide(c.id);
  for (const TagTable::Completion& c : p.call_->completions(call_state_)) decide(c.id);
  // The `</think>` token closes even where the vocabulary marks it special (no text of its own).
  if (f_.think_end_id < vocab_.size() && !vocab_.maskable(f_.think_end_id))
    Set(bitmask, f_.think_end_id, remaining - 1 >= p.answer_tokens_);
}

bool OutputConstraint::Accept(int32_t id) {
  switch (phase_) {
    case Phase::kAnswer:
      return AcceptAnswer(id);
    case Phase::kOpening:
      if (id == f_.think_start_id) {
        phase_ = Phase::kReasoning;
        return true;
      }
      if (f_.answer != OutputFormat::Answer::kGrammar && !IsEos(id) && vocab_.maskable(id) &&
          AllSpace(vocab_.bytes(id))) {
        return true;  // leading whitespace: the parser may still see `<think>` after it
      }
      phase_ = Phase::kAnswer;
      StartAnswer(false);
      if (!AcceptAnswer(id)) {
        phase_ = Phase::kOpening;
        grammar_active_ = false;
        return false;
      }
      return true;
    case Phase::kReasoning: {
      if (id == f_.think_end_id && !vocab_.maskable(id)) {
        phase_ = Phase::kAnswer;
        StartAnswer(false);
        return true;
      }
      if (IsEos(id) || !vocab_.maskable(id)) {  // the text has no bytes of it
        ++used_;
        return true;
      }
      bool at_end = false;
      const int kind = Closes(id, &at_end);
      if (kind != 0) {
        if (!at_end) return false;
        if (kind == 2 && plan_->tag_tokens_ >= kNoEnd) return false;
        phase_ = Phase::kAnswer;
        StartAnswer(kind == 2);
        return true;
      }
      int32_t end;
      close_state_ = plan_->close_->Advance(close_state_, vocab_.bytes(id), &end);
      call_state_ = plan_->call_->Advance(call_state_, vocab_.bytes(id), &end);
      ++used_;
      return true;
    }
  }
  return false;
}

bool OutputConstraint::AcceptAnswer(int32_t id) {
  if (grammar_active_) return matcher_->AcceptToken(id);
  if (!plan_->call_ || IsEos(id) || !vocab_.maskable(id)) return true;
  int32_t end;
  const int32_t next = plan_->call_->Advance(call_state_, vocab_.bytes(id), &end);
  if (end >= 0) {
    const bool at_end = end == static_cast<int32_t>(vocab_.bytes(id).size());
    if (f_.answer != OutputFormat::Answer::kGrammarAfterTag || !at_end ||
        plan_->tag_tokens_ >= kNoEnd)
      return false;
    grammar_active_ = true;
    const bool ok = matcher_->AcceptString(f_.tool_call_tag);
    MIMO_CHECK(ok, "the call tag was allowed but the grammar refuses it");
    return true;
  }
  call_state_ = next;
  return true;
}

bool OutputConstraint::IsTerminated() const {
  return phase_ == Phase::kAnswer && grammar_active_ && matcher_->IsTerminated();
}

}  // namespace mimo
