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

namespace {

// The rank of what a delta holds first and last: reasoning 0, content 1, calls 2 (-1: nothing).
int FirstRank(const ChatDelta& d) {
  return !d.reasoning_content.empty() ? 0 : !d.content.empty() ? 1 : !d.tool_calls.empty() ? 2 : -1;
}
int LastRank(const ChatDelta& d) {
  return !d.tool_calls.empty() ? 2 : !d.content.empty() ? 1 : !d.reasoning_content.empty() ? 0 : -1;
}

// Appends `d` to the last part when that keeps the order, else starts a new part.
void AppendInOrder(ChatDelta d, std::vector<ChatDelta>* parts) {
  if (d.empty()) return;
  if (parts->empty() || FirstRank(d) < LastRank(parts->back())) {
    parts->push_back(std::move(d));
    return;
  }
  ChatDelta& last = parts->back();
  last.reasoning_content += d.reasoning_content;
  last.content += d.content;
  for (ToolCallDelta& t : d.tool_calls) {
    // A call's next fragment joins the one before it (one event, not one per byte).
    if (t.id.empty() && !last.tool_calls.empty() && last.tool_calls.back().index == t.index) {
      last.tool_calls.back().arguments += t.arguments;
    } else {
      last.tool_calls.push_back(std::move(t));
    }
  }
}

}  // namespace

std::vector<ChatDelta> ChatOutputParser::FeedInOrder(std::string_view text, bool finish) {
  std::vector<ChatDelta> parts;
  // One byte at a time: each step releases what that byte completes, so the steps come in the
  // text's order (the parsers give the same result at every chunk size: the matrix test).
  for (size_t i = 0; i < text.size(); ++i) AppendInOrder(Feed(text.substr(i, 1)), &parts);
  if (finish) AppendInOrder(Finish(), &parts);
  return parts;
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
