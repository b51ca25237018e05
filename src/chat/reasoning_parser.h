// The `mimo` reasoning parser: splits model output into reasoning_content (<think>...</think>)
// and content, one-shot or streamed delta by delta.
//
// Behaviour (decided from serving.md §1.5 and the MiMo-V2.5 chat template):
// - Thinking on (`enable_thinking`): output that starts with `<think>` (leading whitespace is
//   dropped) is reasoning up to `</think>`; the rest is content, verbatim. Output that does not
//   start with `<think>` is all content. `<tool_call>` inside reasoning ends the reasoning
//   implicitly: the tag and what follows go to content (the tool-call parser sees it). A reasoning
//   block with no end by the end of output (max_tokens) is returned as reasoning.
// - `prompt_ends_in_think`: the prompt already opened the block (think-prefill template), so
//   parsing starts inside the reasoning, whether or not `enable_thinking` was set: the prompt
//   itself is the evidence that the model is reasoning.
// - Thinking off (the default, as SGLang's "explicit_enable_thinking" for mimo): everything is
//   content, except that a leading empty `<think></think>` (whitespace before and inside it is
//   stripped with it; text after it is kept verbatim) is removed. A non-empty think block is then
//   plain content text.
// - Tags are matched exactly; text that could still become a tag at the end of a delta is held
//   back and decided by the next delta (or released as text by Finish), so a partial tag never
//   reaches either stream, and the streamed result equals the one-shot result for any chunking.
// - Reasoning text and content are verbatim (no whitespace stripping).
#pragma once

#include <string>
#include <string_view>

namespace mimo {

struct ReasoningParserOptions {
  bool enable_thinking = false;       // chat_template_kwargs.enable_thinking (alias: thinking)
  bool prompt_ends_in_think = false;  // the rendered prompt ends in "<think>"
};

struct ReasoningDelta {
  std::string reasoning;  // reasoning_content text to append
  std::string content;    // content text to append
  bool empty() const { return reasoning.empty() && content.empty(); }
};

// One parser per generated sequence; not thread-safe.
class MimoReasoningParser {
 public:
  explicit MimoReasoningParser(ReasoningParserOptions options = {});

  ReasoningDelta Feed(std::string_view delta);
  ReasoningDelta Finish();  // end of output: releases held text; Feed must not follow

  // One-shot: a fresh parser fed `text` in one piece, then finished.
  static ReasoningDelta Parse(std::string_view text, ReasoningParserOptions options = {});

 private:
  enum class State {
    kStart,         // nothing decided yet: looking for a leading "<think>"
    kOffThinkOpen,  // thinking off, saw "<think>": is it the empty "<think></think>"?
    kReasoning,     // inside <think>
    kContent,       // everything else is content
  };
  void Step(ReasoningDelta* out);

  ReasoningParserOptions options_;
  State state_;
  std::string buf_;   // text not yet assigned to a stream
  std::string held_;  // kOffThinkOpen: the leading "<think>" (with whitespace) under decision
  bool finished_ = false;
};

}  // namespace mimo
