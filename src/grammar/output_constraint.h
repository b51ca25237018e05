// OutputConstraint: the whole output of a chat request under structured outputs, as the chat
// output parser (chat/reasoning_parser.h, chat/tool_call_parser.h) will read it:
//   [reasoning block] answer
// The reasoning block is `<think>` text `</think>` (optional when thinking is on; already open
// when the prompt ends in `<think>`): free text, except that it must close in time, and within
// `reasoning_budget` tokens when one is set. As in the parser, `<tool_call>` inside it also ends
// it (the call is the answer). The answer is a grammar from its first byte (response_format,
// forced tool calls), a grammar from the tool call the model opens (tool_choice auto: free text
// until then), or free text (with tool calls refused under tool_choice none).
//
// Ending in time: every mask keeps only tokens after which a complete output still fits in the
// tokens left (GrammarMatcher::FillMaskWithin for the answer; for the reasoning block, room for
// the closing tag and the shortest answer after it), so an output that starts within budget
// (OutputPlan::MinTokens) always ends complete, with the engine's finish reason "stop".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar/tag_table.h"

namespace mimo {

struct OutputFormat {
  enum class Answer {
    kFree,             // any text (see forbid_tool_calls)
    kGrammar,          // the grammar, from the answer's first byte
    kGrammarAfterTag,  // free text until the model writes tool_call_tag, the grammar from there
  };
  enum class Reasoning {
    kNone,      // no reasoning block (thinking off, or the prompt closed it)
    kOptional,  // the output may start with think_start_id
    kOpen,      // the prompt opened the block: the output starts inside it
  };
  Answer answer = Answer::kFree;
  std::shared_ptr<const Grammar> grammar;  // kGrammar, kGrammarAfterTag
  bool forbid_tool_calls = false;          // kFree: the answer may not write tool_call_tag
  std::string tool_call_tag = "<tool_call>";
  Reasoning reasoning = Reasoning::kNone;
  int32_t think_start_id = -1;    // `<think>` (kOptional)
  int32_t think_end_id = -1;      // `</think>` (kOptional, kOpen)
  int32_t reasoning_budget = -1;  // tokens inside the block before `</think>`; -1: no limit
  std::shared_ptr<const TokenVocabulary> vocab;  // the grammar's when there is one
};

// Immutable once made; shared by the samples of a request (and across threads).
class OutputPlan {
 public:
  // InvalidArgument when the format lacks what it needs (a grammar, the think ids).
  static StatusOr<std::shared_ptr<const OutputPlan>> Make(OutputFormat format);

  const OutputFormat& format() const { return f_; }
  // Fewest tokens of a complete output that finishes "stop" (the end counted as one token, see
  // token_distance.h), for the up-front check against max_tokens; 0 when nothing is required.
  int32_t MinTokens() const;

 private:
  friend class OutputConstraint;
  OutputFormat f_;
  std::shared_ptr<const TagTable> close_, call_, open_;  // `</think>`, the call tag, `<think>`
  int32_t answer_tokens_ = 0;    // fewest tokens of an answer from its start
  int32_t tag_tokens_ = 0;       // ... from just after the call tag (kNoEnd: the tag is refused)
  int32_t close_cost_ = 1;       // ... from inside the reasoning block: the closing tag and after
  bool close_required_ = false;  // the block must close (a budget, or a grammar after it)
};

// One per sample; not thread-safe (the engine thread).
class OutputConstraint {
 public:
  explicit OutputConstraint(std::shared_ptr<const OutputPlan> plan);

  // bitmask [vocab mask words]; remaining: tokens the output may still have, this one included.
  // Never empty: past every budget it falls back to the unbudgeted mask.
  void FillMask(uint32_t* bitmask, std::span<const int32_t> eos_ids, int32_t remaining);
  // False (state unchanged) when the token was not allowed.
  bool Accept(int32_t id);
  // The answer's grammar reached its end.
  bool IsTerminated() const;

  enum class Phase { kOpening, kReasoning, kAnswer };
  Phase phase() const { return phase_; }
  int32_t reasoning_tokens() const { return used_; }

 private:
  // The answer's next token is the grammar's (before the answer starts: whether it will be).
  bool AnswerGrammar() const {
    return grammar_active_ ||
           (phase_ == Phase::kOpening && f_.answer == OutputFormat::Answer::kGrammar);
  }
  void FillAnswerMask(uint32_t* bitmask, std::span<const int32_t> eos_ids, int32_t remaining);
  void FillReasoningMask(uint32_t* bitmask, std::span<const int32_t> eos_ids, int32_t remaining);
  bool AcceptAnswer(int32_t id);
  void StartAnswer(bool after_call_tag);
  // In the reasoning block: which tag a token completes first (0: none, 1: `</think>`, 2: the
  // call tag) and whether it ends with it.
  int Closes(int32_t id, bool* at_end) const;
  bool IsEos(int32_t id) const;

  std::shared_ptr<const OutputPlan> plan_;
  const OutputFormat& f_;
  const TokenVocabulary& vocab_;
  std::unique_ptr<GrammarMatcher> matcher_;
  Phase phase_;
  bool grammar_active_ = false;
  int32_t used_ = 0;         // reasoning tokens so far
  int32_t close_state_ = 0;  // partial `</think>` at the end of the reasoning text
  int32_t call_state_ = 0;   // partial call tag at the end of the text (reasoning or answer)
  std::vector<int32_t> eos_;
};

}  // namespace mimo
