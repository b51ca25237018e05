// Request parsing for POST /v1/messages and /v1/messages/count_tokens (the Anthropic Messages
// API; the handlers are in anthropic_messages.cc): the body becomes a ChatTurn with OpenAI-style
// messages for the chat template. Claude Code puts `role: "system"` messages inside `messages`,
// continues assistant prefills, asks for thinking with a budget and sends thinking blocks back
// with their signatures (checked with the context's verify). Needs no ApiServer (parse_context.h).
#include "server/anthropic_request.h"

#include <cctype>

#include "core/base64.h"
#include "core/log.h"
#include "server/request_json.h"

namespace mimo {
namespace {

// Text of a string or an array of text blocks; other blocks are an error.
std::optional<ApiError> TextOf(const OJson& c, const std::string& field, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array())
    return BadRequest("'" + field + "' must be a string or an array of blocks", field);
  for (size_t k = 0; k < c.size(); ++k) {
    const OJson& b = c[k];
    if (!b.is_object() || !b.contains("type") || b["type"] != "text" || !b.contains("text") ||
        !b["text"].is_string()) {
      const std::string bf = field + "[" + std::to_string(k) + "]";
      return BadRequest("'" + bf +
                            "' must be a text block ({\"type\": \"text\", \"text\": ...}): "
                            "this engine is text-only",
                        bf);
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

}  // namespace

// Anthropic messages (+ system) -> OpenAI-style messages for the template. System messages may
// stand anywhere in `messages` (Claude Code sends them there): those before the first user or
// assistant message are merged with the top-level `system` into the one system prompt the
// template renders first; later ones become system turns in order. A thinking block that comes
// back with a signature this server did not issue is left out (an unsigned one is kept: the
// client wrote it, as with chat completions' reasoning_content).
static std::optional<ApiError> ConvertMessages(const ParseContext& ctx, const OJson& body,
                                               OJson* out) {
  OJson msgs = OJson::array();
  if (body.contains("system") && !body["system"].is_null()) {
    std::string system;
    if (auto e = TextOf(body["system"], "system", &system)) return e;
    msgs.push_back({{"role", "system"}, {"content", system}});
  }
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
    return BadRequest("'messages' must be a non-empty array", "messages");
  }
  const OJson& in = body["messages"];
  if (in.size() > static_cast<size_t>(kMaxMessages)) {
    return BadRequest("'messages' holds " + std::to_string(in.size()) + " messages; at most " +
                          std::to_string(kMaxMessages) + " are allowed",
                      "messages");
  }
  for (size_t i = 0; i < in.size(); ++i) {
    const OJson& m = in[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return BadRequest("'" + field + ".role' must be user, assistant or system", field + ".role");
    }
    const std::string role = m["role"];
    if (role != "user" && role != "assistant" && role != "system") {
      return BadRequest(
          "'" + field + ".role' must be user, assistant or system, got '" + role + "'",
          field + ".role");
    }
    if (!m.contains("content"))
      return BadRequest("'" + field + ".content' is required", field + ".content");
    const OJson& c = m["content"];
    if (role == "system") {
      std::string text;
      if (auto e = TextOf(c, field + ".content", &text)) return e;
      msgs.push_back({{"role", "system"}, {"content", text}});
      continue;
    }
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
    bool only_results = !c.empty();
    for (size_t k = 0; k < c.size(); ++k) {
      const OJson& b = c[k];
      const std::string bf = field + ".content[" + std::to_string(k) + "]";
      const std::string t = TypeOf(b);
      only_results &= t == "tool_result";
      if (t == "text") {
        if (!b.contains("text") || !b["text"].is_string()) {
          return BadRequest("'" + bf + ".text' must be a string", bf + ".text");
        }
        text += b["text"].get<std::string>();
      } else if (t == "thinking" && role == "assistant") {
        std::string part, sig;
        if (auto e = OptString(b, "thinking", bf + ".thinking", &part)) return e;
        if (auto e = OptString(b, "signature", bf + ".signature", &sig)) return e;
        if (!sig.empty()) {
          // "<hmac>" or, for an omitted display, "<hmac>.<base64 text>".
          const size_t dot = sig.find('.');
          if (dot != std::string::npos && part.empty()) {
            auto decoded = Base64Decode(std::string_view(sig).substr(dot + 1));
            if (decoded) part = *decoded;
          }
          // Only reasoning this server wrote reaches the model: a block whose signature does not
          // verify (modified, from another server, or from before a restart) is left out of the
          // prompt rather than refused, so an agent's conversation goes on.
          if (!ctx.verify || !ctx.verify(kThinkingSignatureKind, part, sig.substr(0, dot))) {
            MIMO_LOG_WARN(
                "%s: the thinking block's signature was not issued by this server: its "
                "text is left out of the prompt",
                bf.c_str());
            part.clear();
          }
        }
        thinking += part;
      } else if (t == "redacted_thinking") {
        continue;
      } else if (t == "tool_use" && role == "assistant") {
        if (!b.contains("name") || !b["name"].is_string()) {
          return BadRequest("'" + bf + ".name' must be a string", bf + ".name");
        }
        std::string id;
        if (auto e = OptString(b, "id", bf + ".id", &id)) return e;
        OJson input = b.contains("input") && !b["input"].is_null() ? b["input"] : OJson::object();
        if (!input.is_object())
          return BadRequest("'" + bf + ".input' must be an object", bf + ".input");
        calls.push_back({{"id", id},
                         {"type", "function"},
                         {"function", {{"name", b["name"]}, {"arguments", input}}}});
      } else if (t == "tool_result" && role == "user") {
        std::string result;
        if (b.contains("content") && !b["content"].is_null()) {
          if (auto e = TextOf(b["content"], bf + ".content", &result)) return e;
        }
        std::string use_id;
        if (auto e = OptString(b, "tool_use_id", bf + ".tool_use_id", &use_id)) return e;
        msgs.push_back({{"role", "tool"}, {"tool_call_id", use_id}, {"content", result}});
      } else if (t == "image" || t == "document" || t == "audio" || t == "search_result") {
        return BadRequest("'" + bf + "' has type '" + t + "': this engine is text-only", bf);
      } else {
        return BadRequest(
            "'" + bf + "' has unsupported type '" + t + "' for a " + role + " message", bf);
      }
    }
    if (role == "assistant") {
      OJson a = {{"role", "assistant"}, {"content", text}};
      if (!thinking.empty()) a["reasoning_content"] = thinking;
      if (!calls.empty()) a["tool_calls"] = calls;
      msgs.push_back(a);
    } else if (!only_results) {
      msgs.push_back({{"role", "user"}, {"content", text}});
    }
    // Each tool_result block is a message of its own: bound what the blocks make, too.
    if (msgs.size() > static_cast<size_t>(kMaxMessages) + 1) {
      return BadRequest("'messages' make more than " + std::to_string(kMaxMessages) +
                            " chat messages (each tool_result block is one)",
                        "messages");
    }
  }
  *out = MergeLeadingSystemMessages(std::move(msgs));
  return std::nullopt;
}

namespace {

// Server tools: Anthropic runs them itself (web search and fetch, code execution, tool search).
// This server has none of them to run, so they are not offered to the model.
bool IsServerTool(const std::string& type) {
  for (const char* p : {"web_search_", "web_fetch_", "code_execution_", "tool_search_tool_"}) {
    if (type.rfind(p, 0) == 0) return true;
  }
  return false;
}

// Anthropic tools [{name, description, input_schema}] and tool_choice (auto | any | tool | none,
// disable_parallel_tool_use) -> the chat shape, checked by the chat completions' CheckTools.
std::optional<ApiError> ConvertTools(const OJson& body, ChatTurn* t) {
  OJson chat = OJson::object();
  if (body.contains("tools") && !body["tools"].is_null()) {
    if (!body["tools"].is_array()) return BadRequest("'tools' must be an array", "tools");
    OJson arr = OJson::array();
    for (size_t i = 0; i < body["tools"].size(); ++i) {
      const OJson& tool = body["tools"][i];
      const std::string f = "tools[" + std::to_string(i) + "]";
      const std::string type = TypeOf(tool);
      if (IsServerTool(type)) continue;
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string()) {
        return BadRequest("'" + f + ".name' must be a string", f + ".name");
      }
      if (!type.empty() && type != "custom") {
        return BadRequest("'" + f + "': tool type '" + type +
                              "' is not supported; give custom tools with an input_schema",
                          f + ".type");
      }
      OJson fn = {{"name", tool["name"]}};
      if (tool.contains("description")) fn["description"] = tool["description"];
      fn["parameters"] = tool.contains("input_schema") && !tool["input_schema"].is_null()
                             ? tool["input_schema"]
                             : OJson{{"type", "object"}};
      if (tool.contains("strict")) fn["strict"] = tool["strict"];
      arr.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!arr.empty()) chat["tools"] = arr;
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const OJson& tc = body["tool_choice"];
    const std::string type = TypeOf(tc);
    if (type == "auto" || type == "none") {
      chat["tool_choice"] = type;
    } else if (type == "any") {
      chat["tool_choice"] = "required";
    } else if (type == "tool") {
      std::string name;
      if (auto e = OptString(tc, "name", "tool_choice.name", &name)) return e;
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
    } else {
      return BadRequest("'tool_choice.type' must be auto, any, tool or none", "tool_choice");
    }
    if (tc.contains("disable_parallel_tool_use") && !tc["disable_parallel_tool_use"].is_null()) {
      if (!tc["disable_parallel_tool_use"].is_boolean()) {
        return BadRequest("'tool_choice.disable_parallel_tool_use' must be a boolean",
                          "tool_choice.disable_parallel_tool_use");
      }
      chat["parallel_tool_calls"] = !tc["disable_parallel_tool_use"].get<bool>();
    }
  }
  // auto (the default) and none mean nothing without tools.
  if (!chat.contains("tools")) {
    const OJson choice = chat.value("tool_choice", OJson("auto"));
    if (choice == "auto" || choice == "none") chat.erase("tool_choice");
  }
  return CheckTools(chat, t);
}

// thinking: {"type": "enabled", "budget_tokens": N} (on, the reasoning block ends by force after
// N tokens), "adaptive" / "between_tools" (on, no budget), "disabled" (off); absent: off, as the
// Messages API.
std::optional<ApiError> ParseThinking(const OJson& body, AnthropicRequest* r) {
  if (!body.contains("thinking") || body["thinking"].is_null()) return std::nullopt;
  const OJson& th = body["thinking"];
  const std::string type = TypeOf(th);
  if (type == "disabled") return std::nullopt;
  if (type != "enabled" && type != "adaptive" && type != "between_tools") {
    return BadRequest("'thinking.type' must be enabled, adaptive or disabled", "thinking.type");
  }
  r->thinking = true;
  if (th.contains("display") && !th["display"].is_null()) {
    if (!th["display"].is_string() ||
        (th["display"] != "summarized" && th["display"] != "omitted")) {
      return BadRequest("'thinking.display' must be summarized or omitted", "thinking.display");
    }
    r->omit_thinking = th["display"] == "omitted";
  }
  if (type != "enabled") return std::nullopt;
  if (!th.contains("budget_tokens") || !th["budget_tokens"].is_number_integer()) {
    return BadRequest("'thinking.budget_tokens' (an integer) is required with type enabled",
                      "thinking.budget_tokens");
  }
  int64_t budget = 0;
  if (auto e = IntegerInRange(th["budget_tokens"], "thinking.budget_tokens", INT64_MIN, INT64_MAX,
                              &budget)) {
    return e;
  }
  const int max_tokens = r->turn.gen.stop.max_tokens;
  if (budget < 1 || (max_tokens > 0 && budget >= max_tokens)) {
    return BadRequest("'thinking.budget_tokens' must be at least 1 and less than max_tokens (" +
                          std::to_string(max_tokens) + ")",
                      "thinking.budget_tokens");
  }
  r->turn.reasoning_budget = static_cast<int>(budget);
  return std::nullopt;
}

// output_config.format (and the beta's top-level output_format): {"type": "json_schema",
// "schema": {...}} -> response_format.
std::optional<ApiError> ParseOutputFormat(const OJson& body, ChatTurn* t) {
  const OJson* f = nullptr;
  const char* param = "output_config.format";
  if (body.contains("output_config") && !body["output_config"].is_null()) {
    if (!body["output_config"].is_object()) {
      return BadRequest("'output_config' must be an object", "output_config");
    }
    const OJson& oc = body["output_config"];
    if (oc.contains("format") && !oc["format"].is_null()) f = &oc["format"];
  }
  if (!f && body.contains("output_format") && !body["output_format"].is_null()) {
    f = &body["output_format"];
    param = "output_format";
  }
  if (!f) return std::nullopt;
  if (TypeOf(*f) != "json_schema" || !f->contains("schema") || !(*f)["schema"].is_object()) {
    return BadRequest(
        "'" + std::string(param) + "' must be {\"type\": \"json_schema\", \"schema\": {...}}",
        param);
  }
  t->response_format = {{"type", "json_schema"},
                        {"json_schema", {{"name", "output"}, {"schema", (*f)["schema"]}}}};
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseAnthropicRequest(const ParseContext& ctx, const OJson& body,
                                              bool for_count, AnthropicRequest* r) {
  ChatTurn& t = r->turn;
  if (auto e = CheckModel(body, ctx.defaults)) return e;
  if (!for_count) {
    if (!body.contains("max_tokens")) return BadRequest("'max_tokens' is required", "max_tokens");
    // The OpenAI field parser handles the shared fields; Anthropic's names are mapped first.
    OJson fields = OJson::object();
    for (const char* k : {"max_tokens", "temperature", "top_p", "top_k"}) {
      if (body.contains(k)) fields[k] = body[k];
    }
    if (body.contains("stop_sequences") && !body["stop_sequences"].is_null()) {
      if (!body["stop_sequences"].is_array()) {
        return BadRequest("'stop_sequences' must be an array of strings", "stop_sequences");
      }
      fields["stop"] = body["stop_sequences"];
    }
    if (auto e = ParseGenerationFields(fields, ctx.defaults, true, &t.gen)) {
      if (e->param == "stop") {  // named as the client sent it
        e->param = "stop_sequences";
        const size_t at = e->message.find("'stop'");
        if (at != std::string::npos) e->message.replace(at, 6, "'stop_sequences'");
      }
      return e;
    }
    if (body.contains("stream") && !body["stream"].is_null()) {
      if (!body["stream"].is_boolean()) return BadRequest("'stream' must be a boolean", "stream");
      r->stream = body["stream"].get<bool>();
    }
  }
  if (auto e = ConvertMessages(ctx, body, &t.messages)) return e;
  if (auto e = ConvertTools(body, &t)) return e;
  if (auto e = ParseThinking(body, r)) return e;
  if (auto e = ParseOutputFormat(body, &t)) return e;
  t.template_kwargs = {{"enable_thinking", r->thinking}};
  // An assistant message last is a prefill: the answer continues it.
  const OJson& last = t.messages.back();
  if (last.value("role", "") == "assistant") {
    if (last.contains("tool_calls")) {
      return BadRequest("the final assistant message cannot be continued after a tool_use block",
                        "messages");
    }
    const std::string text = last.value("content", "");
    if (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
      return BadRequest("final assistant content cannot end with trailing whitespace", "messages");
    }
    t.continue_final_message = true;
  }
  return std::nullopt;
}

}  // namespace mimo
