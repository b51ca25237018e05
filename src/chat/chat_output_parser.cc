// ChatOutputParser: reasoning parser -> tool-call parser, plus the content null rule.
#include "chat/chat_output_parser.h"

#include "chat/tag_match.h"

namespace mimo {

StatusOr<ReasoningParserOptions> ReasoningOptionsFromKwargs(const nlohmann::json& kwargs) {
  ReasoningParserOptions options;
  if (kwargs.is_null()) return options;
  if (!kwargs.is_object()) return InvalidArgument("chat_template_kwargs: expected a JSON object");
  for (const char* key : {"enable_thinking", "thinking"}) {
    auto it = kwargs.find(key);
    if (it == kwargs.end() || it->is_null()) continue;
    if (!it->is_boolean())
      return InvalidArgument("chat_template_kwargs.%s: expected true or false", key);
    if (it->get<bool>()) options.enable_thinking = true;
  }
  return options;
}

bool PromptEndsInThink(std::string_view prompt) {
  constexpr std::string_view kThink = "<think>";
  return prompt.size() >= kThink.size() && prompt.substr(prompt.size() - kThink.size()) == kThink;
}

nlohmann::ordered_json ChatParseResult::ToJson() const {
  using ojson = nlohmann::ordered_json;
  ojson j = ojson::object();
  j["content"] = content_is_null() ? ojson(nullptr) : ojson(content);
  j["reasoning_content"] = reasoning_content.empty() ? ojson(nullptr) : ojson(reasoning_content);
  ojson calls = ojson::array();
  for (const ToolCall& c : tool_calls) {
    ojson call = ojson::object();
    call["id"] = c.id;
    call["type"] = "function";
    call["function"] = ojson::object();
    call["function"]["name"] = c.name;
    call["function"]["arguments"] = c.arguments;
    calls.push_back(std::move(call));
  }
  j["tool_calls"] = std::move(calls);
  return j;
}

void AccumulateChatDelta(const ChatDelta& delta, ChatParseResult* result) {
  result->reasoning_content += delta.reasoning_content;
  ToolParseResult tools{std::move(result->content), std::move(result->tool_calls)};
  AccumulateToolDelta({delta.content, delta.tool_calls}, &tools);
  result->content = std::move(tools.content);
  result->tool_calls = std::move(tools.tool_calls);
}

ChatOutputParser::ChatOutputParser(ToolSchema schema, ChatParserOptions options)
    : reasoning_(options.reasoning), tools_(std::move(schema), options.tool_calls) {}

void ChatOutputParser::AddContent(const ToolParseDelta& tools, ChatDelta* out) {
  for (const ToolCallDelta& d : tools.tool_calls) {
    if (!d.id.empty()) saw_tool_call_ = true;
    out->tool_calls.push_back(d);
  }
  if (content_started_) {
    out->content += tools.content;
    return;
  }
  if (SkipSpaces(tools.content) == tools.content.size()) {
    held_space_ += tools.content;
    return;
  }
  out->content += held_space_;
  out->content += tools.content;
  held_space_.clear();
  content_started_ = true;
}

void ChatOutputParser::Route(ReasoningDelta r, ChatDelta* out) {
  out->reasoning_content += r.reasoning;
  for (const ReasoningToolCallText& piece : r.tool_calls) {
    AddContent(tools_.Feed(piece.text), out);
    if (piece.block_ends) AddContent(tools_.EndBlock(), out);
  }
  if (!r.content.empty()) AddContent(tools_.Feed(r.content), out);
}

ChatDelta ChatOutputParser::Feed(std::string_view text) {
  ChatDelta out;
  Route(reasoning_.Feed(text), &out);
  return out;
}

ChatDelta ChatOutputParser::Finish() {
  ChatDelta out;
  Route(reasoning_.Finish(), &out);
  AddContent(tools_.Finish(), &out);
  if (!content_started_ && !saw_tool_call_) out.content += held_space_;
  held_space_.clear();
  return out;
}

ChatParseResult ChatOutputParser::Parse(const ToolSchema& schema, std::string_view text,
                                        ChatParserOptions options) {
  ChatOutputParser parser(schema, options);
  ChatParseResult result;
  AccumulateChatDelta(parser.Feed(text), &result);
  AccumulateChatDelta(parser.Finish(), &result);
  return result;
}

}  // namespace mimo
