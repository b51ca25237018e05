// ApiServer::RenderTurn / PrepareTurn, signatures (and the request parsers' ParseContext, which
// checks them), and the reasoning-token counter (see chat_turn.h).
#include "server/chat_turn.h"

#include "core/base64.h"
#include "core/sha256.h"
#include "server/api_server.h"
#include "server/structured_output.h"

namespace mimo {
namespace {

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The text of a message's content (a string, or the text of its parts).
std::string ContentText(const OJson& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const OJson& p : content) {
      if (p.is_object() && p.contains("text") && p["text"].is_string())
        out += p["text"].get<std::string>();
    }
  }
  return out;
}

}  // namespace

ChatDelta ParseEvent(ChatOutputParser* parser, const RequestOutput& ev) {
  ChatDelta d = parser->Feed(ev.text);
  if (ev.finished) {
    ChatDelta tail = parser->Finish();
    d.reasoning_content += tail.reasoning_content;
    d.content += tail.content;
    d.tool_calls.insert(d.tool_calls.end(), tail.tool_calls.begin(), tail.tool_calls.end());
  }
  return d;
}

std::vector<ChatDelta> ParseEventInOrder(ChatOutputParser* parser, const RequestOutput& ev) {
  return parser->FeedInOrder(ev.text, ev.finished);
}

FinishReason AnswerFinishReason(const RequestOutput& ev, const ChatOutputParser& parser,
                                int output_budget) {
  if (!ev.finished || ev.finish_reason != FinishReason::kStop || !parser.made_tool_calls() ||
      output_budget <= 0) {
    return ev.finish_reason;
  }
  const int end_slot = ev.stop_reason == "grammar" ? 1 : 0;  // kept after a self-ending grammar
  return ev.num_output_tokens + end_slot >= output_budget ? FinishReason::kLength
                                                           : ev.finish_reason;
}

std::optional<ApiError> ApiServer::RenderTurn(ChatTurn* t, ChatPrompt* prompt) const {
  // Thinking unset: the template's own default, made explicit so that template and parser agree.
  if (!t->template_kwargs.contains("enable_thinking") && !t->template_kwargs.contains("thinking")) {
    t->template_kwargs["enable_thinking"] = model_.thinks_by_default;
  }
  if (t->continue_final_message &&
      (t->messages.empty() || t->messages.back().value("role", "") != "assistant")) {
    return BadRequest("continuing the final message needs an assistant message last", "messages");
  }
  ChatRenderRequest r;
  r.messages = &t->messages;
  r.tools = &t->tools;
  r.kwargs = &t->template_kwargs;
  r.add_generation_prompt = t->add_generation_prompt;
  r.continue_final_message = t->continue_final_message;
  // Request text stays text unless the server was told otherwise (chat/chat_prompt.h).
  auto p = RenderChatPrompt(*model_.chat_template, r,
                            opts_.parse_special_in_content ? nullptr : model_.tokenizer);
  if (!p.ok()) return BadRequest(p.status().message(), "messages");
  *prompt = std::move(p).value();
  return std::nullopt;
}

std::optional<ApiError> ApiServer::PrepareTurn(ChatTurn* t, PreparedTurn* out) const {
  // A grammar to compile first: the request goes to the slow pool before its prompt is rendered
  // and tokenized, and there the grammar is compiled before them.
  ConstraintRequest c;
  c.response_format = t->response_format;
  c.tools = t->tools;
  c.tool_choice = t->tool_choice;
  c.tool_choice_function = t->tool_choice_function;
  c.parallel_tool_calls = t->parallel_tool_calls;
  if (auto e = EnsureGrammar(c, model_)) return e;
  ChatPrompt rendered;
  if (auto e = RenderTurn(t, &rendered)) return e;
  const std::string& prompt = rendered.text;
  auto reasoning = ReasoningOptionsFromKwargs(t->template_kwargs);
  if (!reasoning.ok()) return BadRequest(reasoning.status().message(), "chat_template_kwargs");
  out->parser = ChatParserOptions{};
  out->parser.reasoning = *reasoning;
  out->parser.reasoning.prompt_ends_in_think = PromptEndsInThink(prompt);
  // A continued assistant message with text in it is the answer going on: the model does not
  // open a reasoning block there, and output is content.
  const bool continues_text = t->continue_final_message &&
                              !ContentText(t->messages.back().value("content", OJson())).empty();
  if (continues_text) out->parser.reasoning.enable_thinking = false;
  out->prompt_in_reasoning = out->parser.reasoning.prompt_ends_in_think;
  out->reasons = out->prompt_in_reasoning ||
                 (out->parser.reasoning.enable_thinking && !EndsWith(prompt, "</think>"));
  if (t->tool_choice != "none" && !t->tools.is_null()) {
    auto s = ToolSchema::FromJson(t->tools);
    if (!s.ok()) return BadRequest(s.status().message(), "tools");
    out->schema = std::move(s).value();
  }
  t->gen.prompt_ids = EncodeChatPrompt(*model_.tokenizer, rendered);
  out->prompt_tokens = static_cast<int>(t->gen.prompt_ids.size());
  // max_tokens beyond the room the prompt leaves: lowered to the room (llama-server's way, so
  // agents that always ask for 32k tokens work with a smaller context), unless strict. A prompt
  // that leaves no room at all is the engine's error (context_length_exceeded).
  const int room = model_.defaults.max_model_len - out->prompt_tokens;
  StopParams& stop = t->gen.stop;
  if (room > 0 && stop.max_tokens > room && !opts_.strict_max_tokens) {
    stop.max_tokens = room;
    stop.min_tokens = std::min(stop.min_tokens, room);
    out->max_tokens_fitted = true;
  }
  // The output constraint: structured output, forced or auto tool calls, tool_choice none, the
  // reasoning block and its budget; checked up front against the budget the request now has.
  c.thinking = out->reasons;
  c.prompt_in_reasoning = out->prompt_in_reasoning;
  c.reasoning_budget = out->reasons ? t->reasoning_budget : -1;
  c.max_tokens = stop.max_tokens > 0 ? stop.max_tokens : room;
  out->output_budget = room > 0 ? std::min(c.max_tokens, room) : c.max_tokens;
  return BuildConstraint(c, model_, &t->gen.constraint);
}

std::string ApiServer::Sign(std::string_view kind, std::string_view text) const {
  std::string msg(kind);
  msg += '\0';
  msg += text;
  const Sha256Digest d = HmacSha256(signing_key_, msg);
  return Base64Encode(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

bool ApiServer::Verify(std::string_view kind, std::string_view text,
                       std::string_view signature) const {
  return ConstantTimeEquals(Sign(kind, text), signature);
}

ParseContext ApiServer::ParseCtx() const {
  return ParseContext{model_.defaults,
                      [this](std::string_view kind, std::string_view text,
                             std::string_view signature) { return Verify(kind, text, signature); },
                      responses_.get()};
}

ReasoningTokenCounter::ReasoningTokenCounter(const PreparedTurn& turn, int32_t think_start_id,
                                             int32_t think_end_id, int32_t tool_call_id)
    : state_(turn.prompt_in_reasoning ? State::kIn
             : turn.reasons           ? State::kBefore
                                      : State::kDone),
      start_(think_start_id),
      end_(think_end_id),
      tool_call_(tool_call_id) {}

void ReasoningTokenCounter::Add(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (state_ == State::kBefore) {
      state_ = id == start_ ? State::kIn : State::kDone;
      continue;  // the tag itself is not reasoning
    }
    if (state_ != State::kIn) continue;
    if (id == end_ || id == tool_call_) {
      state_ = State::kDone;
      continue;
    }
    ++count_;
  }
}

}  // namespace mimo
