// ChatOutputParser: the `mimo` reasoning parser followed by the `mimo` tool-call parser on its
// content stream and on the tool-call blocks written inside the reasoning block. Turns one
// generated text into {content, reasoning_content, tool_calls}, one-shot or streamed.
//
// Calls inside `<think>` (see reasoning_parser.h) are tool calls like any other: they get the next
// index, the reasoning around them stays reasoning_content, and the `</think>` after them never
// reaches content. A block there that is not a call (an unknown function) is content text, as it
// is after the reasoning block.
//
// Content null vs "" (decision, following vLLM/OpenAI): when the output has tool calls and the
// text outside them is empty or whitespace only, content is null (and whitespace-only content is
// never streamed in that case). Without tool calls content is always a string, possibly "".
// To make the stream agree, leading whitespace-only content is held until non-space content
// arrives (then released in full) or until Finish (released only if no call was made).
// reasoning_content is null when empty.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"
#include "core/status.h"

namespace mimo {

struct ChatParserOptions {
  ReasoningParserOptions reasoning;
  ToolCallParserOptions tool_calls;
};

// Reads enable_thinking / its alias thinking from chat_template_kwargs (an object or null):
// thinking is on when either is true. A non-boolean value is an error.
StatusOr<ReasoningParserOptions> ReasoningOptionsFromKwargs(const nlohmann::json& kwargs);

// True when a rendered prompt ends inside an opened think block ("...<think>").
bool PromptEndsInThink(std::string_view prompt);

struct ChatDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
};

struct ChatParseResult {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  bool content_is_null() const { return content.empty() && !tool_calls.empty(); }
  // {"content": str|null, "reasoning_content": str|null, "tool_calls": [OpenAI tool calls]}.
  nlohmann::ordered_json ToJson() const;
};

void AccumulateChatDelta(const ChatDelta& delta, ChatParseResult* result);

// One parser per generated sequence; not thread-safe.
class ChatOutputParser {
 public:
  ChatOutputParser(ToolSchema schema, ChatParserOptions options);

  ChatDelta Feed(std::string_view text);
  ChatDelta Finish();

  // Feed, keeping the order of what the text holds. A ChatDelta lists reasoning, then content,
  // then calls; a burst of several tokens (speculative decoding) may hold the end of a call and
  // the text after it, which writers of ordered blocks (Anthropic content blocks, Responses output
  // items) must see in that order. Each element is in reasoning -> content -> calls order, and
  // together they hold exactly what Feed would return. `finish`: also Finish() at the end.
  std::vector<ChatDelta> FeedInOrder(std::string_view text, bool finish);

  static ChatParseResult Parse(const ToolSchema& schema, std::string_view text,
                               ChatParserOptions options);

  // A tool call has been emitted (its header at least).
  bool made_tool_calls() const { return saw_tool_call_; }

 private:
  void AddContent(const ToolParseDelta& tools, ChatDelta* out);
  void Route(ReasoningDelta r, ChatDelta* out);  // reasoning, calls in it, content -> out

  MimoReasoningParser reasoning_;
  MimoToolCallParser tools_;
  bool content_started_ = false;  // non-space content has been emitted
  bool saw_tool_call_ = false;
  std::string held_space_;        // leading whitespace-only content not yet emitted
};

}  // namespace mimo
