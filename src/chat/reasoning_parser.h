// The `mimo` reasoning parser: splits model output into reasoning_content (<think>...</think>)
// and content, one-shot or streamed delta by delta.
//
// Behaviour (decided from serving.md §1.5 and the MiMo-V2.5 chat template):
// - Thinking on (`enable_thinking`): output that starts with `<think>` (leading whitespace is
//   dropped) is reasoning up to `</think>`; the rest is content, verbatim. Output that does not
//   start with `<think>` is all content. A reasoning block with no end by the end of output
//   (max_tokens) is returned as reasoning.
// - Tool calls inside reasoning (MiMo writes them there although its template tells it not to):
//   a `<tool_call>` block inside the think block goes, tags included, to `tool_calls` (for the
//   tool-call parser), not to reasoning. The block runs to its `</tool_call>`, after which the
//   think block goes on: more text is reasoning, more blocks are calls, and the `</think>` that
//   closes it is dropped as usual, so `plan<tool_call>...</tool_call></think>answer` gives
//   reasoning `plan`, the call, and content `answer`. A `</think>` before the block's
//   `</tool_call>` ends both. Text after a call with no `</think>` by the end of output is
//   reasoning (the block was never closed). Under an output constraint (grammar/) the model
//   cannot write text after the call, so this reads constrained output as before.
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
#include <vector>

namespace mimo {

struct ReasoningParserOptions {
  bool enable_thinking = false;       // chat_template_kwargs.enable_thinking (alias: thinking)
  bool prompt_ends_in_think = false;  // the rendered prompt ends in "<think>"
};

// A piece of a `<tool_call>` block written inside the reasoning block.
struct ReasoningToolCallText {
  std::string text;         // the block's text, tags included, to append for the tool-call parser
  bool block_ends = false;  // the block ends after `text` (its `</tool_call>`, or a `</think>`)
};

struct ReasoningDelta {
  std::string reasoning;  // reasoning_content text to append
  std::string content;    // content text to append (after the reasoning block)
  // Tool-call blocks inside the reasoning block, in order; they all come before `content`.
  std::vector<ReasoningToolCallText> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  // The text of every piece in `tool_calls`, joined.
  std::string ToolCallText() const;
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
    kToolCall,      // inside <think>, inside a <tool_call> block
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
