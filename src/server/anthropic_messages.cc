// POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API over the same
// engine and chat template, so coding agents that speak either protocol work. The request becomes
// a ChatTurn (anthropic_request.h); the output goes through the `mimo` parsers and comes back as
// thinking / text / tool_use blocks (thinking signed, so that it can come back), whole or as the
// message_start ... message_stop event stream (message_start as soon as the engine schedules the
// request, pings while the prompt is processed).

#include "chat/chat_output_parser.h"
#include "core/base64.h"
#include "server/anthropic_request.h"
#include "server/api_server.h"
#include "server/request_json.h"
#include "server/response_writer.h"
#include "server/structured_output.h"

namespace mimo {

// Anthropic's thinking-block signature: base64 of an HMAC-SHA256 of the thinking text under the
// server's key; with display "omitted" the (empty) block carries the text itself after a '.'.
static std::string ThinkingSignature(const ApiServer& s, const std::string& text, bool omitted) {
  std::string sig = s.Sign(kThinkingSignatureKind, text);
  if (omitted) sig += "." + Base64Encode(text);
  return sig;
}

// An error of /v1/messages: Anthropic's shape, with error.details.error_code for the thread
// error, which the SDK's message threads read to replay the conversation.
static void SendMessagesError(HttpResponse& res, const ApiError& e) {
  if (e.code != kThreadNotFound)
    return ApiServer::SendError(res, e, ApiServer::Protocol::kAnthropic);
  OJson j = e.AnthropicJson();
  j["error"]["details"] = {{"error_code", e.code}};
  ApiServer::SendJson(res, j, e.status);
}

namespace {

// Stream and whole-response state: one open content block at a time (thinking, text or a
// tool_use).
struct MessageState {
  const ApiServer* server = nullptr;
  std::string id, model;
  std::vector<std::string> stop_sequences;
  std::unique_ptr<ChatOutputParser> parser;
  ReasoningTokenCounter reasoning;
  bool omit_thinking = false;
  int input_tokens = 0, output_tokens = 0, cached = 0;
  int output_budget = 0;  // PreparedTurn::output_budget
  FinishReason reason = FinishReason::kNone;
  std::string stop_reason_text;
  bool made_calls = false;
  // Whole response.
  ChatParseResult result;
  // Stream.
  bool started = false;        // message_start written
  int block = -1;              // index of the open block
  std::string block_type;      // "thinking" | "text" | "tool_use"
  std::string block_thinking;  // text of the open thinking block (for its signature)
  int open_call = -1;          // tool-call index of the open tool_use block

  std::string StopReason() const {
    if (reason == FinishReason::kLength) return "max_tokens";
    if (made_calls) return "tool_use";
    for (const std::string& s : stop_sequences) {
      if (s == stop_reason_text) return "stop_sequence";
    }
    return "end_turn";
  }
  OJson StopSequence() const {
    return StopReason() == "stop_sequence" ? OJson(stop_reason_text) : OJson(nullptr);
  }
  // Anthropic counts cache reads apart from input_tokens (which are the uncached rest).
  OJson Usage() const {
    NoteRequestTokens(input_tokens, output_tokens);
    return {{"input_tokens", input_tokens - cached},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", cached},
            {"output_tokens", output_tokens},
            {"output_tokens_details", {{"thinking_tokens", reasoning.count()}}}};
  }

  std::vector<ChatDelta> Apply(const RequestOutput& ev) {
    std::vector<ChatDelta> parts = ParseEventInOrder(parser.get(), ev);
    if (ev.finished) {
      reason = AnswerFinishReason(ev, *parser, output_budget);  // a call cut to fit: max_tokens
      stop_reason_text = ev.stop_reason;
    }
    for (const ChatDelta& d : parts)
      for (const ToolCallDelta& t : d.tool_calls) made_calls |= !t.id.empty();
    reasoning.Add(ev.token_ids);
    input_tokens = ev.num_prompt_tokens;
    output_tokens = ev.num_output_tokens;
    cached = ev.num_cached_tokens;
    return parts;
  }

  std::string Close() {
    if (block < 0 || block_type.empty()) return "";
    std::string out;
    if (block_type == "thinking") {
      out += Delta({{"type", "signature_delta"},
                    {"signature", ThinkingSignature(*server, block_thinking, omit_thinking)}});
      block_thinking.clear();
    }
    block_type.clear();
    return out + SseEvent("content_block_stop",
                          DumpJson({{"type", "content_block_stop"}, {"index", block}}));
  }
  std::string Open(const std::string& type, OJson content_block) {
    std::string out = Close();
    ++block;
    block_type = type;
    out += SseEvent("content_block_start", DumpJson({{"type", "content_block_start"},
                                                     {"index", block},
                                                     {"content_block", content_block}}));
    return out;
  }
  std::string Delta(OJson delta) const {
    return SseEvent(
        "content_block_delta",
        DumpJson({{"type", "content_block_delta"}, {"index", block}, {"delta", delta}}));
  }

  // message_start, once: with the engine's admission event (GenerationRequest::
  // report_admission), which comes when the request is first scheduled, before its prompt is
  // computed, and carries the prefix-cache hit, so message_start reports the same split of the
  // prompt into input_tokens and cache_read_input_tokens as message_delta. A request still queued
  // when the first ping is due gets its message_start then, before the hit is known (the whole
  // prompt as input_tokens; message_delta has the split).
  std::string StartOnce() {
    if (started) return "";
    started = true;
    OJson msg = {{"id", id},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", model},
                 {"content", OJson::array()},
                 {"stop_reason", nullptr},
                 {"stop_sequence", nullptr},
                 {"usage",
                  {{"input_tokens", input_tokens - cached},
                   {"cache_creation_input_tokens", 0},
                   {"cache_read_input_tokens", cached},
                   {"output_tokens", 0}}}};
    return SseEvent("message_start", DumpJson({{"type", "message_start"}, {"message", msg}}));
  }

  // The events of one in-order part of an event (reasoning, text, calls).
  std::string Blocks(const ChatDelta& d) {
    std::string out;
    if (!d.reasoning_content.empty()) {
      if (block_type != "thinking") {
        out += Open("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      }
      block_thinking += d.reasoning_content;
      if (!omit_thinking)
        out += Delta({{"type", "thinking_delta"}, {"thinking", d.reasoning_content}});
    }
    if (!d.content.empty()) {
      if (block_type != "text") out += Open("text", {{"type", "text"}, {"text", ""}});
      out += Delta({{"type", "text_delta"}, {"text", d.content}});
    }
    for (const ToolCallDelta& c : d.tool_calls) {
      if (!c.id.empty() || open_call != c.index) {
        open_call = c.index;
        out += Open("tool_use", {{"type", "tool_use"},
                                 {"id", ToolUseId(c.id)},
                                 {"name", c.name},
                                 {"input", OJson::object()}});
      }
      if (!c.arguments.empty())
        out += Delta({{"type", "input_json_delta"}, {"partial_json", c.arguments}});
    }
    return out;
  }

  std::string StreamEvent(const RequestOutput& ev) {
    const std::vector<ChatDelta> parts = Apply(ev);  // first: it reads the prefix-cache hit
    std::string out = StartOnce();
    for (const ChatDelta& d : parts) out += Blocks(d);
    // An engine error ends the stream with an error event instead (StreamWriters::error_tail).
    if (ev.finished && ev.finish_reason != FinishReason::kError) {
      out += Close();
      out += SseEvent(
          "message_delta",
          DumpJson({{"type", "message_delta"},
                    {"delta", {{"stop_reason", StopReason()}, {"stop_sequence", StopSequence()}}},
                    {"usage", Usage()}}));
      out += SseEvent("message_stop", DumpJson({{"type", "message_stop"}}));
    } else if (ev.finished) {
      out += Close();
    }
    return out;
  }

  std::string Whole() const {
    OJson content = OJson::array();
    if (!result.reasoning_content.empty()) {
      content.push_back(
          {{"type", "thinking"},
           {"thinking", omit_thinking ? "" : result.reasoning_content},
           {"signature", ThinkingSignature(*server, result.reasoning_content, omit_thinking)}});
    }
    if (!result.content.empty() &&
        !(made_calls && result.content.find_first_not_of(" \t\r\n") == std::string::npos)) {
      content.push_back({{"type", "text"}, {"text", result.content}});
    }
    for (const ToolCall& c : result.tool_calls) {
      OJson input = ParseNestedJson(c.arguments);
      if (input.is_discarded()) input = OJson::object();
      content.push_back(
          {{"type", "tool_use"}, {"id", ToolUseId(c.id)}, {"name", c.name}, {"input", input}});
    }
    return DumpJson({{"id", id},
                     {"type", "message"},
                     {"role", "assistant"},
                     {"model", model},
                     {"content", content},
                     {"stop_reason", StopReason()},
                     {"stop_sequence", StopSequence()},
                     {"usage", Usage()}});
  }

  // Anthropic's tool-use ids start with "toolu_" (the parser's start with "call_").
  static std::string ToolUseId(const std::string& call_id) {
    return call_id.rfind("call_", 0) == 0 ? "toolu_" + call_id.substr(5) : call_id;
  }
};

}  // namespace

void ApiServer::HandleMessages(const HttpRequest& req, HttpResponse& res) {
  const Protocol P = Protocol::kAnthropic;
  OJson body;
  if (!Admit(req, res, P, &body)) return;
  AnthropicRequest ar;
  if (auto e = ParseAnthropicRequest(ParseCtx(), body, false, &ar,
                                     HasInterleavedThinkingBeta(req.headers))) {
    return SendMessagesError(res, *e);
  }
  ChatTurn& turn = ar.turn;
  PreparedTurn prep;
  if (auto e = PrepareTurn(&turn, &prep)) return SendError(res, *e, P);
  auto st = std::make_shared<MessageState>();
  st->server = this;
  st->id = RandomId("msg_");
  st->model = model_.defaults.served_model_name;
  st->stop_sequences = turn.gen.stop.stop;
  st->parser = std::make_unique<ChatOutputParser>(prep.schema, prep.parser);
  st->reasoning =
      ReasoningTokenCounter(prep, model_.think_start_id, model_.think_end_id, model_.tool_call_id);
  st->omit_thinking = ar.omit_thinking;
  st->input_tokens = prep.prompt_tokens;
  st->output_budget = prep.output_budget;
  turn.gen.report_admission = ar.stream;  // for message_start
  auto session = std::make_shared<GenerationSession>(*model_.engine, *metrics_, 1);
  const Status s = session->Submit(std::move(turn.gen), 0);
  if (!s.ok()) return SendError(res, FromStatus(s, "messages"), P);
  StreamWriters w;
  w.on_event = [st](const RequestOutput& ev) { return st->StreamEvent(ev); };
  w.before_keepalive = [st] { return st->StartOnce(); };
  w.tail = [] { return std::string(); };
  w.keepalive = SseEvent("ping", DumpJson({{"type", "ping"}}));
  w.error_tail = ErrorTail(P, ar.stream);
  Respond(
      res, session, ar.stream, std::move(w),
      [st](const RequestOutput& ev) {
        for (const ChatDelta& d : st->Apply(ev)) AccumulateChatDelta(d, &st->result);
      },
      [st] { return st->Whole(); });
}

// POST /v1/messages/count_tokens: the prompt's token count, as the request would render it.
void ApiServer::HandleCountTokens(const HttpRequest& req, HttpResponse& res) {
  const Protocol P = Protocol::kAnthropic;
  OJson body;
  if (!Admit(req, res, P, &body)) return;
  AnthropicRequest ar;
  if (auto e = ParseAnthropicRequest(ParseCtx(), body, true, &ar,
                                     HasInterleavedThinkingBeta(req.headers))) {
    return SendMessagesError(res, *e);
  }
  ChatPrompt prompt;
  if (auto e = RenderTurn(&ar.turn, &prompt)) return SendError(res, *e, P);
  const int n = static_cast<int>(EncodeChatPrompt(*model_.tokenizer, prompt).size());
  NoteRequestTokens(n, 0);
  SendJson(res, {{"input_tokens", n}});
}

}  // namespace mimo
