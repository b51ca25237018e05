// POST /v1/messages: the Anthropic Messages API over the same engine and chat template, so
// coding agents that speak either protocol work. The request (system, content blocks, tool_use /
// tool_result, thinking) becomes OpenAI-style messages for the template; the output goes through
// the `mimo` parsers and comes back as thinking / text / tool_use blocks, whole or as the
// message_start ... message_stop event stream.
#include <httplib.h>

#include <random>

#include "chat/chat_output_parser.h"
#include "server/api_server.h"
#include "server/response_writer.h"
#include "server/structured_output.h"

namespace mimo {
namespace {

std::string MessageId(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kAlnum[rng() % 62];
  return s;
}

// Text of a string or an array of text blocks; other blocks are an error.
std::optional<ApiError> TextOf(const OJson& c, const std::string& field, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return BadRequest("'" + field + "' must be a string or an array of blocks", field);
  for (const OJson& b : c) {
    if (!b.is_object() || !b.contains("type") || b["type"] != "text" || !b.contains("text") ||
        !b["text"].is_string()) {
      return BadRequest("'" + field + "' may only hold text blocks here", field);
    }
    *out += b["text"].get<std::string>();
  }
  return std::nullopt;
}

// o[k] when it is a string, else "" (a block's or a choice's "type": an unknown one is refused
// by the caller with the list of known ones).
std::string TypeOf(const OJson& o, const char* k = "type") {
  return o.is_object() && o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : "";
}

// o[k] as a string into *out: absent or null leaves *out; another type is a 400 naming `path`.
std::optional<ApiError> OptString(const OJson& o, const char* k, const std::string& path,
                                  std::string* out) {
  if (!o.contains(k) || o[k].is_null()) return std::nullopt;
  if (!o[k].is_string()) return BadRequest("'" + path + "' must be a string", path);
  *out = o[k].get<std::string>();
  return std::nullopt;
}

// Anthropic messages -> OpenAI messages (for the chat template).
std::optional<ApiError> ConvertMessages(const OJson& body, OJson* out) {
  OJson msgs = OJson::array();
  if (body.contains("system") && !body["system"].is_null()) {
    std::string sys;
    if (auto e = TextOf(body["system"], "system", &sys)) return e;
    msgs.push_back({{"role", "system"}, {"content", sys}});
  }
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
    return BadRequest("'messages' must be a non-empty array", "messages");
  }
  const OJson& in = body["messages"];
  for (size_t i = 0; i < in.size(); ++i) {
    const OJson& m = in[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return BadRequest("'" + field + ".role' must be user or assistant", field + ".role");
    }
    const std::string role = m["role"];
    if (role != "user" && role != "assistant") {
      return BadRequest("'" + field + ".role' must be user or assistant, got '" + role + "'",
                        field + ".role");
    }
    if (!m.contains("content")) return BadRequest("'" + field + ".content' is required", field + ".content");
    const OJson& c = m["content"];
    if (c.is_string()) {
      msgs.push_back({{"role", role}, {"content", c}});
      continue;
    }
    if (!c.is_array()) {
      return BadRequest("'" + field + ".content' must be a string or an array of blocks",
                        field + ".content");
    }
    std::string text, thinking;
    OJson calls = OJson::array();
    for (size_t k = 0; k < c.size(); ++k) {
      const OJson& b = c[k];
      const std::string bf = field + ".content[" + std::to_string(k) + "]";
      const std::string t = TypeOf(b);
      if (t == "text" && b.contains("text") && b["text"].is_string()) {
        text += b["text"].get<std::string>();
      } else if (t == "thinking" && role == "assistant") {
        std::string part;
        if (auto e = OptString(b, "thinking", bf + ".thinking", &part)) return e;
        thinking += part;
      } else if (t == "redacted_thinking") {
        continue;
      } else if (t == "tool_use" && role == "assistant") {
        if (!b.contains("name") || !b["name"].is_string()) {
          return BadRequest("'" + bf + ".name' must be a string", bf + ".name");
        }
        std::string id;
        if (auto e = OptString(b, "id", bf + ".id", &id)) return e;
        calls.push_back({{"id", id},
                         {"type", "function"},
                         {"function", {{"name", b["name"]}, {"arguments", b.value("input", OJson::object())}}}});
      } else if (t == "tool_result" && role == "user") {
        std::string result;
        if (b.contains("content") && !b["content"].is_null()) {
          if (auto e = TextOf(b["content"], bf + ".content", &result)) return e;
        }
        std::string use_id;
        if (auto e = OptString(b, "tool_use_id", bf + ".tool_use_id", &use_id)) return e;
        msgs.push_back({{"role", "tool"}, {"tool_call_id", use_id}, {"content", result}});
      } else if (t == "image" || t == "document" || t == "audio") {
        return BadRequest("'" + bf + "' has type '" + t + "': this engine is text-only", bf);
      } else {
        return BadRequest("'" + bf + "' has unsupported type '" + t + "' for a " + role + " message", bf);
      }
    }
    if (role == "assistant") {
      OJson a = {{"role", "assistant"}, {"content", text}};
      if (!thinking.empty()) a["reasoning_content"] = thinking;
      if (!calls.empty()) a["tool_calls"] = calls;
      msgs.push_back(a);
    } else if (!text.empty() || calls.empty()) {
      bool only_results = !c.empty();
      for (const OJson& b : c) only_results &= TypeOf(b) == "tool_result";
      if (!only_results) msgs.push_back({{"role", "user"}, {"content", text}});
    }
  }
  *out = msgs;
  return std::nullopt;
}

// Anthropic tools [{name, description, input_schema}] -> OpenAI tools.
std::optional<ApiError> ConvertTools(const OJson& body, OJson* tools, std::string* choice,
                                     std::string* choice_name) {
  *tools = nullptr;
  *choice = "auto";
  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) return BadRequest("'tools' must be an array", "tools");
    OJson arr = OJson::array();
    for (size_t i = 0; i < body["tools"].size(); ++i) {
      const OJson& t = body["tools"][i];
      const std::string f = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) {
        return BadRequest("'" + f + ".name' must be a string", f + ".name");
      }
      if (t.contains("type") && t["type"].is_string() && t["type"] != "custom") {
        return BadRequest("'" + f + "': server tool type '" + t["type"].get<std::string>() +
                              "' is not supported; give custom tools with an input_schema",
                          f + ".type");
      }
      OJson fn = {{"name", t["name"]}};
      if (t.contains("description")) fn["description"] = t["description"];
      fn["parameters"] = t.contains("input_schema") && !t["input_schema"].is_null()
                             ? t["input_schema"]
                             : OJson{{"type", "object"}};
      arr.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!arr.empty()) *tools = arr;
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const OJson& tc = body["tool_choice"];
    const std::string t = TypeOf(tc);
    if (t == "auto" || t == "none") {
      *choice = t;
    } else if (t == "any") {
      *choice = "required";
    } else if (t == "tool") {
      *choice = "function";
      if (auto e = OptString(tc, "name", "tool_choice.name", choice_name)) return e;
    } else {
      return BadRequest("'tool_choice.type' must be auto, any, tool or none", "tool_choice");
    }
  }
  if (tools->is_null()) *choice = "none";
  return std::nullopt;
}

// Streaming state: one open content block at a time (thinking, text or a tool_use).
struct MessageState {
  std::string id, model;
  std::vector<std::string> stop_sequences;
  std::unique_ptr<ChatOutputParser> parser;
  int input_tokens = 0, output_tokens = 0, cached = 0;
  FinishReason reason = FinishReason::kNone;
  std::string stop_reason_text;
  bool made_calls = false;
  // Whole response.
  ChatParseResult result;
  // Stream.
  int block = -1;             // index of the open block
  std::string block_type;     // "thinking" | "text" | "tool_use"
  int open_call = -1;         // tool-call index of the open tool_use block

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

  ChatDelta Apply(const RequestOutput& ev) {
    ChatDelta d = parser->Feed(ev.text);
    if (ev.finished) {
      ChatDelta tail = parser->Finish();
      d.reasoning_content += tail.reasoning_content;
      d.content += tail.content;
      d.tool_calls.insert(d.tool_calls.end(), tail.tool_calls.begin(), tail.tool_calls.end());
      reason = ev.finish_reason;
      stop_reason_text = ev.stop_reason;
    }
    for (const ToolCallDelta& t : d.tool_calls) made_calls |= !t.id.empty();
    input_tokens = ev.num_prompt_tokens;
    output_tokens = ev.num_output_tokens;
    cached = ev.num_cached_tokens;
    return d;
  }

  std::string Close() {
    if (block < 0 || block_type.empty()) return "";
    block_type.clear();
    return SseEvent("content_block_stop",
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
    return SseEvent("content_block_delta",
                    DumpJson({{"type", "content_block_delta"}, {"index", block}, {"delta", delta}}));
  }

  std::string Start() const {
    OJson msg = {{"id", id},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", model},
                 {"content", OJson::array()},
                 {"stop_reason", nullptr},
                 {"stop_sequence", nullptr},
                 {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}};
    return SseEvent("message_start", DumpJson({{"type", "message_start"}, {"message", msg}}));
  }

  std::string StreamEvent(const RequestOutput& ev) {
    const ChatDelta d = Apply(ev);
    std::string out;
    if (!d.reasoning_content.empty()) {
      if (block_type != "thinking") out += Open("thinking", {{"type", "thinking"}, {"thinking", ""}});
      out += Delta({{"type", "thinking_delta"}, {"thinking", d.reasoning_content}});
    }
    if (!d.content.empty()) {
      if (block_type != "text") out += Open("text", {{"type", "text"}, {"text", ""}});
      out += Delta({{"type", "text_delta"}, {"text", d.content}});
    }
    for (const ToolCallDelta& c : d.tool_calls) {
      if (!c.id.empty() || open_call != c.index) {
        open_call = c.index;
        out += Open("tool_use", {{"type", "tool_use"}, {"id", c.id}, {"name", c.name},
                                 {"input", OJson::object()}});
      }
      if (!c.arguments.empty()) out += Delta({{"type", "input_json_delta"}, {"partial_json", c.arguments}});
    }
    if (ev.finished) {
      out += Close();
      out += SseEvent("message_delta",
                      DumpJson({{"type", "message_delta"},
                                {"delta", {{"stop_reason", StopReason()}, {"stop_sequence", StopSequence()}}},
                                {"usage", {{"output_tokens", output_tokens}}}}));
      out += SseEvent("message_stop", DumpJson({{"type", "message_stop"}}));
    }
    return out;
  }

  std::string Whole() const {
    OJson content = OJson::array();
    if (!result.reasoning_content.empty()) {
      content.push_back({{"type", "thinking"}, {"thinking", result.reasoning_content}, {"signature", ""}});
    }
    if (!result.content.empty() && !(made_calls && result.content.find_first_not_of(" \t\r\n") == std::string::npos)) {
      content.push_back({{"type", "text"}, {"text", result.content}});
    }
    for (const ToolCall& c : result.tool_calls) {
      OJson input = OJson::parse(c.arguments, nullptr, false);
      if (input.is_discarded()) input = OJson::object();
      content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", input}});
    }
    OJson usage = {{"input_tokens", input_tokens}, {"output_tokens", output_tokens},
                   {"cache_read_input_tokens", cached}};
    return DumpJson({{"id", id},
                     {"type", "message"},
                     {"role", "assistant"},
                     {"model", model},
                     {"content", content},
                     {"stop_reason", StopReason()},
                     {"stop_sequence", StopSequence()},
                     {"usage", usage}});
  }
};

}  // namespace

void ApiServer::HandleMessages(const httplib::Request& req, httplib::Response& res) {
  const Protocol P = Protocol::kAnthropic;
  OJson body;
  if (!Admit(req, res, P, &body)) return;
  if (auto e = CheckModel(body, model_.defaults)) return SendError(res, *e, P);
  if (!body.contains("max_tokens")) return SendError(res, BadRequest("'max_tokens' is required", "max_tokens"), P);
  // The OpenAI field parser handles the shared fields; Anthropic's names are mapped first.
  OJson fields = OJson::object();
  for (const char* k : {"max_tokens", "temperature", "top_p", "top_k", "stream"}) {
    if (body.contains(k)) fields[k] = body[k];
  }
  if (body.contains("stop_sequences")) {
    if (!body["stop_sequences"].is_array()) {
      return SendError(res, BadRequest("'stop_sequences' must be an array of strings", "stop_sequences"), P);
    }
    fields["stop"] = body["stop_sequences"];
  }
  OJson messages, tools;
  std::string choice, choice_name;
  if (auto e = ConvertMessages(body, &messages)) return SendError(res, *e, P);
  if (auto e = ConvertTools(body, &tools, &choice, &choice_name)) return SendError(res, *e, P);
  GenerationRequest g;
  if (auto e = ParseGenerationFields(fields, model_.defaults, true, &g)) {
    if (e->param == "stop") {  // named as the client sent it
      e->param = "stop_sequences";
      const size_t at = e->message.find("'stop'");
      if (at != std::string::npos) e->message.replace(at, 6, "'stop_sequences'");
    }
    return SendError(res, *e, P);
  }
  bool stream = false;
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) {
      return SendError(res, BadRequest("'stream' must be a boolean", "stream"), P);
    }
    stream = body["stream"].get<bool>();
  }
  OJson kwargs = OJson::object();
  // Anthropic clients turn thinking on explicitly; absent means off (as the Messages API).
  bool thinking = false;
  if (body.contains("thinking") && !body["thinking"].is_null()) {
    if (!body["thinking"].is_object() || !body["thinking"].contains("type")) {
      return SendError(res, BadRequest("'thinking' must be {\"type\": \"enabled\" | \"disabled\"}",
                                       "thinking"),
                       P);
    }
    if (!body["thinking"]["type"].is_string()) {
      return SendError(
          res, BadRequest("'thinking.type' must be \"enabled\" or \"disabled\"", "thinking.type"),
          P);
    }
    thinking = body["thinking"]["type"] == "enabled";
  }
  kwargs["enable_thinking"] = thinking;
  auto prompt = model_.chat_template->Render(messages, tools, true, kwargs);
  if (!prompt.ok()) return SendError(res, BadRequest(prompt.status().message(), "messages"), P);
  ChatParserOptions po;
  po.reasoning.enable_thinking = thinking;
  po.reasoning.prompt_ends_in_think = PromptEndsInThink(*prompt);
  ToolSchema schema;
  if (choice != "none") {
    auto s = ToolSchema::FromJson(tools);
    if (!s.ok()) return SendError(res, BadRequest(s.status().message(), "tools"), P);
    schema = std::move(s).value();
  }
  g.prompt_ids = model_.tokenizer->Encode(*prompt);
  const OJson* tc = body.contains("tool_choice") && body["tool_choice"].is_object()
                       ? &body["tool_choice"]
                       : nullptr;
  const bool has_dptu = tc && tc->contains("disable_parallel_tool_use");
  if (has_dptu && !(*tc)["disable_parallel_tool_use"].is_boolean()) {
    return SendError(res, BadRequest("'tool_choice.disable_parallel_tool_use' must be a boolean",
                                     "tool_choice.disable_parallel_tool_use"),
                     P);
  }
  const bool parallel = !(has_dptu && (*tc)["disable_parallel_tool_use"].get<bool>());
  ConstraintRequest constraint;
  constraint.tools = tools;
  constraint.tool_choice = choice;
  constraint.tool_choice_function = choice_name;
  constraint.parallel_tool_calls = parallel;
  constraint.thinking = thinking;
  constraint.prompt_in_reasoning = po.reasoning.prompt_ends_in_think;
  constraint.max_tokens = g.stop.max_tokens;
  if (auto e = BuildConstraint(constraint, model_, &g.constraint)) {
    return SendError(res, *e, P);
  }
  auto st = std::make_shared<MessageState>();
  st->id = MessageId("msg_");
  st->model = model_.defaults.served_model_name;
  st->stop_sequences = g.stop.stop;
  st->parser = std::make_unique<ChatOutputParser>(schema, po);
  st->input_tokens = static_cast<int>(g.prompt_ids.size());
  auto session = std::make_shared<GenerationSession>(*model_.engine, *metrics_, 1);
  const Status s = session->Submit(std::move(g), 0);
  if (!s.ok()) return SendError(res, FromStatus(s, "messages"), P);
  if (stream) {
    auto started = std::make_shared<bool>(false);
    RespondStreaming(res, session,
                     [st, started](const RequestOutput& ev) {
                       std::string out;
                       if (!*started) {
                         *started = true;
                         out = st->Start();
                       }
                       return out + st->StreamEvent(ev);
                     },
                     [] { return std::string(); }, &in_flight());
  } else {
    RespondWhenDone(res, session,
                    [st](const RequestOutput& ev) {
                      AccumulateChatDelta(st->Apply(ev), &st->result);
                      return std::string();
                    },
                    [st] { return st->Whole(); }, &in_flight());
  }
}

}  // namespace mimo
