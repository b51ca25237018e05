// POST /v1/chat/completions and /v1/completions: validate, render the chat template, tokenize,
// submit to the engine, and answer in OpenAI's shapes, whole or streamed as SSE chunks ending in
// `data: [DONE]`. Chat output goes through the `mimo` reasoning and tool-call parsers per choice
// (streamed deltas never carry a partial tag).

#include <ctime>
#include <random>

#include "chat/chat_output_parser.h"
#include "core/utf8.h"
#include "server/api_server.h"
#include "server/request_json.h"
#include "server/response_writer.h"
#include "server/structured_output.h"

namespace mimo {
namespace {

OJson TokenText(const Tokenizer& tok, int32_t id) {
  return utf8::Repair(tok.TokenBytes(id));
}

OJson TokenBytesJson(const Tokenizer& tok, int32_t id) {
  OJson b = OJson::array();
  for (unsigned char c : tok.TokenBytes(id)) b.push_back(static_cast<int>(c));
  return b;
}

// Chat logprobs entries of the tokens of one event.
OJson ChatLogprobs(const Tokenizer& tok, const std::vector<SampledToken>& lps) {
  OJson content = OJson::array();
  for (const SampledToken& t : lps) {
    OJson top = OJson::array();
    for (const auto& [id, lp] : t.top) {
      top.push_back({{"token", TokenText(tok, id)}, {"logprob", lp}, {"bytes", TokenBytesJson(tok, id)}});
    }
    content.push_back({{"token", TokenText(tok, t.id)},
                       {"logprob", t.logprob},
                       {"bytes", TokenBytesJson(tok, t.id)},
                       {"top_logprobs", top}});
  }
  return content;
}

// `legacy`: the request used the legacy `functions` (answered as `function_call`).
const char* OpenAiFinishReason(FinishReason r, bool made_tool_calls, bool legacy = false) {
  if (r == FinishReason::kStop && made_tool_calls) return legacy ? "function_call" : "tool_calls";
  return FinishReasonName(r);
}

OJson Usage(int prompt_tokens, int completion_tokens, int cached, int reasoning = 0) {
  return {{"prompt_tokens", prompt_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"completion_tokens", completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached}}},
          {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}};
}

// `legacy`: the first call as a `function_call` delta ({name, arguments}, then {arguments}); the
// legacy shape has room for one call, so later ones are not sent (the request asked for one).
OJson DeltaJson(const ChatDelta& d, bool legacy) {
  OJson j = OJson::object();
  if (!d.reasoning_content.empty()) j["reasoning_content"] = d.reasoning_content;
  if (!d.content.empty()) j["content"] = d.content;
  if (legacy) {
    for (const ToolCallDelta& c : d.tool_calls) {
      if (c.index != 0) continue;
      if (!c.id.empty()) {
        j["function_call"] = {{"name", c.name}, {"arguments", c.arguments}};
      } else if (j.contains("function_call")) {
        j["function_call"]["arguments"] =
            j["function_call"]["arguments"].get<std::string>() + c.arguments;
      } else {
        j["function_call"] = {{"arguments", c.arguments}};
      }
    }
  } else if (!d.tool_calls.empty()) {
    OJson calls = OJson::array();
    for (const ToolCallDelta& c : d.tool_calls) {
      OJson cj = {{"index", c.index}};
      if (!c.id.empty()) {
        cj["id"] = c.id;
        cj["type"] = "function";
        cj["function"] = {{"name", c.name}, {"arguments", c.arguments}};
      } else {
        cj["function"] = {{"arguments", c.arguments}};
      }
      calls.push_back(cj);
    }
    j["tool_calls"] = calls;
  }
  return j;
}

// Per-choice state of one chat completion.
struct ChatChoice {
  std::unique_ptr<ChatOutputParser> parser;
  ChatParseResult result;   // accumulated (whole responses)
  OJson logprobs = OJson::array();
  // Streamed: logprobs of tokens whose text no chunk has carried yet (see StreamEvent).
  OJson pending_logprobs = OJson::array();
  bool started = false;     // streamed the role chunk
  bool made_calls = false;
  FinishReason reason = FinishReason::kNone;
  int output_tokens = 0;
  ReasoningTokenCounter reasoning;
};

// Shared by the event and tail writers of one response.
// Answers a session from a handler's state (ChatState, CompletionState): its stream events and
// tail when streamed, else its accumulated whole answer.
template <typename State>
void RespondWith(ApiServer& server, HttpResponse& res, std::shared_ptr<GenerationSession> session,
                 bool stream, std::shared_ptr<State> st) {
  StreamWriters w;
  w.on_event = [st](const RequestOutput& ev) { return st->StreamEvent(ev); };
  w.tail = [st] { return st->StreamTail(); };
  w.error_tail = ApiServer::ErrorTail(ApiServer::Protocol::kOpenAi, stream);
  server.Respond(
      res, std::move(session), stream, std::move(w),
      [st](const RequestOutput& ev) { st->Accumulate(ev); }, [st] { return st->Whole(); });
}

struct ChatState {
  std::string id;
  int64_t created = 0;
  std::string model;
  bool logprobs = false;
  bool include_usage = false;
  bool legacy_functions = false;  // answer in the legacy function_call shape
  std::vector<ChatChoice> choices;
  int prompt_tokens = 0;
  int cached_tokens = 0;
  int output_budget = 0;  // PreparedTurn::output_budget
  const Tokenizer* tok = nullptr;

  OJson Chunk(int index, OJson delta, OJson logprobs_json, OJson finish) const {
    OJson c = {{"index", index}, {"delta", std::move(delta)}};
    c["logprobs"] = std::move(logprobs_json);
    c["finish_reason"] = std::move(finish);
    return {{"id", id},
            {"object", "chat.completion.chunk"},
            {"created", created},
            {"model", model},
            {"choices", OJson::array({c})}};
  }

  int completion_tokens() const {
    int n = 0;
    for (const ChatChoice& c : choices) n += c.output_tokens;
    return n;
  }
  int reasoning_tokens() const {
    int n = 0;
    for (const ChatChoice& c : choices) n += c.reasoning.count();
    return n;
  }
  OJson UsageJson() const {
    NoteRequestTokens(prompt_tokens, completion_tokens());
    return Usage(prompt_tokens, completion_tokens(), cached_tokens, reasoning_tokens());
  }

  // Feeds one event to its choice's parser; returns the parsed delta.
  ChatDelta Apply(const RequestOutput& ev) {
    ChatChoice& c = choices[ev.index];
    ChatDelta d = ParseEvent(c.parser.get(), ev);
    if (ev.finished) c.reason = AnswerFinishReason(ev, *c.parser, output_budget);  // cut: length
    for (const ToolCallDelta& t : d.tool_calls) c.made_calls |= !t.id.empty();
    c.reasoning.Add(ev.token_ids);
    c.output_tokens = ev.num_output_tokens;
    prompt_tokens = ev.num_prompt_tokens;
    cached_tokens = ev.num_cached_tokens;
    return d;
  }

  std::string StreamEvent(const RequestOutput& ev) {
    std::string out;
    ChatChoice& c = choices[ev.index];
    if (!c.started) {
      c.started = true;
      out += SseData(DumpJson(Chunk(ev.index, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)));
    }
    const ChatDelta d = Apply(ev);
    // A token that shows no text yet (the `<think>` tag, a tag the parser still holds) sends no
    // chunk of its own, whose delta would be empty: its logprobs ride on the next chunk with a
    // delta, or on the finish chunk, so the stream's logprobs still cover every token, in order.
    if (logprobs) {
      for (OJson& e : ChatLogprobs(*tok, ev.logprobs)) c.pending_logprobs.push_back(std::move(e));
    }
    auto take_logprobs = [&c] {
      if (c.pending_logprobs.empty()) return OJson(nullptr);
      OJson lp = {{"content", std::move(c.pending_logprobs)}};
      c.pending_logprobs = OJson::array();
      return lp;
    };
    OJson delta = DeltaJson(d, legacy_functions);
    if (!delta.empty()) {
      out += SseData(DumpJson(Chunk(ev.index, std::move(delta), take_logprobs(), nullptr)));
    }
    if (ev.finished) {
      out += SseData(DumpJson(Chunk(ev.index, OJson::object(), take_logprobs(),
                                    OpenAiFinishReason(c.reason, c.made_calls, legacy_functions))));
    }
    return out;
  }

  std::string StreamTail() const {
    std::string out;
    const OJson usage = UsageJson();
    if (include_usage) {
      OJson u = {{"id", id},        {"object", "chat.completion.chunk"},
                 {"created", created}, {"model", model},
                 {"choices", OJson::array()}};
      u["usage"] = usage;
      out += SseData(DumpJson(u));
    }
    return out + "data: [DONE]\n\n";
  }

  void Accumulate(const RequestOutput& ev) {
    ChatChoice& c = choices[ev.index];
    AccumulateChatDelta(Apply(ev), &c.result);
    if (logprobs) {
      for (const OJson& e : ChatLogprobs(*tok, ev.logprobs)) c.logprobs.push_back(e);
    }
  }

  std::string Whole() const {
    OJson choices_json = OJson::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      const ChatChoice& c = choices[i];
      const OJson parsed = c.result.ToJson();
      OJson msg = {{"role", "assistant"}, {"content", parsed["content"]}};
      if (!parsed["reasoning_content"].is_null()) msg["reasoning_content"] = parsed["reasoning_content"];
      if (!parsed["tool_calls"].empty()) {
        if (legacy_functions) {
          msg["function_call"] = parsed["tool_calls"][0]["function"];  // {name, arguments}
        } else {
          msg["tool_calls"] = parsed["tool_calls"];
        }
      }
      OJson ch = {{"index", i}, {"message", msg}};
      ch["logprobs"] = logprobs ? OJson{{"content", c.logprobs}} : OJson(nullptr);
      ch["finish_reason"] =
          OpenAiFinishReason(c.reason, !c.result.tool_calls.empty(), legacy_functions);
      choices_json.push_back(ch);
    }
    OJson r = {{"id", id},           {"object", "chat.completion"}, {"created", created},
               {"model", model},     {"choices", choices_json}};
    r["usage"] = UsageJson();
    return DumpJson(r);
  }
};

}  // namespace

void ApiServer::HandleChat(const HttpRequest& req, HttpResponse& res) {
  const Protocol P = Protocol::kOpenAi;
  OJson body;
  if (!Admit(req, res, P, &body)) return;
  ChatRequest cr;
  if (auto e = ParseChatRequest(body, model_.defaults, &cr)) return SendError(res, *e, P);
  ChatTurn& turn = cr.turn;
  PreparedTurn prep;
  if (auto e = PrepareTurn(&turn, &prep)) return SendError(res, *e, P);
  if (!cr.stream) {
    const int room = model_.defaults.max_model_len - prep.prompt_tokens;
    const int max_tokens = turn.gen.stop.max_tokens > 0 ? turn.gen.stop.max_tokens : room;
    if (auto e = CheckWholeAnswerSize(turn.gen.n, max_tokens, turn.gen.sampling.logprobs))
      return SendError(res, *e, P);
  }
  auto st = std::make_shared<ChatState>();
  st->id = RandomId("chatcmpl-");
  st->created = static_cast<int64_t>(std::time(nullptr));
  st->model = model_.defaults.served_model_name;
  st->logprobs = turn.gen.sampling.logprobs >= 0;
  st->include_usage = cr.include_usage;
  st->legacy_functions = cr.legacy_functions;
  st->tok = model_.tokenizer;
  st->prompt_tokens = prep.prompt_tokens;
  st->output_budget = prep.output_budget;
  for (int i = 0; i < turn.gen.n; ++i) {
    st->choices.emplace_back();
    st->choices.back().parser = std::make_unique<ChatOutputParser>(prep.schema, prep.parser);
    st->choices.back().reasoning = ReasoningTokenCounter(prep, model_.think_start_id,
                                                         model_.think_end_id, model_.tool_call_id);
  }
  auto session = std::make_shared<GenerationSession>(*model_.engine, *metrics_, turn.gen.n);
  const Status s = session->Submit(std::move(turn.gen), 0);
  if (!s.ok()) return SendError(res, FromStatus(s, "messages"), P);
  RespondWith(*this, res, std::move(session), cr.stream, st);
}

namespace {

// Legacy completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}.
struct CompletionChoice {
  std::string text;
  std::string echo;  // the prompt's text, written before the first output (echo: true)
  OJson tokens = OJson::array(), token_logprobs = OJson::array(), top = OJson::array(),
        offsets = OJson::array();
  FinishReason reason = FinishReason::kNone;
  int output_tokens = 0;
  int prompt_tokens = 0;
  int cached_tokens = 0;
  size_t text_len = 0;  // bytes of text so far (for text_offset)
};

struct CompletionState {
  std::string id;
  int64_t created = 0;
  std::string model;
  int logprobs = -1;
  bool include_usage = false;
  std::vector<CompletionChoice> choices;
  const Tokenizer* tok = nullptr;

  OJson LogprobsOf(const RequestOutput& ev, CompletionChoice& c, bool delta) {
    if (logprobs < 0) return nullptr;
    OJson tokens = OJson::array(), lps = OJson::array(), top = OJson::array(),
          offsets = OJson::array();
    for (const SampledToken& t : ev.logprobs) {
      tokens.push_back(TokenText(*tok, t.id));
      lps.push_back(t.logprob);
      OJson m = OJson::object();
      for (const auto& [id, lp] : t.top) m[TokenText(*tok, id).get<std::string>()] = lp;
      top.push_back(m);
      offsets.push_back(c.text_len);
    }
    if (!delta) {
      for (auto& x : tokens) c.tokens.push_back(x);
      for (auto& x : lps) c.token_logprobs.push_back(x);
      for (auto& x : top) c.top.push_back(x);
      for (auto& x : offsets) c.offsets.push_back(x);
    }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", top}, {"text_offset", offsets}};
  }

  void Apply(const RequestOutput& ev, CompletionChoice& c) {
    c.output_tokens = ev.num_output_tokens;
    c.prompt_tokens = ev.num_prompt_tokens;
    c.cached_tokens = ev.num_cached_tokens;
    if (ev.finished) c.reason = ev.finish_reason;
  }

  std::string StreamEvent(const RequestOutput& ev) {
    CompletionChoice& c = choices[ev.index];
    Apply(ev, c);
    std::string text = std::move(c.echo) + ev.text;
    c.echo.clear();
    c.text_len += text.size() - ev.text.size();
    OJson ch = {{"index", ev.index}, {"text", text}};
    ch["logprobs"] = LogprobsOf(ev, c, true);
    c.text_len += ev.text.size();
    ch["finish_reason"] = ev.finished ? OJson(FinishReasonName(ev.finish_reason)) : OJson(nullptr);
    if (text.empty() && ev.logprobs.empty() && !ev.finished) return "";
    return SseData(DumpJson({{"id", id},
                             {"object", "text_completion"},
                             {"created", created},
                             {"model", model},
                             {"choices", OJson::array({ch})}}));
  }

  // Each prompt is counted once, whatever n (its samples share it).
  OJson TotalUsage() const {
    int prompt = 0, completion = 0, cached = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      completion += choices[i].output_tokens;
      if (i % n == 0) {
        prompt += choices[i].prompt_tokens;
        cached += choices[i].cached_tokens;
      }
    }
    NoteRequestTokens(prompt, completion);
    return Usage(prompt, completion, cached);
  }

  std::string StreamTail() const {
    std::string out;
    if (include_usage) {
      OJson u = {{"id", id}, {"object", "text_completion"}, {"created", created},
                 {"model", model}, {"choices", OJson::array()}};
      u["usage"] = TotalUsage();
      out += SseData(DumpJson(u));
    }
    return out + "data: [DONE]\n\n";
  }

  void Accumulate(const RequestOutput& ev) {
    CompletionChoice& c = choices[ev.index];
    Apply(ev, c);
    if (!c.echo.empty()) {
      c.text_len += c.echo.size();
      c.text += std::move(c.echo);
      c.echo.clear();
    }
    LogprobsOf(ev, c, false);
    c.text += ev.text;
    c.text_len += ev.text.size();
  }

  std::string Whole() const {
    OJson arr = OJson::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      const CompletionChoice& c = choices[i];
      OJson ch = {{"index", i}, {"text", c.text}};
      ch["logprobs"] = logprobs >= 0 ? OJson{{"tokens", c.tokens},
                                             {"token_logprobs", c.token_logprobs},
                                             {"top_logprobs", c.top},
                                             {"text_offset", c.offsets}}
                                     : OJson(nullptr);
      ch["finish_reason"] = FinishReasonName(c.reason);
      arr.push_back(ch);
    }
    OJson r = {{"id", id}, {"object", "text_completion"}, {"created", created},
               {"model", model}, {"choices", arr}};
    r["usage"] = TotalUsage();
    return DumpJson(r);
  }

  size_t n = 1;  // samples per prompt
};

}  // namespace

void ApiServer::HandleCompletion(const HttpRequest& req, HttpResponse& res) {
  const Protocol P = Protocol::kOpenAi;
  OJson body;
  if (!Admit(req, res, P, &body)) return;
  CompletionRequest cr;
  if (auto e = ParseCompletionRequest(body, model_.defaults, &cr)) return SendError(res, *e, P);
  // Every prompt tokenized first: a max_tokens past the room a prompt leaves is lowered to that
  // room (unless strict), and the constraint's up-front check takes the smallest budget.
  const int max_len = model_.defaults.max_model_len;
  std::vector<GenerationRequest> gens;
  int budget = -1;
  for (size_t p = 0; p < cr.prompts.size(); ++p) {
    GenerationRequest g = cr.gen;
    g.prompt_ids =
        cr.prompts[p].is_ids ? cr.prompts[p].ids : model_.tokenizer->Encode(cr.prompts[p].text);
    const int room = max_len - static_cast<int>(g.prompt_ids.size());
    if (room > 0 && g.stop.max_tokens > room && !opts_.strict_max_tokens) {
      g.stop.max_tokens = room;
      g.stop.min_tokens = std::min(g.stop.min_tokens, room);
    }
    const int b = g.stop.max_tokens > 0 ? g.stop.max_tokens : room;
    if (b > 0 && (budget < 0 || b < budget)) budget = b;
    gens.push_back(std::move(g));
  }
  if (!cr.stream) {
    int longest = 0;  // the largest max_tokens of any prompt
    for (const GenerationRequest& g : gens) {
      const int room = max_len - static_cast<int>(g.prompt_ids.size());
      longest = std::max(longest, g.stop.max_tokens > 0 ? g.stop.max_tokens : room);
    }
    if (auto e = CheckWholeAnswerSize(static_cast<int64_t>(gens.size()) * cr.gen.n, longest,
                                      cr.gen.sampling.logprobs))
      return SendError(res, *e, P);
  }
  ConstraintRequest constraint;
  constraint.response_format = cr.response_format;
  constraint.max_tokens = budget;
  ConstraintFactory factory;
  if (auto e = BuildConstraint(constraint, model_, &factory)) return SendError(res, *e, P);
  auto st = std::make_shared<CompletionState>();
  st->id = RandomId("cmpl-");
  st->created = static_cast<int64_t>(std::time(nullptr));
  st->model = model_.defaults.served_model_name;
  st->logprobs = cr.gen.sampling.logprobs;
  st->include_usage = cr.include_usage;
  st->tok = model_.tokenizer;
  const int n = cr.gen.n;
  st->n = static_cast<size_t>(n);
  st->choices.resize(cr.prompts.size() * n);
  auto session = std::make_shared<GenerationSession>(*model_.engine, *metrics_,
                                                     static_cast<int>(st->choices.size()));
  for (size_t p = 0; p < cr.prompts.size(); ++p) {
    GenerationRequest g = std::move(gens[p]);
    g.constraint = factory;
    if (cr.echo) {
      bool valid = true;
      for (int32_t id : g.prompt_ids) valid &= model_.tokenizer->IsValidId(id);
      if (!valid) {
        return SendError(res, BadRequest("'prompt' holds an invalid token id", "prompt"), P);
      }
      const std::string echo =
          cr.prompts[p].is_ids ? model_.tokenizer->Decode(g.prompt_ids) : cr.prompts[p].text;
      for (int k = 0; k < n; ++k) st->choices[p * n + k].echo = echo;
    }
    const Status s = session->Submit(std::move(g), static_cast<int>(p) * n);
    if (!s.ok()) {
      ApiError e = FromStatus(s, "prompt");
      if (cr.prompts.size() > 1) e.message = "prompt " + std::to_string(p) + ": " + e.message;
      return SendError(res, e, P);  // the session cancels what was submitted
    }
  }
  RespondWith(*this, res, std::move(session), cr.stream, st);
}

}  // namespace mimo
