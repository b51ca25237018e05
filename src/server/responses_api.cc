// The OpenAI Responses API: POST /v1/responses, GET / DELETE /v1/responses/{id}, GET
// /v1/responses/{id}/input_items. What `client.responses.create`, the AI SDK's default OpenAI
// provider, LangChain's useResponsesApi and Codex-style agents speak.
//
// A request (instructions, input as a string or items: messages, function_call,
// function_call_output, reasoning) becomes a ChatTurn like a chat completion
// (responses_request.h); the output comes back as output items (reasoning, message,
// function_call), whole or streamed with the typed events (response.created ...
// response.completed). Stored responses (`store`, default true) live in the bounded
// ResponseStore and continue with `previous_response_id`. Reasoning items carry the reasoning text
// as `content` (reasoning_text) and, with `include: ["reasoning.encrypted_content"]` (stateless
// agents), an opaque signed copy that this server reads back: the text, base64, and an HMAC under
// the server's key (signed, not encrypted); one that does not verify is left out of the prompt.
// With `reasoning.summary` (auto, concise, detailed) a reasoning item also carries a summary_text
// part, streamed with the response.reasoning_summary_* events: this model has no separate
// summarizer, so the summary is the reasoning text itself (clients such as the AI SDK and Codex
// show reasoning only from summaries). With `include: ["message.output_text.logprobs"]` the
// output_text parts carry the log-probabilities of their tokens (top_logprobs alternatives each).

#include <ctime>

#include "chat/chat_output_parser.h"
#include "core/base64.h"
#include "core/utf8.h"
#include "server/api_server.h"
#include "server/request_json.h"
#include "server/response_store.h"
#include "server/response_writer.h"
#include "server/responses_request.h"

namespace mimo {
namespace {

// Which part of the output each token belongs to, from the token ids alone (the parsers see text):
// the reasoning block (its tags included), a tool call (<tool_call> through </tool_call>), or the
// output text - whose tokens' log-probabilities the output_text parts carry.
class TokenPhase {
 public:
  struct Ids {
    int32_t think_start = -1, think_end = -1, tool_call = -1, tool_call_end = -1;
  };
  TokenPhase() = default;
  TokenPhase(const PreparedTurn& turn, Ids ids)
      : state_(turn.prompt_in_reasoning ? State::kReasoning
               : turn.reasons           ? State::kBefore
                                        : State::kText),
        ids_(ids) {}

  // Advances past `id`; true when it is a token of the output text.
  bool IsText(int32_t id) {
    switch (state_) {
      case State::kBefore:
        state_ = State::kText;
        if (id == ids_.think_start) {
          state_ = State::kReasoning;
          return false;
        }
        return IsText(id);
      case State::kReasoning:
        if (id == ids_.think_end) state_ = State::kText;
        // A call inside the block: the block goes on after it, as the reasoning parser reads it.
        if (id == ids_.tool_call) state_ = State::kReasoningCall;
        return false;
      case State::kReasoningCall:
        // The call runs to its `</tool_call>` (a `</think>` before it is the call's text).
        if (id == ids_.tool_call_end) state_ = State::kReasoning;
        return false;
      case State::kText:
        if (id != ids_.tool_call) return true;
        state_ = State::kCall;
        return false;
      case State::kCall:
        if (id == ids_.tool_call_end) state_ = State::kText;
        return false;
    }
    return false;
  }

 private:
  enum class State { kBefore, kReasoning, kReasoningCall, kText, kCall };
  State state_ = State::kText;
  Ids ids_;
};

// One logprobs entry of the Responses API (as chat completions': token, logprob, bytes,
// top_logprobs).
OJson LogprobEntry(const Tokenizer& tok, int32_t id, float logprob) {
  const std::string_view b = tok.TokenBytes(id);
  OJson bytes = OJson::array();
  for (unsigned char c : b) bytes.push_back(static_cast<int>(c));
  return {{"token", utf8::Repair(b)}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
}

// One response, whole or streamed. Output items are opened as the parser produces reasoning,
// content and calls, and closed when the next kind starts or the output ends.
struct ResponsesState {
  ApiServer* server = nullptr;
  std::string id, model;
  int64_t created = 0;
  OJson echo;
  bool store = true;
  bool encrypted_reasoning = false;
  bool summary = false;          // reasoning items carry a summary (the reasoning text)
  bool logprobs = false;         // output_text parts carry logprobs
  const Tokenizer* tok = nullptr;
  TokenPhase phase;
  OJson pending_logprobs = OJson::array();  // of text tokens the parser has not yet emitted
  OJson text_logprobs = OJson::array();     // of the open message item's text
  OJson history;  // the conversation before this output (for the store)
  OJson input_items;
  std::unique_ptr<ChatOutputParser> parser;
  ReasoningTokenCounter reasoning;
  int prompt_tokens = 0, output_tokens = 0, cached = 0;
  int output_budget = 0;  // PreparedTurn::output_budget
  FinishReason reason = FinishReason::kNone;
  std::string error;
  // Output so far.
  OJson output = OJson::array();
  std::string open;  // "", "reasoning", "message", "function_call"
  int seq = 0;       // sequence_number of the next event

  std::string Event(const char* type, OJson e) {
    e["type"] = type;
    e["sequence_number"] = seq++;
    return SseEvent(type, DumpJson(e));
  }
  int index() const { return static_cast<int>(output.size()) - 1; }

  OJson Usage() const {
    NoteRequestTokens(prompt_tokens, output_tokens);
    return {{"input_tokens", prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", cached}}},
            {"output_tokens", output_tokens},
            {"output_tokens_details", {{"reasoning_tokens", reasoning.count()}}},
            {"total_tokens", prompt_tokens + output_tokens}};
  }

  std::string Status() const {
    if (reason == FinishReason::kNone) return "in_progress";
    if (reason == FinishReason::kLength) return "incomplete";
    if (reason == FinishReason::kError || reason == FinishReason::kAbort) return "failed";
    return "completed";
  }

  OJson Response(bool final) const {
    OJson r = {{"id", id},
               {"object", "response"},
               {"created_at", created},
               {"status", final ? Status() : "in_progress"}};
    r["completed_at"] = final && Status() == "completed"
                            ? OJson(static_cast<int64_t>(std::time(nullptr)))
                            : OJson(nullptr);
    r["error"] = final && Status() == "failed"
                     ? OJson{{"code", "server_error"},
                             {"message", error.empty() ? "the request was aborted" : error}}
                     : OJson(nullptr);
    r["incomplete_details"] =
        final && Status() == "incomplete" ? OJson{{"reason", "max_output_tokens"}} : OJson(nullptr);
    r["model"] = model;
    r["output"] = final ? output : OJson::array();
    for (auto it = echo.begin(); it != echo.end(); ++it) r[it.key()] = it.value();
    r["usage"] = final ? Usage() : OJson(nullptr);
    return r;
  }

  // Items as complete objects (for the whole response and the stored one).
  OJson ReasoningItem(const std::string& item_id, const std::string& text, bool done) const {
    OJson item = {{"type", "reasoning"}, {"id", item_id}, {"summary", OJson::array()}};
    if (summary && done) item["summary"].push_back(SummaryPart(text));
    item["content"] = OJson::array({{{"type", "reasoning_text"}, {"text", text}}});
    if (encrypted_reasoning && done) {
      item["encrypted_content"] =
          kEncryptedPrefix + Base64Encode(text) + "." + server->Sign(kReasoningKind, text);
    }
    item["status"] = done ? "completed" : "in_progress";
    return item;
  }
  static OJson SummaryPart(const std::string& text) {
    return {{"type", "summary_text"}, {"text", text}};
  }
  static OJson TextPart(const std::string& text, OJson logprobs = OJson::array()) {
    return {{"type", "output_text"},
            {"text", text},
            {"annotations", OJson::array()},
            {"logprobs", std::move(logprobs)}};
  }
  static OJson MessageItem(const std::string& item_id, const std::string& text, bool done,
                           OJson logprobs = OJson::array()) {
    return {{"type", "message"},
            {"id", item_id},
            {"role", "assistant"},
            {"status", done ? "completed" : "in_progress"},
            {"content", done ? OJson::array({TextPart(text, std::move(logprobs))}) : OJson::array()}};
  }
  ResponsesTools tools;
  // A call's item: function_call (with its namespace, if any), or custom_tool_call whose input is
  // the `input` argument the model wrote.
  OJson CallItem(const ToolCallDelta& c, const std::string& args, bool done) const {
    const std::string suffix = c.id.substr(c.id.rfind('_') + 1);
    const std::string status = done ? "completed" : "in_progress";
    if (tools.custom.count(c.name)) {
      std::string input;
      const OJson a = ParseNestedJson(args);
      if (a.is_object() && a.contains("input") && a["input"].is_string()) input = a["input"];
      return {{"type", "custom_tool_call"},
              {"id", "ctc_" + suffix},
              {"call_id", c.id},
              {"name", c.name},
              {"input", input},
              {"status", status}};
    }
    OJson item = {{"type", "function_call"}, {"id", "fc_" + suffix}, {"call_id", c.id},
                  {"name", c.name},          {"arguments", args},    {"status", status}};
    if (auto it = tools.namespace_of.find(c.name); it != tools.namespace_of.end()) {
      item["namespace"] = it->second;
    }
    return item;
  }

  // Streaming: the text of each open item so far.
  std::string text_;
  ToolCallDelta call_;  // the open call's first delta (id, name)

  std::string CloseOpen() {
    std::string out;
    const int i = index();
    if (open == "reasoning") {
      const std::string item_id = output[i]["id"];
      if (summary) {
        const OJson at = {{"item_id", item_id}, {"output_index", i}, {"summary_index", 0}};
        OJson e = at;
        e["text"] = text_;
        out += Event("response.reasoning_summary_text.done", std::move(e));
        e = at;
        e["part"] = SummaryPart(text_);
        out += Event("response.reasoning_summary_part.done", std::move(e));
      }
      out +=
          Event("response.reasoning_text.done",
                {{"item_id", item_id}, {"output_index", i}, {"content_index", 0}, {"text", text_}});
      out += Event("response.content_part.done",
                   {{"item_id", item_id},
                    {"output_index", i},
                    {"content_index", 0},
                    {"part", {{"type", "reasoning_text"}, {"text", text_}}}});
      output[i] = ReasoningItem(item_id, text_, true);
    } else if (open == "message") {
      const std::string item_id = output[i]["id"];
      out += Event("response.output_text.done", {{"item_id", item_id},
                                                 {"output_index", i},
                                                 {"content_index", 0},
                                                 {"text", text_},
                                                 {"logprobs", text_logprobs}});
      out += Event("response.content_part.done", {{"item_id", item_id},
                                                  {"output_index", i},
                                                  {"content_index", 0},
                                                  {"part", TextPart(text_, text_logprobs)}});
      output[i] = MessageItem(item_id, text_, true, std::move(text_logprobs));
      text_logprobs = OJson::array();
    } else if (open == "function_call") {
      output[i] = CallItem(call_, text_, true);
      // Closed by the end of an output cut at max_output_tokens: its arguments were cut to fit.
      if (reason == FinishReason::kLength) output[i]["status"] = "incomplete";
      if (output[i]["type"] == "custom_tool_call") {
        out += Event(
            "response.custom_tool_call_input.done",
            {{"item_id", output[i]["id"]}, {"output_index", i}, {"input", output[i]["input"]}});
      } else {
        out += Event("response.function_call_arguments.done", {{"item_id", output[i]["id"]},
                                                               {"output_index", i},
                                                               {"name", call_.name},
                                                               {"arguments", text_}});
      }
    } else {
      return "";
    }
    out += Event("response.output_item.done", {{"output_index", i}, {"item", output[i]}});
    open.clear();
    text_.clear();
    return out;
  }

  std::string OpenItem(const std::string& kind, OJson item) {
    std::string out = CloseOpen();
    // Text tokens no text came of (e.g. the whitespace before a call) are not a later message's.
    if (kind != "message") pending_logprobs = OJson::array();
    output.push_back(item);
    open = kind;
    const int i = index();
    out += Event("response.output_item.added", {{"output_index", i}, {"item", item}});
    if (kind == "reasoning") {
      if (summary) {
        out += Event("response.reasoning_summary_part.added", {{"item_id", item["id"]},
                                                               {"output_index", i},
                                                               {"summary_index", 0},
                                                               {"part", SummaryPart("")}});
      }
      out += Event("response.content_part.added",
                   {{"item_id", item["id"]},
                    {"output_index", i},
                    {"content_index", 0},
                    {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
    } else if (kind == "message") {
      out += Event("response.content_part.added", {{"item_id", item["id"]},
                                                   {"output_index", i},
                                                   {"content_index", 0},
                                                   {"part", TextPart("")}});
    }
    return out;
  }

  std::vector<ChatDelta> Apply(const RequestOutput& ev) {
    std::vector<ChatDelta> parts = ParseEventInOrder(parser.get(), ev);
    if (ev.finished) {
      reason = AnswerFinishReason(ev, *parser, output_budget);  // a call cut to fit: incomplete
      error = ev.error;
    }
    reasoning.Add(ev.token_ids);
    if (logprobs) CollectLogprobs(ev);
    prompt_tokens = ev.num_prompt_tokens;
    output_tokens = ev.num_output_tokens;
    cached = ev.num_cached_tokens;
    return parts;
  }

  // The log-probabilities of the event's text tokens, to go with the next text the parser emits
  // (it holds back what may start a tag); a stop token is not text.
  void CollectLogprobs(const RequestOutput& ev) {
    for (size_t k = 0; k < ev.logprobs.size(); ++k) {
      const SampledToken& t = ev.logprobs[k];
      if (!phase.IsText(t.id)) continue;
      if (ev.finished && k + 1 == ev.logprobs.size() && ev.finish_reason == FinishReason::kStop &&
          ev.stop_reason == std::to_string(t.id)) {
        continue;
      }
      OJson e = LogprobEntry(*tok, t.id, t.logprob);
      OJson top = OJson::array();
      for (const auto& [id, lp] : t.top) top.push_back(LogprobEntry(*tok, id, lp));
      e["top_logprobs"] = std::move(top);
      pending_logprobs.push_back(std::move(e));
    }
  }

  std::string Feed(const ChatDelta& d) {
    std::string out;
    if (!d.reasoning_content.empty()) {
      if (open != "reasoning") {
        out += OpenItem("reasoning", {{"type", "reasoning"},
                                      {"id", RandomId("rs_")},
                                      {"summary", OJson::array()},
                                      {"content", OJson::array()},
                                      {"status", "in_progress"}});
      }
      text_ += d.reasoning_content;
      if (summary) {
        out += Event("response.reasoning_summary_text.delta", {{"item_id", output[index()]["id"]},
                                                               {"output_index", index()},
                                                               {"summary_index", 0},
                                                               {"delta", d.reasoning_content}});
      }
      out += Event("response.reasoning_text.delta", {{"item_id", output[index()]["id"]},
                                                     {"output_index", index()},
                                                     {"content_index", 0},
                                                     {"delta", d.reasoning_content}});
    }
    if (!d.content.empty()) {
      if (open != "message") out += OpenItem("message", MessageItem(RandomId("msg_"), "", false));
      text_ += d.content;
      for (OJson& e : pending_logprobs) text_logprobs.push_back(e);
      out += Event("response.output_text.delta", {{"item_id", output[index()]["id"]},
                                                  {"output_index", index()},
                                                  {"content_index", 0},
                                                  {"delta", d.content},
                                                  {"logprobs", std::move(pending_logprobs)}});
      pending_logprobs = OJson::array();
    }
    for (const ToolCallDelta& c : d.tool_calls) {
      if (!c.id.empty()) {
        call_ = c;
        out += OpenItem("function_call", CallItem(c, "", false));
      }
      if (!c.arguments.empty() && open == "function_call") {
        text_ += c.arguments;
        // A custom call's input is whole only at the end (its deltas are JSON of `input`).
        if (tools.custom.count(call_.name)) continue;
        out += Event("response.function_call_arguments.delta", {{"item_id", output[index()]["id"]},
                                                                {"output_index", index()},
                                                                {"delta", c.arguments}});
      }
    }
    return out;
  }

  // The stored conversation: history plus this output as one assistant turn.
  void Store() {
    if (!store) return;
    OJson a = {{"role", "assistant"}, {"content", ""}};
    for (const OJson& item : output) {
      if (item["type"] == "reasoning") {
        a["reasoning_content"] =
            a.value("reasoning_content", "") + item["content"][0]["text"].get<std::string>();
      } else if (item["type"] == "message") {
        a["content"] =
            a["content"].get<std::string>() + item["content"][0]["text"].get<std::string>();
      } else if (item["type"] == "function_call" || item["type"] == "custom_tool_call") {
        if (!a.contains("tool_calls")) a["tool_calls"] = OJson::array();
        OJson args = item["type"] == "custom_tool_call"
                         ? OJson{{"input", item["input"]}}
                         : ParseNestedJson(item["arguments"].get<std::string>());
        if (args.is_discarded()) args = OJson::object();
        a["tool_calls"].push_back({{"id", item["call_id"]},
                                   {"type", "function"},
                                   {"function", {{"name", item["name"]}, {"arguments", args}}}});
      }
    }
    OJson msgs = history;
    msgs.push_back(a);
    server->responses().Put(id, StoredResponse{Response(true), input_items, std::move(msgs)});
  }

  std::string StreamHead() {
    std::string out = Event("response.created", {{"response", Response(false)}});
    return out + Event("response.in_progress", {{"response", Response(false)}});  // in this order
  }

  std::string StreamEvent(const RequestOutput& ev) {
    std::string out;
    for (const ChatDelta& d : Apply(ev)) out += Feed(d);  // in the text's order
    if (!ev.finished) return out;
    out += CloseOpen();
    Store();
    const std::string status = Status();
    const char* type = status == "completed"    ? "response.completed"
                       : status == "incomplete" ? "response.incomplete"
                                                : "response.failed";
    return out + Event(type, {{"response", Response(true)}});
  }

  void Accumulate(const RequestOutput& ev) {
    for (const ChatDelta& d : Apply(ev)) Feed(d);
    if (ev.finished) {
      CloseOpen();
      seq = 0;
    }
  }

  std::string Whole() {
    Store();
    return DumpJson(Response(true));
  }
};

}  // namespace

void ApiServer::HandleResponses(const HttpRequest& req, HttpResponse& res) {
  const Protocol P = Protocol::kOpenAi;
  OJson body;
  if (!Admit(req, res, P, &body)) return;
  ResponsesRequest rr;
  if (auto e = ParseResponsesRequest(ParseCtx(), body, &rr)) return SendError(res, *e, P);
  ChatTurn& turn = rr.turn;
  PreparedTurn prep;
  if (auto e = PrepareTurn(&turn, &prep)) return SendError(res, *e, P);
  if (!rr.stream) {
    const int room = model_.defaults.max_model_len - prep.prompt_tokens;
    const int max_tokens = turn.gen.stop.max_tokens > 0 ? turn.gen.stop.max_tokens : room;
    if (auto e = CheckWholeAnswerSize(1, max_tokens, turn.gen.sampling.logprobs)) {
      return SendError(res, *e, P);
    }
  }
  auto st = std::make_shared<ResponsesState>();
  st->server = this;
  st->id = RandomId("resp_");
  st->model = model_.defaults.served_model_name;
  st->created = static_cast<int64_t>(std::time(nullptr));
  st->echo = std::move(rr.echo);
  st->store = rr.store;
  st->encrypted_reasoning = rr.encrypted_reasoning;
  st->summary = rr.reasoning_summary;
  st->logprobs = rr.output_logprobs;
  st->tok = model_.tokenizer;
  st->phase = TokenPhase(prep, {model_.think_start_id, model_.think_end_id, model_.tool_call_id,
                                model_.tokenizer->TokenToId("</tool_call>")});
  st->history = std::move(rr.history);
  st->input_items = std::move(rr.input_items);
  st->tools = std::move(rr.tools);
  st->parser = std::make_unique<ChatOutputParser>(prep.schema, prep.parser);
  st->reasoning =
      ReasoningTokenCounter(prep, model_.think_start_id, model_.think_end_id, model_.tool_call_id);
  st->prompt_tokens = prep.prompt_tokens;
  st->output_budget = prep.output_budget;
  auto session = std::make_shared<GenerationSession>(*model_.engine, *metrics_, 1);
  const Status s = session->Submit(std::move(turn.gen), 0);
  if (!s.ok()) return SendError(res, FromStatus(s, "input"), P);
  StreamWriters w;
  w.head = st->StreamHead();
  w.on_event = [st](const RequestOutput& ev) { return st->StreamEvent(ev); };
  w.tail = [] { return std::string(); };
  // A stream ends with its response.failed event (the events carry the error); a whole answer
  // is the error object.
  if (!rr.stream) w.error_tail = ErrorTail(P, false);
  Respond(
      res, session, rr.stream, std::move(w), [st](const RequestOutput& ev) { st->Accumulate(ev); },
      [st] { return st->Whole(); });
}

// POST /v1/responses/input_tokens (the openai SDK's responses.inputTokens.count): the tokens of
// the prompt that request would render, as /v1/messages/count_tokens counts a Messages request.
void ApiServer::HandleResponseInputTokens(const HttpRequest& req, HttpResponse& res) {
  const Protocol P = Protocol::kOpenAi;
  OJson body;
  if (!Admit(req, res, P, &body)) return;
  ResponsesRequest rr;
  if (auto e = ParseResponsesRequest(ParseCtx(), body, &rr)) return SendError(res, *e, P);
  ChatPrompt prompt;
  if (auto e = RenderTurn(&rr.turn, &prompt)) return SendError(res, *e, P);
  const int n = static_cast<int>(EncodeChatPrompt(*model_.tokenizer, prompt).size());
  NoteRequestTokens(n, 0);
  SendJson(res, {{"object", "response.input_tokens"}, {"input_tokens", n}});
}

static std::string PathId(const HttpRequest& req) {
  return req.matches.size() > 1 ? std::string(req.matches[1]) : "";
}

static ApiError ResponseNotFound(const std::string& id) {
  return NotFound("Response with id '" + id +
                  "' not found (never stored, deleted, or evicted "
                  "from the bounded store).");
}

void ApiServer::HandleGetResponse(const HttpRequest& req, HttpResponse& res) {
  if (!Admit(req, res, Protocol::kOpenAi, nullptr)) return;
  const std::string id = PathId(req);
  std::optional<StoredResponse> r = responses_->Get(id);
  if (!r) return SendError(res, ResponseNotFound(id), Protocol::kOpenAi);
  SendJson(res, r->response);
}

void ApiServer::HandleDeleteResponse(const HttpRequest& req, HttpResponse& res) {
  if (!Admit(req, res, Protocol::kOpenAi, nullptr)) return;
  const std::string id = PathId(req);
  if (!responses_->Erase(id)) return SendError(res, ResponseNotFound(id), Protocol::kOpenAi);
  SendJson(res, {{"id", id}, {"object", "response"}, {"deleted", true}});
}

void ApiServer::HandleResponseInputItems(const HttpRequest& req, HttpResponse& res) {
  if (!Admit(req, res, Protocol::kOpenAi, nullptr)) return;
  const std::string id = PathId(req);
  std::optional<StoredResponse> r = responses_->Get(id);
  if (!r) return SendError(res, ResponseNotFound(id), Protocol::kOpenAi);
  OJson data = r->input_items;
  // Newest first by default, as the API lists them.
  if (!(req.has_param("order") && req.get_param_value("order") == "asc")) {
    std::reverse(data.begin(), data.end());
  }
  OJson out = {{"object", "list"}, {"data", data}, {"has_more", false}};
  out["first_id"] = data.empty() ? OJson(nullptr) : data.front().value("id", OJson());
  out["last_id"] = data.empty() ? OJson(nullptr) : data.back().value("id", OJson());
  SendJson(res, out);
}

}  // namespace mimo
