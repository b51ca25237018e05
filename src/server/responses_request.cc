// Request parsing for POST /v1/responses (the OpenAI Responses API; the handlers are in
// responses_api.cc): instructions, input as a string or items (messages, function_call,
// function_call_output, custom tool calls, reasoning, item_reference), tools, text.format and
// reasoning.effort become a ChatTurn like a chat completion. previous_response_id and
// item_reference are read from the context's ResponseStore; a reasoning item's
// encrypted_content ("mimo1.<base64 text>.<signature>") is checked with the context's verify.
// Needs no ApiServer (parse_context.h).
#include "server/responses_request.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "chat/chat_template.h"
#include "core/base64.h"
#include "core/log.h"
#include "core/utf8.h"
#include "server/request_json.h"
#include "server/response_store.h"

namespace mimo {
namespace {

std::string TypeOf(const OJson& o) {
  return o.is_object() && o.contains("type") && o["type"].is_string() ? o["type"].get<std::string>()
                                                                      : "";
}

const OJson* Field(const OJson& o, const char* k) {
  auto it = o.find(k);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

// reasoning.effort -> a thinking budget in tokens (-1: unbounded); "none" turns thinking off.
// A toy CPU model and a 1T-parameter one both get these; they are upper bounds, the model may
// close its reasoning sooner.
std::optional<int> EffortBudget(const std::string& effort) {
  if (effort == "minimal") return 256;
  if (effort == "low") return 1024;
  if (effort == "medium") return 4096;
  if (effort == "high") return 16384;
  if (effort == "xhigh") return -1;
  return std::nullopt;
}

// Text of a message's content: a string or parts (input_text, output_text, text, refusal).
std::optional<ApiError> ContentText(const OJson& c, const std::string& field, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array())
    return BadRequest("'" + field + "' must be a string or an array of parts", field);
  for (size_t k = 0; k < c.size(); ++k) {
    const OJson& p = c[k];
    const std::string pf = field + "[" + std::to_string(k) + "]";
    const std::string t = TypeOf(p);
    if (t == "input_text" || t == "output_text" || t == "text") {
      if (!p.contains("text") || !p["text"].is_string()) {
        return BadRequest("'" + pf + ".text' must be a string", pf + ".text");
      }
      *out += p["text"].get<std::string>();
    } else if (t == "refusal") {
      if (p.contains("refusal") && p["refusal"].is_string())
        *out += p["refusal"].get<std::string>();
    } else if (t == "input_image" || t == "input_file" || t == "input_audio") {
      return BadRequest("'" + pf + "' has type '" + t +
                            "': this engine is text-only; image, audio and file parts are not "
                            "supported",
                        pf);
    } else {
      return BadRequest("'" + pf + "' has unsupported type '" + t + "'", pf);
    }
  }
  return std::nullopt;
}

// The chat messages that input items become, with the assistant turn being gathered: a reasoning
// item, an assistant message and the function calls that follow form one assistant turn, as the
// chat template renders it.
class InputTurns {
 public:
  explicit InputTurns(OJson* msgs) : msgs_(msgs) {}
  // A message that is not the assistant's ends the turn being gathered.
  void Push(OJson message) {
    Flush();
    msgs_->push_back(std::move(message));
  }
  // The turn to put a text or a reasoning in: a new one once the turn has text or calls.
  OJson& AssistantForText() {
    OJson& a = Assistant();
    if (!a["content"].get<std::string>().empty() || a.contains("tool_calls")) {
      Flush();
      Assistant();
    }
    return pending_;
  }
  void AddCall(OJson call) {
    OJson& a = Assistant();
    if (!a.contains("tool_calls")) a["tool_calls"] = OJson::array();
    a["tool_calls"].push_back(std::move(call));
  }
  void Flush() {
    if (!pending_.is_null()) msgs_->push_back(std::move(pending_));
    pending_ = nullptr;
  }

 private:
  OJson& Assistant() {
    if (pending_.is_null()) pending_ = {{"role", "assistant"}, {"content", ""}};
    return pending_;
  }
  OJson* msgs_;
  OJson pending_ = nullptr;  // the assistant turn being gathered
};

// An item_reference: the item of a stored response it names (the AI SDK sends the previous output
// so), into *item.
std::optional<ApiError> ReferencedItem(const ParseContext& ctx, const OJson& ref,
                                       const std::string& f, OJson* item) {
  const OJson* id = Field(ref, "id");
  if (!id || !id->is_string()) return BadRequest("'" + f + ".id' must be a string", f + ".id");
  std::optional<OJson> found = ctx.store ? ctx.store->FindItem(*id) : std::nullopt;
  if (!found) {
    ApiError e = NotFound("Item with id '" + id->get<std::string>() +
                          "' not found (never stored, deleted, or evicted from the bounded "
                          "store).");
    e.param = f + ".id";
    return e;
  }
  *item = std::move(*found);
  return std::nullopt;
}

// A message item: user, system and developer messages stand alone (developer is the Responses
// API's name for system instructions); an assistant message's text joins the assistant turn.
std::optional<ApiError> MessageItem(const OJson& it, const std::string& f, InputTurns* turns) {
  const OJson* role_j = Field(it, "role");
  if (!role_j || !role_j->is_string()) {
    return BadRequest("'" + f + ".role' must be user, assistant, system or developer", f + ".role");
  }
  const std::string role = *role_j;
  if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
    return BadRequest(
        "'" + f + ".role' must be user, assistant, system or developer, got '" + role + "'",
        f + ".role");
  }
  std::string text;
  const OJson* c = Field(it, "content");
  if (!c) return BadRequest("'" + f + ".content' is required", f + ".content");
  if (auto e = ContentText(*c, f + ".content", &text)) return e;
  if (role == "assistant") {
    turns->AssistantForText()["content"] = text;
  } else {
    turns->Push({{"role", role == "user" ? "user" : "system"}, {"content", text}});
  }
  return std::nullopt;
}

// A function_call item: a call of the assistant turn, its arguments a JSON object text.
std::optional<ApiError> FunctionCallItem(const OJson& it, const std::string& f, InputTurns* turns) {
  const OJson* name = Field(it, "name");
  const OJson* call_id = Field(it, "call_id");
  const OJson* args = Field(it, "arguments");
  if (!name || !name->is_string())
    return BadRequest("'" + f + ".name' must be a string", f + ".name");
  if (!call_id || !call_id->is_string()) {
    return BadRequest("'" + f + ".call_id' must be a string", f + ".call_id");
  }
  if (args && !args->is_string()) {
    return BadRequest("'" + f + ".arguments' must be a string (JSON)", f + ".arguments");
  }
  OJson parsed = ParseNestedJson(args ? args->get<std::string>() : "{}");
  if (parsed.is_discarded() || !parsed.is_object()) {
    return BadRequest("'" + f + ".arguments' must be a JSON object text, nested at most " +
                          std::to_string(kMaxJsonDepth) + " levels deep",
                      f + ".arguments");
  }
  turns->AddCall({{"id", *call_id},
                  {"type", "function"},
                  {"function", {{"name", *name}, {"arguments", parsed}}}});
  return std::nullopt;
}

// A custom_tool_call item: a free-form call (see ConvertTools), which the model wrote as a
// function of `input`.
std::optional<ApiError> CustomToolCallItem(const OJson& it, const std::string& f,
                                           InputTurns* turns) {
  const OJson* name = Field(it, "name");
  const OJson* call_id = Field(it, "call_id");
  const OJson* in = Field(it, "input");
  if (!name || !name->is_string() || !call_id || !call_id->is_string() ||
      (in && !in->is_string())) {
    return BadRequest("'" + f + "' (a custom_tool_call) needs string name, call_id and input", f);
  }
  turns->AddCall(
      {{"id", *call_id},
       {"type", "function"},
       {"function", {{"name", *name}, {"arguments", {{"input", in ? *in : OJson("")}}}}}});
  return std::nullopt;
}

// A function_call_output or custom_tool_call_output item: a tool message.
std::optional<ApiError> CallOutputItem(const OJson& it, const std::string& f, InputTurns* turns) {
  const OJson* call_id = Field(it, "call_id");
  const OJson* out = Field(it, "output");
  if (!call_id || !call_id->is_string()) {
    return BadRequest("'" + f + ".call_id' must be a string", f + ".call_id");
  }
  std::string text;
  if (out) {
    if (auto e = ContentText(*out, f + ".output", &text)) return e;
  }
  turns->Push({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", text}});
  return std::nullopt;
}

// The text of a reasoning item's encrypted_content ("mimo1.<base64 text>.<signature>", as this
// server issued it), or "" when this server did not issue it: such content (modified, another
// provider's, or from before a restart) is left out rather than refused, so a stateless agent's
// conversation goes on.
std::string DecryptedReasoning(const ParseContext& ctx, const OJson& enc, const std::string& f) {
  const std::string s = enc.is_string() ? enc.get<std::string>() : "";
  const size_t dot = s.rfind('.');
  std::optional<std::string> decoded;
  if (s.rfind(kEncryptedPrefix, 0) == 0 && dot != std::string::npos && dot > 5) {
    decoded = Base64Decode(std::string_view(s).substr(6, dot - 6));
  }
  if (decoded && ctx.verify &&
      ctx.verify(kReasoningKind, *decoded, std::string_view(s).substr(dot + 1))) {
    return *decoded;
  }
  MIMO_LOG_WARN(
      "%s.encrypted_content was not issued by this server: the reasoning is "
      "left out of the prompt",
      f.c_str());
  return "";
}

// The text parts of an array of parts, joined (other parts are skipped).
std::string JoinedPartTexts(const OJson& parts) {
  std::string text;
  for (const OJson& p : parts) {
    if (p.is_object() && p.contains("text") && p["text"].is_string())
      text += p["text"].get<std::string>();
  }
  return text;
}

// A reasoning item: the reasoning of the assistant turn, from its content, else its
// encrypted_content, else its summary.
std::optional<ApiError> ReasoningItem(const ParseContext& ctx, const OJson& it,
                                      const std::string& f, InputTurns* turns) {
  std::string text;
  if (const OJson* c = Field(it, "content")) {
    if (!c->is_array()) return BadRequest("'" + f + ".content' must be an array", f + ".content");
    text = JoinedPartTexts(*c);
  }
  if (const OJson* enc = Field(it, "encrypted_content"); enc && text.empty()) {
    text = DecryptedReasoning(ctx, *enc, f);
  }
  if (text.empty()) {
    if (const OJson* sum = Field(it, "summary"); sum && sum->is_array())
      text = JoinedPartTexts(*sum);
  }
  OJson& a = turns->AssistantForText();
  a["reasoning_content"] = a.value("reasoning_content", "") + text;
  return std::nullopt;
}

// One input item (an item_reference already replaced by the item it names) into *turns.
std::optional<ApiError> InputItem(const ParseContext& ctx, const OJson& it, const std::string& type,
                                  const std::string& f, InputTurns* turns) {
  if (type == "message") return MessageItem(it, f, turns);
  if (type == "function_call") return FunctionCallItem(it, f, turns);
  if (type == "custom_tool_call") return CustomToolCallItem(it, f, turns);
  if (type == "function_call_output" || type == "custom_tool_call_output") {
    return CallOutputItem(it, f, turns);
  }
  if (type == "reasoning") return ReasoningItem(ctx, it, f, turns);
  return BadRequest("'" + f + ".type' '" + type +
                        "' is not supported: input items are message, function_call, "
                        "function_call_output, custom_tool_call(_output), reasoning and "
                        "item_reference",
                    f + ".type");
}

// Input items -> chat messages (appended to *msgs), an assistant turn gathered as InputTurns
// does. *items gets the input items with every item_reference replaced by the item it names,
// which is what this response keeps as its input (so a later reference finds the item here too,
// even once the response that first held it is evicted).
std::optional<ApiError> InputToMessages(const ParseContext& ctx, const OJson& input, OJson* msgs,
                                        OJson* items) {
  if (input.is_string()) {
    msgs->push_back({{"role", "user"}, {"content", input}});
    items->push_back({{"type", "message"},
                      {"role", "user"},
                      {"content", {{{"type", "input_text"}, {"text", input}}}}});
    return std::nullopt;
  }
  if (!input.is_array())
    return BadRequest("'input' must be a string or an array of items", "input");
  if (input.size() > static_cast<size_t>(kMaxMessages)) {
    return BadRequest("'input' holds " + std::to_string(input.size()) + " items; at most " +
                          std::to_string(kMaxMessages) + " are allowed",
                      "input");
  }
  InputTurns turns(msgs);
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string f = "input[" + std::to_string(i) + "]";
    if (!input[i].is_object()) return BadRequest("'" + f + "' must be an object", f);
    OJson referenced;
    if (TypeOf(input[i]) == "item_reference") {
      if (auto e = ReferencedItem(ctx, input[i], f, &referenced)) return e;
    }
    const OJson& it = referenced.is_null() ? input[i] : referenced;
    std::string type = TypeOf(it);
    items->push_back(it);
    if (type.empty() && it.contains("role")) {  // a message, listed as one (input_items)
      type = "message";
      items->back()["type"] = type;
    }
    if (auto e = InputItem(ctx, it, type, f, &turns)) return e;
  }
  turns.Flush();
  return std::nullopt;
}

// The Responses API's built-in tools, which OpenAI runs (web_search, file_search,
// code_interpreter, image_generation, computer_use, mcp) or whose calls come back as their own item
// types (local_shell, shell, apply_patch, tool_search). This server runs none of them and its
// model writes only function calls, so a request offering one is refused naming the tool - except
// web_search and tool_search, which agents offer on every request (Codex sends both whatever the
// model): those are left out of the prompt and the request is served with the client's own tools.
enum class BuiltinTool { kNone, kDropped, kRefused };

BuiltinTool BuiltinToolKind(const std::string& type) {
  static const char* const kDropped[] = {"web_search", "web_search_preview", "tool_search"};
  static const char* const kRefused[] = {
      "file_search",          "code_interpreter", "image_generation", "computer_use",
      "computer_use_preview", "computer",         "mcp",              "local_shell",
      "shell",                "apply_patch",      "programmatic_tool_calling"};
  // Dated variants too (web_search_preview_2025_03_11, web_search_2025_08_26).
  const auto is = [&](const char* name) {
    return type == name || type.rfind(std::string(name) + "_2", 0) == 0;
  };
  for (const char* d : kDropped) {
    if (is(d)) return BuiltinTool::kDropped;
  }
  for (const char* r : kRefused) {
    if (is(r)) return BuiltinTool::kRefused;
  }
  return BuiltinTool::kNone;
}

ApiError BuiltinToolRefused(const std::string& field, const std::string& type) {
  return BadRequest("'" + field + "' '" + type +
                        "' is not supported: this server runs no hosted or built-in tools (only "
                        "web_search and tool_search are accepted, and left out); give function "
                        "or custom tools, which the client runs",
                    field);
}

void AddFunction(const OJson& tool, OJson* arr) {
  OJson fn = OJson::object();
  for (const char* k : {"name", "description", "parameters", "strict"}) {
    if (const OJson* v = Field(tool, k)) fn[k] = *v;
  }
  arr->push_back({{"type", "function"}, {"function", fn}});
}

// A namespace tool: its functions, flattened, each remembered with its namespace.
std::optional<ApiError> AddNamespace(const OJson& tool, const std::string& f, OJson* arr,
                                     ResponsesTools* kinds) {
  const OJson* ns = Field(tool, "name");
  const OJson* inner = Field(tool, "tools");
  if (!ns || !ns->is_string() || !inner || !inner->is_array()) {
    return BadRequest("'" + f + "' (a namespace) needs a string 'name' and 'tools'", f);
  }
  for (size_t k = 0; k < inner->size(); ++k) {
    const OJson& fn = (*inner)[k];
    const std::string ff = f + ".tools[" + std::to_string(k) + "]";
    if (TypeOf(fn) != "function") {
      return BadRequest("'" + ff + ".type' must be function", ff + ".type");
    }
    AddFunction(fn, arr);
    if (const OJson* n = Field(fn, "name"); n && n->is_string()) {
      kinds->namespace_of[n->get<std::string>()] = *ns;
    }
  }
  return std::nullopt;
}

// A custom (free-form) tool: a function of one string `input`, its grammar (if any) shown to the
// model in the description but not enforced.
std::optional<ApiError> AddCustomTool(const OJson& tool, const std::string& f, OJson* arr,
                                      ResponsesTools* kinds) {
  const OJson* name = Field(tool, "name");
  if (!name || !name->is_string())
    return BadRequest("'" + f + ".name' must be a string", f + ".name");
  std::string desc = tool.value("description", OJson("")).is_string()
                         ? tool.value("description", OJson("")).get<std::string>()
                         : "";
  const OJson* format = Field(tool, "format");
  if (format && format->is_object() && (*format).value("definition", OJson()).is_string()) {
    desc += "\n\nThe input follows this " + (*format).value("syntax", OJson("")).dump() +
            " grammar:\n" + (*format)["definition"].get<std::string>();
  }
  OJson fn = {
      {"name", *name},
      {"description", desc},
      {"parameters",
       {{"type", "object"},
        {"properties",
         {{"input", {{"type", "string"}, {"description", "The input, as free-form text."}}}}},
        {"required", OJson::array({"input"})}}}};
  arr->push_back({{"type", "function"}, {"function", fn}});
  kinds->custom.insert(name->get<std::string>());
  return std::nullopt;
}

// `tools` -> chat tools in *arr: function tools as they are, namespace and custom tools as above,
// web_search and tool_search left out, other built-in tools refused (BuiltinToolKind).
std::optional<ApiError> ConvertToolList(const OJson& tools, OJson* arr, ResponsesTools* kinds) {
  if (!tools.is_array()) return BadRequest("'tools' must be an array", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const OJson& tool = tools[i];
    const std::string f = "tools[" + std::to_string(i) + "]";
    const std::string type = TypeOf(tool);
    if (type == "function") {
      AddFunction(tool, arr);
    } else if (type == "namespace") {
      if (auto e = AddNamespace(tool, f, arr, kinds)) return e;
    } else if (type == "custom") {
      if (auto e = AddCustomTool(tool, f, arr, kinds)) return e;
    } else if (BuiltinToolKind(type) == BuiltinTool::kRefused) {
      return BuiltinToolRefused(f + ".type", type);
    } else if (BuiltinToolKind(type) == BuiltinTool::kNone) {
      return BadRequest("'" + f + ".type' '" + type +
                            "' is not supported: tools are function, namespace and custom tools "
                            "(the client runs them)",
                        f + ".type");
    }
  }
  return std::nullopt;
}

// tool_choice {type: allowed_tools, mode, tools}: the chat tools cut to the listed ones, and the
// mode (auto or required) as the chat tool_choice.
std::optional<ApiError> ConvertAllowedTools(const OJson& tc, OJson* chat) {
  const OJson* allowed = Field(tc, "tools");
  const OJson* mode_j = Field(tc, "mode");
  const std::string mode = !mode_j ? "auto" : mode_j->is_string() ? mode_j->get<std::string>() : "";
  if (!allowed || !allowed->is_array() || (mode != "auto" && mode != "required")) {
    return BadRequest(
        "'tool_choice' allowed_tools needs 'tools' (an array) and mode auto or "
        "required",
        "tool_choice");
  }
  std::vector<std::string> names;
  for (const OJson& a : *allowed) {
    if (a.is_object() && a.contains("name") && a["name"].is_string()) names.push_back(a["name"]);
  }
  OJson kept = OJson::array();
  for (const OJson& tool : chat->value("tools", OJson::array())) {
    const OJson* name = Field(tool["function"], "name");
    if (name && name->is_string() &&
        std::find(names.begin(), names.end(), name->get<std::string>()) != names.end()) {
      kept.push_back(tool);
    }
  }
  if (kept.empty()) {
    chat->erase("tools");
  } else {
    (*chat)["tools"] = kept;
  }
  (*chat)["tool_choice"] = mode;
  return std::nullopt;
}

// tool_choice: none | auto | required | {type: function | custom, name} | {type: allowed_tools}
// -> the chat tool_choice (a built-in tool cannot be forced: nothing here can make that call).
std::optional<ApiError> ConvertToolChoice(const OJson& tc, OJson* chat) {
  const std::string type = TypeOf(tc);
  if (tc.is_string()) {
    (*chat)["tool_choice"] = tc;
  } else if (type == "function" || type == "custom") {
    (*chat)["tool_choice"] = {{"type", "function"},
                              {"function", {{"name", tc.value("name", OJson())}}}};
  } else if (BuiltinToolKind(type) != BuiltinTool::kNone) {
    return BuiltinToolRefused("tool_choice.type", type);
  } else if (type == "allowed_tools") {
    return ConvertAllowedTools(tc, chat);
  } else {
    return BadRequest(
        "'tool_choice' must be none, auto, required, {\"type\": \"function\", "
        "\"name\"} or {\"type\": \"allowed_tools\", ...}",
        "tool_choice");
  }
  return std::nullopt;
}

// Responses tools, tool_choice and parallel_tool_calls -> the chat shape (the converters above),
// checked by the chat completions' CheckTools.
std::optional<ApiError> ConvertTools(const OJson& body, ChatTurn* t, ResponsesTools* kinds) {
  OJson chat = OJson::object();
  if (const OJson* tools = Field(body, "tools")) {
    OJson arr = OJson::array();
    if (auto e = ConvertToolList(*tools, &arr, kinds)) return e;
    if (!arr.empty()) chat["tools"] = arr;
  }
  if (const OJson* p = Field(body, "parallel_tool_calls")) chat["parallel_tool_calls"] = *p;
  if (const OJson* tc = Field(body, "tool_choice")) {
    if (auto e = ConvertToolChoice(*tc, &chat)) return e;
  }
  // A required choice with only web_search / tool_search offered: nothing the model could call.
  if (!chat.contains("tools") && chat.contains("tool_choice") && chat["tool_choice"] != "auto" &&
      chat["tool_choice"] != "none") {
    return BadRequest(
        "'tool_choice' asks for a call, but no function tool is offered "
        "(web_search and tool_search are not available on this server)",
        "tool_choice");
  }
  if (!chat.contains("tools")) chat.erase("tool_choice");
  return CheckTools(chat, t);
}

// text.format: text | json_object | json_schema {name, schema, strict} -> response_format.
std::optional<ApiError> ConvertTextFormat(const OJson& body, ChatTurn* t) {
  const OJson* text = Field(body, "text");
  if (!text) return std::nullopt;
  if (!text->is_object()) return BadRequest("'text' must be an object", "text");
  const OJson* f = Field(*text, "format");
  if (!f) return std::nullopt;
  const std::string type = TypeOf(*f);
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    t->response_format = {{"type", "json_object"}};
    return std::nullopt;
  }
  if (type == "json_schema") {
    const OJson* schema = Field(*f, "schema");
    if (!schema || !schema->is_object()) {
      return BadRequest("'text.format.schema' (an object) is required", "text.format.schema");
    }
    const OJson* name = Field(*f, "name");
    if (name && !name->is_string()) {
      return BadRequest("'text.format.name' must be a string", "text.format.name");
    }
    t->response_format = {
        {"type", "json_schema"},
        {"json_schema", {{"name", name ? *name : OJson("output")}, {"schema", *schema}}}};
    return std::nullopt;
  }
  return BadRequest("'text.format.type' must be text, json_object or json_schema",
                    "text.format.type");
}

// What is kept with a stored response as the client sent it, within OpenAI's limits: metadata is
// at most kMaxMetadataPairs string pairs (keys of kMaxMetadataKeyChars, values of
// kMaxMetadataValueChars characters), `user` a string of kMaxUserChars.
std::optional<ApiError> CheckStoredAnnotations(const OJson& body) {
  if (const OJson* m = Field(body, "metadata")) {
    if (!m->is_object())
      return BadRequest("'metadata' must be an object of string values", "metadata");
    if (m->size() > kMaxMetadataPairs) {
      return BadRequest("'metadata' has " + std::to_string(m->size()) + " pairs; at most " +
                            std::to_string(kMaxMetadataPairs) + " are allowed",
                        "metadata");
    }
    for (auto it = m->begin(); it != m->end(); ++it) {
      if (utf8::CodepointCount(it.key()) > kMaxMetadataKeyChars) {
        return BadRequest("'metadata' keys are at most " + std::to_string(kMaxMetadataKeyChars) +
                              " characters",
                          "metadata");
      }
      if (!it.value().is_string() ||
          utf8::CodepointCount(it.value().get_ref<const std::string&>()) > kMaxMetadataValueChars) {
        return BadRequest("'metadata." + it.key() + "' must be a string of at most " +
                              std::to_string(kMaxMetadataValueChars) + " characters",
                          "metadata");
      }
    }
  }
  if (const OJson* u = Field(body, "user")) {
    if (!u->is_string() || utf8::CodepointCount(u->get_ref<const std::string&>()) > kMaxUserChars) {
      return BadRequest("'user' must be a string of at most " + std::to_string(kMaxUserChars) +
                            " characters",
                        "user");
    }
  }
  return std::nullopt;
}

// The request's switches: model, the unsupported background / conversation / prompt, stream,
// store, the stored metadata and user, and include.
std::optional<ApiError> ParseSwitches(const OJson& body, const ServerDefaults& d,
                                      ResponsesRequest* r) {
  if (auto e = CheckModel(body, d)) return e;
  for (const char* k : {"background", "conversation", "prompt"}) {
    const OJson* v = Field(body, k);
    if (v && !(v->is_boolean() && !v->get<bool>())) {
      return BadRequest(std::string("'") + k + "' is not supported by this server", k);
    }
  }
  for (const char* k : {"stream", "store"}) {
    const OJson* v = Field(body, k);
    if (v && !v->is_boolean()) return BadRequest(std::string("'") + k + "' must be a boolean", k);
  }
  if (auto e = CheckStoredAnnotations(body)) return e;
  r->stream = Field(body, "stream") && body["stream"].get<bool>();
  r->store = !Field(body, "store") || body["store"].get<bool>();
  if (const OJson* inc = Field(body, "include")) {
    if (!inc->is_array()) return BadRequest("'include' must be an array of strings", "include");
    for (const OJson& x : *inc) {
      r->encrypted_reasoning |= x == "reasoning.encrypted_content";
      r->output_logprobs |= x == "message.output_text.logprobs";
    }
  }
  return std::nullopt;
}

// Sampling: the chat fields parser, with the Responses API's names mapped; then the
// log-probabilities of the output text: with the include, top_logprobs alternatives each (0 when
// absent; *top_logprobs); top_logprobs alone asks for nothing, as in OpenAI's API.
std::optional<ApiError> ParseSampling(const OJson& body, const ServerDefaults& d,
                                      ResponsesRequest* r, int* top_logprobs) {
  OJson fields = OJson::object();
  if (const OJson* m = Field(body, "max_output_tokens")) fields["max_tokens"] = *m;
  for (const char* k : {"temperature", "top_p"}) {
    if (const OJson* v = Field(body, k)) fields[k] = *v;
  }
  if (auto e = ParseGenerationFields(fields, d, true, &r->turn.gen)) {
    if (e->param == "max_tokens") {  // named as the client sent it
      e->param = "max_output_tokens";
      for (size_t at; (at = e->message.find("'max_tokens'")) != std::string::npos;) {
        e->message.replace(at, 12, "'max_output_tokens'");
      }
    }
    return e;
  }
  if (const OJson* v = Field(body, "top_logprobs")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > kMaxLogprobs) {
      return BadRequest("'top_logprobs' must be an integer in [0, " +
                            std::to_string(kMaxLogprobs) + "]",
                        "top_logprobs");
    }
    *top_logprobs = v->get<int>();
  }
  if (r->output_logprobs) r->turn.gen.sampling.logprobs = *top_logprobs;
  return std::nullopt;
}

// The conversation: the previous response's messages, then instructions first, then this input.
std::optional<ApiError> ParseConversation(const ParseContext& ctx, const OJson& body,
                                          ResponsesRequest* r) {
  OJson msgs = OJson::array();
  if (const OJson* prev = Field(body, "previous_response_id")) {
    if (!prev->is_string())
      return BadRequest("'previous_response_id' must be a string", "previous_response_id");
    r->previous_response_id = *prev;
    std::optional<StoredResponse> p =
        ctx.store ? ctx.store->Get(r->previous_response_id) : std::nullopt;
    if (!p) {
      ApiError e = NotFound("Previous response with id '" + r->previous_response_id +
                            "' not found (never stored, deleted, or evicted from the bounded "
                            "store).");
      e.param = "previous_response_id";
      return e;
    }
    msgs = p->messages;
  }
  const OJson* input = Field(body, "input");
  if (!input && r->previous_response_id.empty()) return BadRequest("'input' is required", "input");
  if (input) {
    OJson items = OJson::array();
    if (auto e = InputToMessages(ctx, *input, &msgs, &items)) return e;
    for (OJson& item : items) {
      if (item.is_object() && !item.contains("id")) item["id"] = RandomId("msg_");
    }
    r->input_items = std::move(items);
  }
  r->history = msgs;
  if (const OJson* ins = Field(body, "instructions")) {
    if (!ins->is_string()) return BadRequest("'instructions' must be a string", "instructions");
    r->instructions = *ins;
    msgs.insert(msgs.begin(), OJson{{"role", "system"}, {"content", *ins}});
  }
  if (msgs.empty()) return BadRequest("'input' must not be empty", "input");
  r->turn.messages = MergeLeadingSystemMessages(std::move(msgs));
  const Status st = ChatTemplate::ParseToolCallArguments(&r->turn.messages, kMaxJsonDepth);
  if (!st.ok()) return BadRequest(st.message(), "input");
  return std::nullopt;
}

// reasoning.effort: none = off; otherwise on, with a budget; absent: the template's default.
// reasoning.summary asks for summaries. *echo: what the Response repeats of them.
std::optional<ApiError> ParseReasoning(const OJson& body, ResponsesRequest* r, OJson* echo) {
  const OJson* rs = Field(body, "reasoning");
  if (!rs) return std::nullopt;
  if (!rs->is_object()) return BadRequest("'reasoning' must be an object", "reasoning");
  ChatTurn& t = r->turn;
  if (const OJson* eff = Field(*rs, "effort")) {
    const std::string effort = eff->is_string() ? eff->get<std::string>() : "";
    if (effort == "none") {
      t.template_kwargs["enable_thinking"] = false;
    } else if (auto b = EffortBudget(effort)) {
      t.template_kwargs["enable_thinking"] = true;
      t.reasoning_budget = *b;
    } else {
      return BadRequest("'reasoning.effort' must be none, minimal, low, medium, high or xhigh",
                        "reasoning.effort");
    }
    (*echo)["effort"] = effort;
  }
  if (const OJson* s = Field(*rs, "summary")) {
    if (*s != "auto" && *s != "concise" && *s != "detailed") {
      return BadRequest("'reasoning.summary' must be auto, concise or detailed",
                        "reasoning.summary");
    }
    (*echo)["summary"] = *s;
    r->reasoning_summary = true;
  }
  return std::nullopt;
}

// A float as the shortest decimal that reads back as it (0.7f echoes 0.7, not 0.699999988).
double AsShortDecimal(float f) {
  char buf[32];
  for (int digits = 6; digits < 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(f));
    const double d = std::strtod(buf, nullptr);
    if (static_cast<float>(d) == f) return d;
  }
  return f;
}

// What the Response object repeats back of the request.
void EchoRequest(const OJson& body, const OJson& reasoning_echo, int top_logprobs,
                 ResponsesRequest* r) {
  const ChatTurn& t = r->turn;
  OJson& echo = r->echo;
  echo["instructions"] = r->instructions;
  echo["max_output_tokens"] =
      Field(body, "max_output_tokens") ? body["max_output_tokens"] : OJson(nullptr);
  echo["metadata"] = Field(body, "metadata") ? body["metadata"] : OJson::object();
  echo["parallel_tool_calls"] = t.parallel_tool_calls;
  echo["previous_response_id"] =
      Field(body, "previous_response_id") ? body["previous_response_id"] : OJson(nullptr);
  echo["reasoning"] = reasoning_echo;
  echo["store"] = r->store;
  echo["temperature"] = AsShortDecimal(t.gen.sampling.temperature);
  echo["text"] = Field(body, "text") ? body["text"] : OJson{{"format", {{"type", "text"}}}};
  echo["tool_choice"] = Field(body, "tool_choice") ? body["tool_choice"] : OJson("auto");
  echo["tools"] = Field(body, "tools") ? body["tools"] : OJson::array();
  echo["top_logprobs"] = top_logprobs;
  echo["top_p"] = AsShortDecimal(t.gen.sampling.top_p);
  echo["truncation"] = "disabled";
  echo["user"] = Field(body, "user") ? body["user"] : OJson(nullptr);
}

}  // namespace

std::optional<ApiError> ParseResponsesRequest(const ParseContext& ctx, const OJson& body,
                                              ResponsesRequest* r) {
  ChatTurn& t = r->turn;
  if (auto e = ParseSwitches(body, ctx.defaults, r)) return e;
  int top_logprobs = 0;
  if (auto e = ParseSampling(body, ctx.defaults, r, &top_logprobs)) return e;
  if (auto e = ParseConversation(ctx, body, r)) return e;
  if (auto e = ConvertTools(body, &t, &r->tools)) return e;
  if (auto e = ConvertTextFormat(body, &t)) return e;
  OJson reasoning_echo = {{"effort", nullptr}, {"summary", nullptr}};
  if (auto e = ParseReasoning(body, r, &reasoning_echo)) return e;
  if (const OJson* kw = Field(body, "chat_template_kwargs")) {  // vLLM's extension, as in chat
    if (!kw->is_object())
      return BadRequest("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    for (auto it = kw->begin(); it != kw->end(); ++it) t.template_kwargs[it.key()] = it.value();
  }
  EchoRequest(body, reasoning_echo, top_logprobs, r);
  return std::nullopt;
}

}  // namespace mimo
