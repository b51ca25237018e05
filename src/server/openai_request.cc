// Request validation for /v1/chat/completions and /v1/completions (see openai_request.h).
#include "server/openai_request.h"

#include <cstdint>
#include <cstdlib>

#include "chat/chat_template.h"
#include "server/request_json.h"

namespace mimo {
namespace {

std::string TypeName(const OJson& v) {
  switch (v.type()) {
    case OJson::value_t::null:
      return "null";
    case OJson::value_t::boolean:
      return "a boolean";
    case OJson::value_t::string:
      return "a string";
    case OJson::value_t::array:
      return "an array";
    case OJson::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

ApiError WrongType(const std::string& field, const char* want, const OJson& got) {
  return BadRequest("'" + field + "' must be " + want + ", got " + TypeName(got), field);
}

// Reads optional typed fields; a present null counts as absent (as the OpenAI SDKs send it).
class Fields {
 public:
  explicit Fields(const OJson& body) : b_(body) {}
  const OJson* Get(const char* key) const {
    auto it = b_.find(key);
    return it == b_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<ApiError> Number(const char* key, float* out) const {
    const OJson* v = Get(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) return WrongType(key, "a number", *v);
    *out = v->get<float>();
    return std::nullopt;
  }
  // An int: within [INT32_MIN, INT32_MAX] (the fields' own ranges are checked by their users).
  std::optional<ApiError> Int(const char* key, int* out) const {
    const OJson* v = Get(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) return WrongType(key, "an integer", *v);
    int64_t x = 0;
    if (auto e = IntegerInRange(*v, key, INT32_MIN, INT32_MAX, &x)) return e;
    *out = static_cast<int>(x);
    return std::nullopt;
  }
  std::optional<ApiError> Bool(const char* key, bool* out) const {
    const OJson* v = Get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
    *out = v->get<bool>();
    return std::nullopt;
  }

 private:
  const OJson& b_;
};

// A token id as JSON: an integer in [0, vocab_size) (vocab_size 0: any id an int32_t holds). Read
// as 64 bits, so that 4294967296 + 5 is refused rather than taken for 5.
bool TokenIdOf(const OJson& x, int64_t vocab_size, int32_t* out) {
  if (!x.is_number_integer()) return false;
  if (x.is_number_unsigned() && x.get<uint64_t>() > uint64_t{INT32_MAX}) return false;
  const int64_t v = x.get<int64_t>();
  const int64_t end = vocab_size > 0 ? vocab_size : int64_t{INT32_MAX} + 1;
  if (v < 0 || v >= end) return false;
  *out = static_cast<int32_t>(v);
  return true;
}

ApiError BadTokenId(const std::string& field, const OJson& x, int64_t vocab_size) {
  std::string got = x.is_number() ? x.dump() : TypeName(x);
  if (got.size() > 64) got = got.substr(0, 64) + "...";
  return BadRequest("'" + field + "' holds " + got +
                        ", which is not a token id (an integer in [0, " +
                        std::to_string(vocab_size > 0 ? vocab_size : int64_t{INT32_MAX} + 1) + "))",
                    field);
}

ApiError TooMany(const std::string& field, size_t got, int64_t limit, const char* what) {
  return BadRequest("'" + field + "' holds " + std::to_string(got) + " " + what + "; at most " +
                        std::to_string(limit) + " are allowed",
                    field);
}

#define MIMO_TRY(expr)                       \
  do {                                       \
    if (auto _e = (expr)) return *_e;        \
  } while (0)

}  // namespace

std::optional<ApiError> CheckModel(const OJson& body, const ServerDefaults& d) {
  const OJson* m = Fields(body).Get("model");
  if (!m) return std::nullopt;
  if (!m->is_string()) return WrongType("model", "a string", *m);
  if (m->get<std::string>() != d.served_model_name) {
    ApiError e;
    e.status = 404;
    e.type = "not_found_error";
    e.code = "model_not_found";
    e.param = "model";
    e.message = "The model `" + m->get<std::string>() + "` does not exist; this server serves `" +
                d.served_model_name + "`.";
    return e;
  }
  return std::nullopt;
}

SamplingParams DefaultSampling(const GenerationConfig& gen) {
  SamplingParams s;
  s.temperature = gen.temperature.value_or(1.0f);
  s.top_p = gen.top_p.value_or(1.0f);
  s.top_k = gen.top_k.value_or(0);
  s.min_p = gen.min_p.value_or(0.0f);
  s.repetition_penalty = gen.repetition_penalty.value_or(1.0f);
  return s;
}

namespace {

// Sampling: the server's defaults (DefaultSampling), then the request's temperature, top_p,
// top_k, min_p, penalties and seed.
std::optional<ApiError> ParseSampling(const Fields& f, const ServerDefaults& d, SamplingParams* s) {
  const SamplingParams def = DefaultSampling(d.gen);
  s->temperature = def.temperature;
  s->top_p = def.top_p;
  s->top_k = def.top_k;
  s->min_p = def.min_p;
  s->repetition_penalty = def.repetition_penalty;
  MIMO_TRY(f.Number("temperature", &s->temperature));
  MIMO_TRY(f.Number("top_p", &s->top_p));
  MIMO_TRY(f.Int("top_k", &s->top_k));
  MIMO_TRY(f.Number("min_p", &s->min_p));
  MIMO_TRY(f.Number("presence_penalty", &s->presence_penalty));
  MIMO_TRY(f.Number("frequency_penalty", &s->frequency_penalty));
  MIMO_TRY(f.Number("repetition_penalty", &s->repetition_penalty));
  if (const OJson* v = f.Get("seed")) {
    // A 64-bit signed integer, as in vLLM (negative seeds map onto the upper half of uint64).
    if (!v->is_number_integer()) return WrongType("seed", "an integer", *v);
    int64_t seed = 0;
    MIMO_TRY(IntegerInRange(*v, "seed", INT64_MIN, INT64_MAX, &seed));
    s->seed = static_cast<uint64_t>(seed);
  }
  return std::nullopt;
}

// n, and best_of (vLLM, legacy OpenAI: samples to draw before returning n), both bounded.
std::optional<ApiError> ParseSampleCounts(const Fields& f, GenerationRequest* g) {
  MIMO_TRY(f.Int("n", &g->n));
  if (g->n < 1 || g->n > kMaxN) {
    return BadRequest(
        "'n' must be in [1, " + std::to_string(kMaxN) + "], got " + std::to_string(g->n), "n");
  }
  int best_of = g->n;
  MIMO_TRY(f.Int("best_of", &best_of));
  if (best_of < 1 || best_of > kMaxN) {
    return BadRequest(
        "'best_of' must be in [1, " + std::to_string(kMaxN) + "], got " + std::to_string(best_of),
        "best_of");
  }
  return std::nullopt;
}

// The length rules: max_tokens, or max_completion_tokens (the newer OpenAI name, which wins),
// min_tokens, ignore_eos, skip_special_tokens.
std::optional<ApiError> ParseLengthRules(const Fields& f, StopParams* st) {
  MIMO_TRY(f.Int("max_tokens", &st->max_tokens));
  const char* max_field = "max_tokens";
  if (f.Get("max_completion_tokens")) {
    MIMO_TRY(f.Int("max_completion_tokens", &st->max_tokens));
    max_field = "max_completion_tokens";
  }
  if ((f.Get("max_tokens") || f.Get("max_completion_tokens")) && st->max_tokens < 1) {
    return BadRequest(std::string("'") + max_field + "' must be >= 1", max_field);
  }
  MIMO_TRY(f.Int("min_tokens", &st->min_tokens));
  MIMO_TRY(f.Bool("ignore_eos", &st->ignore_eos));
  MIMO_TRY(f.Bool("skip_special_tokens", &st->skip_special_tokens));
  return std::nullopt;
}

// stop: a string or an array of strings, each non-empty and bounded.
std::optional<ApiError> ParseStopStrings(const Fields& f, StopParams* st) {
  const OJson* v = f.Get("stop");
  if (!v) return std::nullopt;
  if (v->is_string()) {
    st->stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > static_cast<size_t>(kMaxStopStrings)) {
      return TooMany("stop", v->size(), kMaxStopStrings, "strings");
    }
    for (const OJson& x : *v) {
      if (!x.is_string()) return WrongType("stop", "a string or an array of strings", *v);
      st->stop.push_back(x.get<std::string>());
    }
  } else {
    return WrongType("stop", "a string or an array of strings", *v);
  }
  for (const std::string& x : st->stop) {
    if (x.empty()) return BadRequest("'stop' contains an empty string", "stop");
    if (x.size() > kMaxStopStringBytes) {
      return BadRequest("'stop' holds a string of " + std::to_string(x.size()) +
                            " bytes; at most " + std::to_string(kMaxStopStringBytes) +
                            " are allowed",
                        "stop");
    }
  }
  return std::nullopt;
}

// stop_token_ids: an array of token ids.
std::optional<ApiError> ParseStopTokenIds(const Fields& f, const ServerDefaults& d,
                                          StopParams* st) {
  const OJson* v = f.Get("stop_token_ids");
  if (!v) return std::nullopt;
  if (!v->is_array()) return WrongType("stop_token_ids", "an array of token ids", *v);
  if (v->size() > static_cast<size_t>(kMaxStopTokenIds)) {
    return TooMany("stop_token_ids", v->size(), kMaxStopTokenIds, "token ids");
  }
  for (const OJson& x : *v) {
    if (!x.is_number_integer()) return WrongType("stop_token_ids", "an array of token ids", *v);
    int32_t id = 0;
    if (!TokenIdOf(x, d.vocab_size, &id)) return BadTokenId("stop_token_ids", x, d.vocab_size);
    st->stop_token_ids.push_back(id);
  }
  return std::nullopt;
}

// logit_bias: {token id (digits): bias}.
std::optional<ApiError> ParseLogitBias(const Fields& f, const ServerDefaults& d,
                                       SamplingParams* s) {
  const OJson* v = f.Get("logit_bias");
  if (!v) return std::nullopt;
  if (!v->is_object()) return WrongType("logit_bias", "an object {token id: bias}", *v);
  if (v->size() > static_cast<size_t>(kMaxLogitBias)) {
    return TooMany("logit_bias", v->size(), kMaxLogitBias, "entries");
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    const std::string shown = key.size() > 32 ? key.substr(0, 32) + "..." : key;
    // Digits only (strtol would take "+5", " 5" and wrap past 2^31).
    if (key.empty() || key.size() > 12 ||
        key.find_first_not_of("0123456789") != std::string::npos) {
      return BadRequest("'logit_bias' keys must be token ids, got '" + shown + "'", "logit_bias");
    }
    const int64_t id = std::strtoll(key.c_str(), nullptr, 10);
    const int64_t vocab_end = d.vocab_size > 0 ? d.vocab_size : int64_t{INT32_MAX} + 1;
    if (id >= vocab_end) {
      return BadRequest("'logit_bias' key " + shown + " is not a token id (an integer in [0, " +
                            std::to_string(vocab_end) + "))",
                        "logit_bias");
    }
    if (!it.value().is_number()) return WrongType("logit_bias", "an object {token id: bias}", *v);
    s->logit_bias.push_back({static_cast<int32_t>(id), it.value().get<float>()});
  }
  return std::nullopt;
}

// Log-probabilities: for chat, logprobs (a boolean) with top_logprobs; for completions,
// logprobs is the number of alternatives.
std::optional<ApiError> ParseLogprobs(const Fields& f, bool chat, SamplingParams* s) {
  if (chat) {
    bool lp = false;
    MIMO_TRY(f.Bool("logprobs", &lp));
    int top = 0;
    MIMO_TRY(f.Int("top_logprobs", &top));
    if (f.Get("top_logprobs") && !lp) {
      return BadRequest("'top_logprobs' needs 'logprobs' set to true", "top_logprobs");
    }
    if (top < 0 || top > kMaxLogprobs) {
      return BadRequest("'top_logprobs' must be in [0, " + std::to_string(kMaxLogprobs) + "]",
                        "top_logprobs");
    }
    s->logprobs = lp ? top : -1;
  } else if (const OJson* v = f.Get("logprobs")) {
    if (!v->is_number_integer()) return WrongType("logprobs", "an integer", *v);
    int64_t lp = 0;
    MIMO_TRY(IntegerInRange(*v, "logprobs", 0, kMaxLogprobs, &lp));
    s->logprobs = static_cast<int>(lp);
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseGenerationFields(const OJson& body, const ServerDefaults& d, bool chat,
                                              GenerationRequest* g) {
  const Fields f(body);
  MIMO_TRY(ParseSampling(f, d, &g->sampling));
  MIMO_TRY(ParseSampleCounts(f, g));
  MIMO_TRY(ParseLengthRules(f, &g->stop));
  MIMO_TRY(ParseStopStrings(f, &g->stop));
  MIMO_TRY(ParseStopTokenIds(f, d, &g->stop));
  MIMO_TRY(ParseLogitBias(f, d, &g->sampling));
  MIMO_TRY(ParseLogprobs(f, chat, &g->sampling));
  // Range checks with the engine's own messages, which name the field.
  const Status vs = g->sampling.Validate(d.vocab_size);
  if (!vs.ok()) return BadRequest(vs.message());
  return std::nullopt;
}

namespace {

std::optional<ApiError> ParseStreamOptions(const OJson& body, bool* stream, bool* usage) {
  const Fields f(body);
  MIMO_TRY(f.Bool("stream", stream));
  if (const OJson* so = f.Get("stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (!*stream) return BadRequest("'stream_options' is only allowed with stream: true", "stream_options");
    MIMO_TRY(Fields(*so).Bool("include_usage", usage));
  }
  return std::nullopt;
}

std::optional<ApiError> CheckResponseFormat(const OJson& body, OJson* out) {
  const OJson* rf = Fields(body).Get("response_format");
  if (!rf) return std::nullopt;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) {
    return BadRequest("'response_format' must be an object with a string 'type'", "response_format");
  }
  const std::string t = (*rf)["type"];
  if (t != "text" && t != "json_object" && t != "json_schema") {
    return BadRequest("'response_format.type' must be text, json_object or json_schema, got '" +
                          t + "'",
                      "response_format");
  }
  if (t != "text") *out = *rf;
  return std::nullopt;
}

// A message's content: a string, null, or an array of text parts. Other parts (image, audio,
// video, file) are refused: this engine is text-only.
std::optional<ApiError> CheckContent(const OJson& content, size_t i, bool may_be_null) {
  const std::string field = "messages[" + std::to_string(i) + "].content";
  if (content.is_null()) {
    if (may_be_null) return std::nullopt;
    return BadRequest("'" + field + "' must not be null", field);
  }
  if (content.is_string()) return std::nullopt;
  if (!content.is_array()) return WrongType(field, "a string or an array of content parts", content);
  for (size_t k = 0; k < content.size(); ++k) {
    const OJson& p = content[k];
    const std::string pf = field + "[" + std::to_string(k) + "]";
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
      return BadRequest("'" + pf + "' must be an object with a string 'type'", pf);
    }
    const std::string t = p["type"];
    if (t == "text") {
      if (!p.contains("text") || !p["text"].is_string()) {
        return BadRequest("'" + pf + ".text' must be a string", pf + ".text");
      }
      continue;
    }
    return BadRequest("'" + pf + "' has type '" + t +
                          "': this engine is text-only; image, audio, video and file parts are "
                          "not supported",
                      pf);
  }
  return std::nullopt;
}

// Legacy function calling (OpenAI's API before tools): an assistant message's `function_call`
// {name, arguments} and a `role: "function"` message {name, content} holding its result.
std::optional<ApiError> CheckLegacyFunctionMessage(const OJson& msg, const std::string& field,
                                                   const std::string& role) {
  if (role == "function" && (!msg.contains("name") || !msg["name"].is_string())) {
    return BadRequest("'" + field + ".name' (the function whose result this is) must be a string",
                      field + ".name");
  }
  if (!msg.contains("function_call") || msg["function_call"].is_null()) return std::nullopt;
  const OJson& fc = msg["function_call"];
  const std::string f = field + ".function_call";
  if (role != "assistant") {
    return BadRequest("'" + f + "' is only allowed on assistant messages", f);
  }
  if (msg.contains("tool_calls") && !msg["tool_calls"].is_null()) {
    return BadRequest("'" + field + "' has both 'tool_calls' and 'function_call'; give one", f);
  }
  if (!fc.is_object() || !fc.contains("name") || !fc["name"].is_string()) {
    return BadRequest("'" + f + "' must be {\"name\", \"arguments\"}", f);
  }
  if (fc.contains("arguments") && !fc["arguments"].is_string() && !fc["arguments"].is_null()) {
    return WrongType(f + ".arguments", "a string", fc["arguments"]);
  }
  return std::nullopt;
}

// The legacy shapes as tools: an assistant's function_call becomes its one tool call, and a
// function message a tool message answering the latest unanswered call of that name (the chat
// template renders tool results in order; the ids only pair them up).
void LegacyFunctionMessagesAsTools(OJson* messages) {
  std::vector<std::pair<std::string, std::string>> open;  // (name, id) of calls not answered
  for (size_t i = 0; i < messages->size(); ++i) {
    OJson& msg = (*messages)[i];
    if (msg.contains("function_call") && !msg["function_call"].is_null()) {
      const OJson fc = msg["function_call"];
      const std::string id = "call_fn_" + std::to_string(i);
      const OJson args = fc.contains("arguments") && fc["arguments"].is_string()
                             ? fc["arguments"]
                             : OJson("{}");
      OJson call = {{"id", id}, {"type", "function"}};
      call["function"] = {{"name", fc["name"]}, {"arguments", args}};
      msg["tool_calls"] = OJson::array({std::move(call)});
      msg.erase("function_call");
      open.emplace_back(fc["name"].get<std::string>(), id);
    } else if (msg.value("role", "") == "function") {
      const std::string name = msg["name"];
      std::string id = "call_fn_" + name;
      for (auto it = open.rbegin(); it != open.rend(); ++it) {
        if (it->first != name) continue;
        id = it->second;
        open.erase(std::next(it).base());
        break;
      }
      msg["role"] = "tool";
      msg["tool_call_id"] = id;
    }
  }
}

std::optional<ApiError> CheckMessages(const OJson& body, OJson* out) {
  const OJson* m = Fields(body).Get("messages");
  if (!m) return BadRequest("'messages' is required", "messages");
  if (!m->is_array()) return WrongType("messages", "an array", *m);
  if (m->empty()) return BadRequest("'messages' must not be empty", "messages");
  if (m->size() > static_cast<size_t>(kMaxMessages)) {
    return TooMany("messages", m->size(), kMaxMessages, "messages");
  }
  for (size_t i = 0; i < m->size(); ++i) {
    const OJson& msg = (*m)[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return WrongType(field, "an object", msg);
    if (!msg.contains("role") || !msg["role"].is_string()) {
      return BadRequest("'" + field + ".role' must be a string", field + ".role");
    }
    const std::string role = msg["role"];
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool" && role != "function") {
      return BadRequest("'" + field +
                            ".role' must be system, developer, user, assistant, tool or function, "
                            "got '" + role + "'",
                        field + ".role");
    }
    MIMO_TRY(CheckLegacyFunctionMessage(msg, field, role));
    const bool has_calls = msg.contains("tool_calls") && !msg["tool_calls"].is_null();
    const bool has_legacy_call = msg.contains("function_call") && !msg["function_call"].is_null();
    if (!msg.contains("content") && !(role == "assistant" && (has_calls || has_legacy_call))) {
      return BadRequest("'" + field + ".content' is required", field + ".content");
    }
    if (msg.contains("content")) {
      MIMO_TRY(CheckContent(msg["content"], i, role == "assistant"));
    }
    if (has_calls) {
      if (role != "assistant") {
        return BadRequest("'" + field + ".tool_calls' is only allowed on assistant messages",
                          field + ".tool_calls");
      }
      if (!msg["tool_calls"].is_array()) {
        return WrongType(field + ".tool_calls", "an array", msg["tool_calls"]);
      }
      for (const OJson& c : msg["tool_calls"]) {
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
            !c["function"].contains("name") || !c["function"]["name"].is_string()) {
          return BadRequest("'" + field + ".tool_calls' entries need function.name",
                            field + ".tool_calls");
        }
      }
    }
    if (msg.contains("reasoning_content") && !msg["reasoning_content"].is_null() &&
        !msg["reasoning_content"].is_string()) {
      return WrongType(field + ".reasoning_content", "a string", msg["reasoning_content"]);
    }
  }
  *out = *m;
  LegacyFunctionMessagesAsTools(out);
  // Clients send assistant tool-call turns back with "content": null (OpenAI's own shape); the
  // templates expect a string.
  for (OJson& msg : *out) {
    if (!msg.contains("content") || msg["content"].is_null()) msg["content"] = "";
  }
  const Status st = ChatTemplate::ParseToolCallArguments(out, kMaxJsonDepth);
  if (!st.ok()) return BadRequest(st.message(), "messages");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> CheckTools(const OJson& body, ChatTurn* r) {
  const Fields f(body);
  if (const OJson* t = f.Get("tools")) {
    if (!t->is_array()) return WrongType("tools", "an array", *t);
    if (t->size() > static_cast<size_t>(kMaxTools)) {
      return TooMany("tools", t->size(), kMaxTools, "tools");
    }
    for (size_t i = 0; i < t->size(); ++i) {
      const OJson& tool = (*t)[i];
      const std::string field = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object() ||
          !tool["function"].contains("name") || !tool["function"]["name"].is_string()) {
        return BadRequest("'" + field + "' must be {\"type\": \"function\", \"function\": {\"name\", ...}}",
                          field);
      }
      if (tool.contains("type") && tool["type"] != "function") {
        return BadRequest("'" + field + ".type' must be \"function\"", field + ".type");
      }
    }
    if (!t->empty()) r->tools = *t;
  }
  MIMO_TRY(f.Bool("parallel_tool_calls", &r->parallel_tool_calls));
  const OJson* tc = f.Get("tool_choice");
  if (!tc) {
    r->tool_choice = r->tools.is_null() ? "none" : "auto";
    return std::nullopt;
  }
  if (tc->is_string()) {
    const std::string c = *tc;
    if (c != "none" && c != "auto" && c != "required") {
      return BadRequest("'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                        "\"function\": {\"name\"}}, got '" + c + "'",
                        "tool_choice");
    }
    r->tool_choice = c;
  } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
             (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
    r->tool_choice = "function";
    r->tool_choice_function = (*tc)["function"]["name"];
  } else {
    return BadRequest("'tool_choice' must be none, auto, required or {\"type\": \"function\", "
                      "\"function\": {\"name\"}}",
                      "tool_choice");
  }
  if (r->tool_choice != "none" && r->tools.is_null()) {
    return BadRequest("'tool_choice' " + r->tool_choice + " needs 'tools'", "tool_choice");
  }
  if (r->tool_choice == "function") {
    bool found = false;
    for (const OJson& tool : r->tools) found |= tool["function"]["name"] == r->tool_choice_function;
    if (!found) {
      return BadRequest("'tool_choice' names function '" + r->tool_choice_function +
                            "', which is not in 'tools'",
                        "tool_choice");
    }
  }
  return std::nullopt;
}

namespace {

// Legacy function calling: `functions` [{name, description, parameters}] and `function_call`
// none | auto | {name}, checked with their own names and read as tools with tool_choice (one
// call at most: the legacy answer has room for one). Mixing them with tools is refused.
std::optional<ApiError> CheckLegacyFunctions(const OJson& body, ChatRequest* r) {
  const Fields f(body);
  const OJson* fns = f.Get("functions");
  const OJson* fc = f.Get("function_call");
  if (!fns && !fc) return CheckTools(body, &r->turn);
  for (const char* k : {"tools", "tool_choice", "parallel_tool_calls"}) {
    if (f.Get(k)) {
      const char* legacy = fns ? "functions" : "function_call";
      return BadRequest(std::string("'") + k + "' and '" + legacy +
                            "' cannot be used together: give tools and tool_choice, or the legacy "
                            "functions and function_call",
                        legacy);
    }
  }
  if (fc && !fns) return BadRequest("'function_call' needs 'functions'", "function_call");
  if (!fns->is_array()) return WrongType("functions", "an array", *fns);
  if (fns->size() > static_cast<size_t>(kMaxTools)) {
    return TooMany("functions", fns->size(), kMaxTools, "functions");
  }
  OJson as_tools = {{"tools", OJson::array()}, {"parallel_tool_calls", false}};
  for (size_t i = 0; i < fns->size(); ++i) {
    const OJson& fn = (*fns)[i];
    const std::string field = "functions[" + std::to_string(i) + "]";
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) {
      return BadRequest("'" + field + "' must be {\"name\", \"description\", \"parameters\"}",
                        field);
    }
    as_tools["tools"].push_back({{"type", "function"}, {"function", fn}});
  }
  if (fc) {
    if (fc->is_string() && (*fc == "none" || *fc == "auto")) {
      as_tools["tool_choice"] = *fc;
    } else if (fc->is_object() && fc->contains("name") && (*fc)["name"].is_string()) {
      bool found = false;
      for (const OJson& fn : *fns) found |= fn["name"] == (*fc)["name"];
      if (!found) {
        return BadRequest("'function_call' names function '" + (*fc)["name"].get<std::string>() +
                              "', which is not in 'functions'",
                          "function_call");
      }
      as_tools["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*fc)["name"]}}}};
    } else {
      return BadRequest("'function_call' must be none, auto or {\"name\"}", "function_call");
    }
  }
  r->legacy_functions = true;
  return CheckTools(as_tools, &r->turn);
}

// Fields of OpenAI's chat API this server cannot act on: refused by name rather than dropped,
// so a client does not wait for audio or search results that never come. (`prediction` is
// dropped: a predicted output only saves time, the answer is the same without it.)
std::optional<ApiError> CheckUnsupportedChatFields(const OJson& body) {
  const Fields f(body);
  if (f.Get("audio")) {
    return BadRequest("'audio' is not supported: this server outputs text only", "audio");
  }
  if (const OJson* m = f.Get("modalities")) {
    if (!m->is_array()) return WrongType("modalities", "an array of strings", *m);
    for (const OJson& x : *m) {
      if (!x.is_string()) return WrongType("modalities", "an array of strings", *m);
      if (x != "text") {
        return BadRequest("'modalities' holds '" + x.get<std::string>() +
                              "', which is not supported: this server outputs text only",
                          "modalities");
      }
    }
  }
  if (f.Get("web_search_options")) {
    return BadRequest(
        "'web_search_options' is not supported: this server has no web search; give the model "
        "a search tool in 'tools' instead",
        "web_search_options");
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseChatRequest(const OJson& body, const ServerDefaults& d,
                                         ChatRequest* r) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  ChatTurn& t = r->turn;
  MIMO_TRY(CheckModel(body, d));
  MIMO_TRY(CheckUnsupportedChatFields(body));
  MIMO_TRY(CheckMessages(body, &t.messages));
  MIMO_TRY(CheckLegacyFunctions(body, r));
  MIMO_TRY(ParseStreamOptions(body, &r->stream, &r->include_usage));
  MIMO_TRY(CheckResponseFormat(body, &t.response_format));
  if (const OJson* k = Fields(body).Get("chat_template_kwargs")) {
    if (!k->is_object()) return WrongType("chat_template_kwargs", "an object", *k);
    t.template_kwargs = *k;
  }
  // vLLM's switches: continue the final assistant message (an assistant prefill) instead of
  // opening a new turn; add_generation_prompt false with an assistant message last means the same.
  const Fields f(body);
  bool cont = false, gen_prompt = true;
  MIMO_TRY(f.Bool("continue_final_message", &cont));
  MIMO_TRY(f.Bool("add_generation_prompt", &gen_prompt));
  const bool last_is_assistant = t.messages.back().value("role", "") == "assistant";
  if (cont && gen_prompt && f.Get("add_generation_prompt")) {
    return BadRequest("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                      "continue_final_message");
  }
  if (cont && !last_is_assistant) {
    return BadRequest("'continue_final_message' needs an assistant message last",
                      "continue_final_message");
  }
  t.continue_final_message = cont || (!gen_prompt && last_is_assistant);
  t.add_generation_prompt = gen_prompt;
  return ParseGenerationFields(body, d, true, &t.gen);
}

std::optional<ApiError> ParseCompletionRequest(const OJson& body, const ServerDefaults& d,
                                               CompletionRequest* r) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  MIMO_TRY(CheckModel(body, d));
  const OJson* p = Fields(body).Get("prompt");
  if (!p) return BadRequest("'prompt' is required", "prompt");
  // Token ids: integers (else the shape is wrong) within the vocabulary (else a bad id).
  std::optional<ApiError> bad_id;
  auto ids_of = [&](const OJson& a, CompletionRequest::Prompt* out) -> bool {
    for (const OJson& x : a) {
      if (!x.is_number_integer()) return false;
      int32_t id = 0;
      if (!TokenIdOf(x, d.vocab_size, &id)) {
        bad_id = BadTokenId("prompt", x, d.vocab_size);
        return false;
      }
      out->ids.push_back(id);
    }
    out->is_ids = true;
    return true;
  };
  const char* want = "a string, an array of strings, an array of token ids or an array of such";
  if (p->is_string()) {
    r->prompts.push_back({p->get<std::string>(), {}, false});
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    CompletionRequest::Prompt one;
    if (!ids_of(*p, &one)) return bad_id ? *bad_id : WrongType("prompt", want, *p);
    r->prompts.push_back(std::move(one));
  } else if (p->is_array() && !p->empty()) {
    if (p->size() > static_cast<size_t>(kMaxCompletionPrompts)) {
      return TooMany("prompt", p->size(), kMaxCompletionPrompts, "prompts");
    }
    for (const OJson& x : *p) {
      CompletionRequest::Prompt one;
      if (x.is_string()) {
        one.text = x.get<std::string>();
      } else if (!x.is_array() || !ids_of(x, &one)) {
        return bad_id ? *bad_id : WrongType("prompt", want, *p);
      }
      r->prompts.push_back(std::move(one));
    }
  } else {
    return p->is_array() ? BadRequest("'prompt' must not be empty", "prompt")
                         : WrongType("prompt", want, *p);
  }
  for (const auto& one : r->prompts) {
    if (!one.is_ids && one.text.empty()) return BadRequest("'prompt' must not be empty", "prompt");
    if (one.is_ids && one.ids.empty()) return BadRequest("'prompt' must not be empty", "prompt");
  }
  MIMO_TRY(Fields(body).Bool("echo", &r->echo));
  if (const OJson* s = Fields(body).Get("suffix")) {
    (void)s;
    return BadRequest("'suffix' is not supported", "suffix");
  }
  MIMO_TRY(ParseStreamOptions(body, &r->stream, &r->include_usage));
  MIMO_TRY(CheckResponseFormat(body, &r->response_format));
  MIMO_TRY(ParseGenerationFields(body, d, false, &r->gen));
  MIMO_TRY(CheckChoiceCount(r->gen.n, static_cast<int64_t>(r->prompts.size())));
  // The engine computes log-probabilities of generated tokens only, not of the prompt's.
  if (r->echo && r->gen.sampling.logprobs >= 0) {
    return BadRequest(
        "'echo' with 'logprobs' is not supported: prompt log-probabilities are not "
        "computed",
        "echo");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseDetokenizeRequest(const OJson& body, const ServerDefaults& d,
                                               const std::function<bool(int32_t)>& known,
                                               std::vector<int32_t>* ids) {
  const OJson* t = Fields(body).Get("tokens");
  if (!t || !t->is_array()) {
    return BadRequest("'tokens' (an array of token ids) is required", "tokens");
  }
  ids->clear();
  ids->reserve(t->size());
  for (const OJson& x : *t) {
    int32_t id = 0;
    if (!TokenIdOf(x, d.vocab_size, &id) || (known && !known(id))) {
      return BadTokenId("tokens", x, d.vocab_size);
    }
    ids->push_back(id);
  }
  return std::nullopt;
}

}  // namespace mimo
