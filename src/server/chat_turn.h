// ChatTurn: the native form every chat-shaped request becomes (chat completions, Anthropic
// messages, the Responses API) before the chat template, the tokenizer and the engine see it, and
// the one preparation they share: thinking resolved against the template's default, the prompt
// rendered (a new assistant turn, or the final assistant message continued), tokenized, max_tokens
// fitted into the context, the output constraint built, and the output parsers configured.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "chat/chat_output_parser.h"
#include "chat/chat_prompt.h"
#include "chat/tool_schema.h"
#include "engine/request.h"
#include "server/api_error.h"

namespace mimo {

struct ChatTurn {
  OJson messages = OJson::array();  // OpenAI-style messages, validated
  OJson tools = nullptr;            // OpenAI tools array, or null
  OJson template_kwargs = OJson::object();
  std::string tool_choice = "none";  // none | auto | required | function
  std::string tool_choice_function;
  bool parallel_tool_calls = true;
  OJson response_format = nullptr;  // null, or {"type": "json_object" | "json_schema", ...}
  // Continue the final (assistant) message instead of opening a new turn.
  bool continue_final_message = false;
  bool add_generation_prompt = true;
  int reasoning_budget = -1;  // tokens the reasoning block may take; -1: no limit
  GenerationRequest gen;      // sampling and stop rules; prompt_ids filled by PrepareTurn
};

// The parsed delta of one engine event: its text fed to the sample's parser and, when the sample
// finished, what the parser still held.
ChatDelta ParseEvent(ChatOutputParser* parser, const RequestOutput& ev);
// The same, in the order the event's text holds its parts (ChatOutputParser::FeedInOrder): for
// the writers whose blocks or items are ordered (Anthropic, Responses).
std::vector<ChatDelta> ParseEventInOrder(ChatOutputParser* parser, const RequestOutput& ev);

// What the answer is built with.
struct PreparedTurn {
  ToolSchema schema;  // the tools the output parser recognises
  ChatParserOptions parser;
  bool reasons = false;              // the output may start with a reasoning block
  bool prompt_in_reasoning = false;  // the prompt itself opened it
  int prompt_tokens = 0;
  bool max_tokens_fitted = false;  // max_tokens was lowered to the room left in the context
  // Tokens the output may take: max_tokens, within the room the prompt leaves in the context.
  int output_budget = 0;
};

// How a chat answer ended, for every protocol to report (chat completions "length", Anthropic
// "max_tokens", Responses "incomplete"/max_output_tokens): the engine's reason, except that an
// answer with tool calls that ended as its token budget ran out is kLength. Under an output
// constraint a call always closes as valid JSON, steered to its end in time
// (grammar/output_constraint.h), so the engine sees a normal end (its EOS on the budget's last
// token, or the grammar's own end one before it, the slot the engine keeps for the end); but its
// arguments were cut to fit ("Fen" for "Fenwick"), so the client must not take them as complete.
// A call the model itself ended on exactly that token is reported so too: the two cannot be told
// apart from the output (one token more of budget tells).
FinishReason AnswerFinishReason(const RequestOutput& ev, const ChatOutputParser& parser,
                                int output_budget);

// Counts the output tokens of the reasoning block (usage's reasoning_tokens, Anthropic's
// thinking_tokens): the tokens between a leading <think> (or the start of the output when the
// prompt opened the block) and </think>, the tags not counted - what a reasoning budget limits;
// a <tool_call> inside the block ends the count, as the output constraint ends the block there
// for a budget (grammar/output_constraint.h). The reasoning parser lets the block go on after such
// a call (chat/reasoning_parser.h); reasoning written there, which only unconstrained output can
// have, is reasoning_content but is not counted.
class ReasoningTokenCounter {
 public:
  ReasoningTokenCounter() = default;
  ReasoningTokenCounter(const PreparedTurn& turn, int32_t think_start_id, int32_t think_end_id,
                        int32_t tool_call_id);
  void Add(std::span<const int32_t> ids);
  int count() const { return count_; }

 private:
  enum class State { kBefore, kIn, kDone };
  State state_ = State::kDone;
  int32_t start_ = -1, end_ = -1, tool_call_ = -1;
  int count_ = 0;
};

}  // namespace mimo
