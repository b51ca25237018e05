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

// `text` on a line of its own after *out (documents and search results are set apart from the
// text blocks around them, which are joined as they are).
void AppendOnOwnLine(const std::string& text, std::string* out) {
  if (!out->empty() && out->back() != '\n') *out += '\n';
  *out += text;
}

// An element `<tag>value</tag>` line when value is not empty.
std::string Tagged(const char* tag, const std::string& value) {
  if (value.empty()) return "";
  return "<" + std::string(tag) + ">" + value + "</" + tag + ">\n";
}

// A text document (Anthropic's `document` block with source.type "text" or "content") or a
// `search_result` block, rendered for a text-only model: its source, title and context as tagged
// lines, then its text. `citations: {"enabled": true}` is accepted and ignored: answers carry no
// citations (the field is optional in Anthropic's answers), the text is in the prompt all the
// same. PDFs (base64, url, file) are refused: nothing here reads them.
std::optional<ApiError> TextDocument(const OJson& b, const std::string& bf, std::string* out) {
  const std::string type = TypeOf(b);
  std::string title, context, source, body;
  if (auto e = OptString(b, "title", bf + ".title", &title)) return e;
  if (auto e = OptString(b, "context", bf + ".context", &context)) return e;
  if (b.contains("citations") && !b["citations"].is_null() && !b["citations"].is_object()) {
    return BadRequest("'" + bf + ".citations' must be an object", bf + ".citations");
  }
  if (type == "search_result") {
    if (auto e = OptString(b, "source", bf + ".source", &source)) return e;
    if (!b.contains("content") || !b["content"].is_array()) {
      return BadRequest("'" + bf + ".content' must be an array of text blocks", bf + ".content");
    }
    if (auto e = TextOf(b["content"], bf + ".content", &body)) return e;
  } else {  // document
    const std::string sf = bf + ".source";
    if (!b.contains("source") || !b["source"].is_object()) {
      return BadRequest("'" + sf + "' must be an object", sf);
    }
    const OJson& src = b["source"];
    const std::string kind = TypeOf(src);
    if (kind == "text") {
      std::string media = "text/plain";
      if (auto e = OptString(src, "media_type", sf + ".media_type", &media)) return e;
      if (media != "text/plain") {
        return BadRequest("'" + sf + ".media_type' must be text/plain, got '" + media + "'",
                          sf + ".media_type");
      }
      if (!src.contains("data") || !src["data"].is_string()) {
        return BadRequest("'" + sf + ".data' must be a string", sf + ".data");
      }
      body = src["data"].get<std::string>();
    } else if (kind == "content") {
      if (!src.contains("content")) {
        return BadRequest("'" + sf + ".content' is required", sf + ".content");
      }
      if (auto e = TextOf(src["content"], sf + ".content", &body)) return e;
    } else if (kind == "base64" || kind == "url" || kind == "file") {
      return BadRequest("'" + sf + ".type' is '" + kind +
                            "': this engine is text-only and reads no PDFs; send the document's "
                            "text (source.type text or content)",
                        sf + ".type");
    } else {
      return BadRequest("'" + sf + ".type' must be text, content, base64, url or file",
                        sf + ".type");
    }
  }
  const char* tag = type == "search_result" ? "search_result" : "document";
  AppendOnOwnLine("<" + std::string(tag) + ">\n" + Tagged("source", source) +
                      Tagged("title", title) + Tagged("context", context) + "<content>\n" + body +
                      "\n</content>\n</" + tag + ">\n",
                  out);
  return std::nullopt;
}

// A user message's or a tool result's content: a string, or text, document and search_result
// blocks (the text ones; images, PDFs and audio are refused: this engine is text-only).
std::optional<ApiError> ContentText(const OJson& c, const std::string& field, std::string* out) {
  if (!c.is_array()) return TextOf(c, field, out);
  for (size_t k = 0; k < c.size(); ++k) {
    const OJson& b = c[k];
    const std::string bf = field + "[" + std::to_string(k) + "]";
    const std::string t = TypeOf(b);
    if (t == "document" || t == "search_result") {
      if (auto e = TextDocument(b, bf, out)) return e;
    } else if (t == "text" && b.contains("text") && b["text"].is_string()) {
      *out += b["text"].get<std::string>();
    } else {
      return BadRequest("'" + bf + "' has type '" + t +
                            "': content here is text, document and search_result blocks (this "
                            "engine is text-only)",
                        bf);
    }
  }
  return std::nullopt;
}

// What the blocks of one user or assistant message make.
struct MessageBlocks {
  std::string text;
  std::string thinking;
  OJson calls = OJson::array();
  bool only_results = false;  // tool_result blocks only: no user message of its own
};

// A thinking block sent back, its text into *thinking. A signature is "<hmac>" or, for an omitted
// display, "<hmac>.<base64 text>". Only reasoning this server wrote reaches the model: a block
// whose signature does not verify (modified, from another server, or from before a restart) is
// left out of the prompt rather than refused, so an agent's conversation goes on; an unsigned one
// is kept (the client wrote it, as with chat completions' reasoning_content).
std::optional<ApiError> ThinkingBlock(const ParseContext& ctx, const OJson& b,
                                      const std::string& bf, std::string* thinking) {
  std::string part, sig;
  if (auto e = OptString(b, "thinking", bf + ".thinking", &part)) return e;
  if (auto e = OptString(b, "signature", bf + ".signature", &sig)) return e;
  if (!sig.empty()) {
    const size_t dot = sig.find('.');
    if (dot != std::string::npos && part.empty()) {
      auto decoded = Base64Decode(std::string_view(sig).substr(dot + 1));
      if (decoded) part = *decoded;
    }
    if (!ctx.verify || !ctx.verify(kThinkingSignatureKind, part, sig.substr(0, dot))) {
      MIMO_LOG_WARN(
          "%s: the thinking block's signature was not issued by this server: its "
          "text is left out of the prompt",
          bf.c_str());
      part.clear();
    }
  }
  *thinking += part;
  return std::nullopt;
}

// A tool_use block: a call of the assistant message.
std::optional<ApiError> ToolUseBlock(const OJson& b, const std::string& bf, OJson* calls) {
  if (!b.contains("name") || !b["name"].is_string()) {
    return BadRequest("'" + bf + ".name' must be a string", bf + ".name");
  }
  std::string id;
  if (auto e = OptString(b, "id", bf + ".id", &id)) return e;
  OJson input = b.contains("input") && !b["input"].is_null() ? b["input"] : OJson::object();
  if (!input.is_object()) return BadRequest("'" + bf + ".input' must be an object", bf + ".input");
  calls->push_back({{"id", id},
                    {"type", "function"},
                    {"function", {{"name", b["name"]}, {"arguments", input}}}});
  return std::nullopt;
}

// A tool_result block: a tool message of its own.
std::optional<ApiError> ToolResultBlock(const OJson& b, const std::string& bf, OJson* msgs) {
  std::string result;
  if (b.contains("content") && !b["content"].is_null()) {
    if (auto e = ContentText(b["content"], bf + ".content", &result)) return e;
  }
  std::string use_id;
  if (auto e = OptString(b, "tool_use_id", bf + ".tool_use_id", &use_id)) return e;
  msgs->push_back({{"role", "tool"}, {"tool_call_id", use_id}, {"content", result}});
  return std::nullopt;
}

// One content block of a user or assistant message, into *blocks (a tool result into *msgs).
// Redacted thinking is left out: its data is not this server's to read.
std::optional<ApiError> ContentBlock(const ParseContext& ctx, const OJson& b, const std::string& bf,
                                     const std::string& role, MessageBlocks* blocks, OJson* msgs) {
  const std::string t = TypeOf(b);
  blocks->only_results &= t == "tool_result";
  if (t == "text") {
    if (!b.contains("text") || !b["text"].is_string()) {
      return BadRequest("'" + bf + ".text' must be a string", bf + ".text");
    }
    blocks->text += b["text"].get<std::string>();
  } else if (t == "thinking" && role == "assistant") {
    return ThinkingBlock(ctx, b, bf, &blocks->thinking);
  } else if (t == "redacted_thinking") {
    return std::nullopt;
  } else if (t == "tool_use" && role == "assistant") {
    return ToolUseBlock(b, bf, &blocks->calls);
  } else if ((t == "document" || t == "search_result") && role == "user") {
    return TextDocument(b, bf, &blocks->text);
  } else if (t == "tool_result" && role == "user") {
    return ToolResultBlock(b, bf, msgs);
  } else if (t == "image" || t == "audio") {
    return BadRequest("'" + bf + "' has type '" + t + "': this engine is text-only", bf);
  } else {
    return BadRequest("'" + bf + "' has unsupported type '" + t + "' for a " + role + " message",
                      bf);
  }
  return std::nullopt;
}

// A user or assistant message's array of blocks -> its message (after the tool messages its
// tool_result blocks make), bounded with them.
std::optional<ApiError> BlocksMessage(const ParseContext& ctx, const OJson& c,
                                      const std::string& field, const std::string& role,
                                      OJson* msgs) {
  MessageBlocks blocks;
  blocks.only_results = !c.empty();
  for (size_t k = 0; k < c.size(); ++k) {
    const std::string bf = field + ".content[" + std::to_string(k) + "]";
    if (auto e = ContentBlock(ctx, c[k], bf, role, &blocks, msgs)) return e;
  }
  if (role == "assistant") {
    OJson a = {{"role", "assistant"}, {"content", blocks.text}};
    if (!blocks.thinking.empty()) a["reasoning_content"] = blocks.thinking;
    if (!blocks.calls.empty()) a["tool_calls"] = blocks.calls;
    msgs->push_back(a);
  } else if (!blocks.only_results) {
    msgs->push_back({{"role", "user"}, {"content", blocks.text}});
  }
  // Each tool_result block is a message of its own: bound what the blocks make, too.
  if (msgs->size() > static_cast<size_t>(kMaxMessages) + 1) {
    return BadRequest("'messages' make more than " + std::to_string(kMaxMessages) +
                          " chat messages (each tool_result block is one)",
                      "messages");
  }
  return std::nullopt;
}

// messages[i] -> chat messages appended to *msgs: a system message's text, a string content as it
// is, blocks as BlocksMessage makes them.
std::optional<ApiError> ConvertMessage(const ParseContext& ctx, const OJson& m,
                                       const std::string& field, OJson* msgs) {
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
    return BadRequest("'" + field + ".role' must be user, assistant or system", field + ".role");
  }
  const std::string role = m["role"];
  if (role != "user" && role != "assistant" && role != "system") {
    return BadRequest("'" + field + ".role' must be user, assistant or system, got '" + role + "'",
                      field + ".role");
  }
  if (!m.contains("content"))
    return BadRequest("'" + field + ".content' is required", field + ".content");
  const OJson& c = m["content"];
  if (role == "system") {
    std::string text;
    if (auto e = TextOf(c, field + ".content", &text)) return e;
    msgs->push_back({{"role", "system"}, {"content", text}});
    return std::nullopt;
  }
  if (c.is_string()) {
    msgs->push_back({{"role", role}, {"content", c}});
    return std::nullopt;
  }
  if (!c.is_array()) {
    return BadRequest("'" + field + ".content' must be a string or an array of blocks",
                      field + ".content");
  }
  return BlocksMessage(ctx, c, field, role, msgs);
}

}  // namespace

// Anthropic messages (+ system) -> OpenAI-style messages for the template. System messages may
// stand anywhere in `messages` (Claude Code sends them there): those before the first user or
// assistant message are merged with the top-level `system` into the one system prompt the
// template renders first; later ones become system turns in order. A thinking block that comes
// back with a signature this server did not issue is left out (ThinkingBlock).
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
    if (auto e = ConvertMessage(ctx, in[i], "messages[" + std::to_string(i) + "]", &msgs)) return e;
  }
  *out = MergeLeadingSystemMessages(std::move(msgs));
  return std::nullopt;
}

namespace {

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Server tools: Anthropic runs them itself and puts their results in the answer. This server
// runs none. Web search and fetch and code execution are refused (400 naming the tool's type):
// left out silently, the model would answer without the search or the run it was asked to use
// and the client could not tell. Tool search is left out instead: it only finds tools marked
// defer_loading, and this server offers every tool to the model from the start, deferred or not.
// (bash_* / text_editor_* / computer_* / memory_* are client tools with a type: refused below
// as not custom; Claude Code sends its tools as custom ones, tests/data/agents.)
bool IsServerTool(const std::string& type) {
  for (const char* p : {"web_search_", "web_fetch_", "code_execution_"}) {
    if (StartsWith(type, p)) return true;
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
      if (StartsWith(type, "tool_search_tool_")) continue;
      if (IsServerTool(type)) {
        return BadRequest("'" + f + ".type' '" + type +
                              "' is not supported: it is a server tool, which Anthropic runs "
                              "and this server cannot; give the tools the client runs as custom "
                              "tools with an input_schema",
                          f + ".type");
      }
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
// Messages API. budget_tokens must be less than max_tokens, as Anthropic requires, except with
// interleaved thinking (the anthropic-beta interleaved-thinking-2025-05-14, which Claude Code and
// Qwen Code send whenever they think): there the budget covers every thinking block of the
// assistant's turn, across its tool calls, and may exceed max_tokens (Qwen Code sends 32000 with
// max_tokens 32000). A budget of max_tokens or more cannot bind within one request, since the
// answer stops at max_tokens first, so it is dropped: the reasoning runs until the model ends it
// or max_tokens does. A smaller one is kept per request (this server keeps no turn state to count
// across requests). The minimum stays 1, not Anthropic's 1024: budgets are this engine's
// forced end of reasoning, which small models and tests use with a few tokens.
std::optional<ApiError> ParseThinking(const OJson& body, bool interleaved, AnthropicRequest* r) {
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
  if (budget < 1 || (!interleaved && max_tokens > 0 && budget >= max_tokens)) {
    return BadRequest("'thinking.budget_tokens' must be at least 1 and less than max_tokens (" +
                          std::to_string(max_tokens) +
                          "), unless the anthropic-beta header asks for interleaved thinking",
                      "thinking.budget_tokens");
  }
  if (max_tokens > 0 && budget >= max_tokens) return std::nullopt;  // interleaved: cannot bind
  if (budget > INT32_MAX) return std::nullopt;  // count_tokens (no max_tokens): unused anyway
  r->turn.reasoning_budget = static_cast<int>(budget);
  return std::nullopt;
}

// thread (the message-threads beta; @anthropic-ai/sdk's toolRunner sends it by default):
// {"type": "create"} asks the server to keep the conversation under the reply's id, and
// {"type": "continue", "previous_message_id": id} then sends only the new messages, without
// system and tools. This server keeps no threads: a `create` is served as the ordinary request
// it also is (it holds the whole conversation), and every `continue` is answered with Anthropic's
// 404 thread_not_found, on which the SDK replays the whole conversation with `create`; after a
// second loss in a row its toolRunner stops threading (unsupportedRequestBehavior
// continue_unthreaded), so a tool loop costs two refused requests and never a wrong conversation.
// Storing threads instead would save those two requests at the price of a store holding every
// conversation of every client, bounded and evicted, for a saving the prefix cache mostly makes
// anyway (the replayed prompt is the one just computed).
std::optional<ApiError> ParseThread(const OJson& body) {
  if (!body.contains("thread") || body["thread"].is_null()) return std::nullopt;
  const OJson& th = body["thread"];
  const std::string type = TypeOf(th);
  if (type == "create") return std::nullopt;
  if (type != "continue") {
    return BadRequest("'thread.type' must be create or continue", "thread.type");
  }
  std::string id;
  if (auto e = OptString(th, "previous_message_id", "thread.previous_message_id", &id)) return e;
  if (id.empty()) {
    return BadRequest("'thread.previous_message_id' is required with type continue",
                      "thread.previous_message_id");
  }
  ApiError e = NotFound("thread '" + id +
                        "' not found: this server keeps no threads; replay the whole "
                        "conversation (thread type create, or no thread)");
  e.param = "thread.previous_message_id";
  e.code = kThreadNotFound;
  return e;
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
                                              bool for_count, AnthropicRequest* r,
                                              bool interleaved_thinking) {
  ChatTurn& t = r->turn;
  if (auto e = CheckModel(body, ctx.defaults)) return e;
  // Before the messages: a `continue` holds only the new ones (none at all after a pause_turn).
  if (auto e = ParseThread(body)) return e;
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
  if (auto e = ParseThinking(body, interleaved_thinking, r)) return e;
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

bool HasInterleavedThinkingBeta(const std::vector<std::pair<std::string, std::string>>& headers) {
  for (const auto& [name, value] : headers) {
    if (name.size() != 14) continue;
    std::string lower = name;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower == "anthropic-beta" && value.find("interleaved-thinking-") != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace mimo
