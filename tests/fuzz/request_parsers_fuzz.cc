// libFuzzer harness for the HTTP API's request parsers (src/server/request_json.h,
// openai_request.h, anthropic_request.h, responses_request.h); built and run by scripts/fuzz.sh.
// Input: byte 0 picks the endpoint, the rest is the request body. The body goes through
// ParseRequestBody (depth and size limits) and then the endpoint's pure parser: chat completions
// (and /tokenize with messages), completions, /detokenize, the shared sampling fields, tools,
// nested JSON text, /v1/messages, /v1/messages/count_tokens and /v1/responses. The Anthropic and
// Responses parsers get a ParseContext as the server builds it: thinking-block and reasoning-item
// signatures checked with the server's HMAC under a fixed key (seeds carry valid ones, so both the
// kept and the left-out paths run), and a ResponseStore holding two responses (resp_fuzz_1,
// resp_fuzz_2; their items have ids, for previous_response_id and item_reference). Checked:
// nothing crashes or throws; a parsed body is at most kMaxJsonDepth deep (so dumping and copying
// it is safe); an accepted request keeps every count and token id within the limits, its
// messages bounded by what was sent and dumpable, its tools within kMaxTools.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/base64.h"
#include "core/log.h"
#include "core/sha256.h"
#include "server/anthropic_request.h"
#include "server/openai_request.h"
#include "server/parse_context.h"
#include "server/request_json.h"
#include "server/response_store.h"
#include "server/responses_request.h"

namespace {

using mimo::OJson;

mimo::ServerDefaults Defaults() {
  mimo::ServerDefaults d;
  d.served_model_name = "mimo-v2-nano";
  d.max_model_len = 4096;
  d.vocab_size = 1000;
  return d;
}

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

int Depth(const OJson& j) {
  if (!j.is_structured()) return 0;
  int deepest = 0;
  for (const auto& v : j) deepest = std::max(deepest, Depth(v));
  return deepest + 1;
}

void CheckGen(const mimo::GenerationRequest& g, const mimo::ServerDefaults& d) {
  Check(g.n >= 1 && g.n <= mimo::kMaxN);
  Check(g.stop.stop.size() <= static_cast<size_t>(mimo::kMaxStopStrings));
  for (const auto& s : g.stop.stop) Check(!s.empty() && s.size() <= mimo::kMaxStopStringBytes);
  Check(g.stop.stop_token_ids.size() <= static_cast<size_t>(mimo::kMaxStopTokenIds));
  for (int32_t id : g.stop.stop_token_ids) Check(id >= 0 && id < d.vocab_size);
  Check(g.sampling.logit_bias.size() <= static_cast<size_t>(mimo::kMaxLogitBias));
  for (const auto& [id, bias] : g.sampling.logit_bias) Check(id >= 0 && id < d.vocab_size);
  Check(g.sampling.logprobs >= -1 && g.sampling.logprobs <= mimo::kMaxLogprobs);
}

// ApiServer::Sign with a fixed key (tests/fuzz/corpus/request_parsers/ seeds are signed so).
constexpr char kSigningKey[] = "mimo-fuzz-signing-key";
std::string Sign(std::string_view kind, std::string_view text) {
  std::string msg(kind);
  msg += '\0';
  msg += text;
  const mimo::Sha256Digest d = mimo::HmacSha256(kSigningKey, msg);
  return mimo::Base64Encode(std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}
bool Verify(std::string_view kind, std::string_view text, std::string_view signature) {
  return mimo::ConstantTimeEquals(Sign(kind, text), signature);
}

// Two stored responses, as the server stores them: a reasoning item and a function call, then the
// answer after the call's output.
const mimo::ResponseStore& Store() {
  static const mimo::ResponseStore* store = [] {
    auto* s = new mimo::ResponseStore(16, size_t{1} << 20);
    const OJson call = {{"id", "call_fuzz_1"},
                        {"type", "function"},
                        {"function", {{"name", "shell"}, {"arguments", {{"command", {"ls"}}}}}}};
    const OJson turn1 = OJson::array({{{"role", "user"}, {"content", "List the files."}},
                                      {{"role", "assistant"},
                                       {"content", ""},
                                       {"reasoning_content", "The user wants a listing."},
                                       {"tool_calls", OJson::array({call})}}});
    s->Put(
        "resp_fuzz_1",
        {{{"id", "resp_fuzz_1"},
          {"object", "response"},
          {"status", "completed"},
          {"output",
           OJson::array({{{"type", "reasoning"},
                          {"id", "rs_fuzz_1"},
                          {"summary", OJson::array()},
                          {"content", OJson::array({{{"type", "reasoning_text"},
                                                     {"text", "The user wants a listing."}}})},
                          {"status", "completed"}},
                         {{"type", "function_call"},
                          {"id", "fc_fuzz_1"},
                          {"call_id", "call_fuzz_1"},
                          {"name", "shell"},
                          {"arguments", "{\"command\":[\"ls\"]}"},
                          {"status", "completed"}}})}},
         OJson::array({{{"type", "message"},
                        {"id", "msg_fuzz_in1"},
                        {"role", "user"},
                        {"content",
                         OJson::array({{{"type", "input_text"}, {"text", "List the files."}}})}}}),
         turn1});
    OJson turn2 = turn1;
    turn2.push_back({{"role", "tool"}, {"tool_call_id", "call_fuzz_1"}, {"content", "a.txt"}});
    turn2.push_back({{"role", "assistant"}, {"content", "One file: a.txt."}});
    s->Put("resp_fuzz_2",
           {{{"id", "resp_fuzz_2"},
             {"object", "response"},
             {"status", "completed"},
             {"previous_response_id", "resp_fuzz_1"},
             {"output",
              OJson::array({{{"type", "message"},
                             {"id", "msg_fuzz_2"},
                             {"role", "assistant"},
                             {"status", "completed"},
                             {"content", OJson::array({{{"type", "output_text"},
                                                        {"text", "One file: a.txt."},
                                                        {"annotations", OJson::array()}}})}}})}},
            OJson::array({{{"type", "function_call_output"},
                           {"id", "fco_fuzz_in2"},
                           {"call_id", "call_fuzz_1"},
                           {"output", "a.txt"}}}),
            std::move(turn2)});
    return s;
  }();
  return *store;
}

// Messages a chat-shaped parser produced: OpenAI-style, every content a string, every tool call's
// arguments an object; dumpable (strictly: the text came from the body or verified signatures).
void CheckMessages(const OJson& msgs, size_t bound) {
  Check(msgs.is_array() && !msgs.empty());
  Check(msgs.size() <= bound);
  for (const OJson& m : msgs) {
    Check(m.is_object() && m.contains("role") && m["role"].is_string());
    const std::string role = m["role"];
    Check(role == "system" || role == "user" || role == "assistant" || role == "tool");
    Check(m.contains("content") && m["content"].is_string());
    if (m.contains("tool_calls")) {
      Check(role == "assistant" && m["tool_calls"].is_array());
      for (const OJson& c : m["tool_calls"]) {
        Check(c.is_object() && c.contains("function") && c["function"].is_object());
        Check(c["function"].contains("arguments") && c["function"]["arguments"].is_object());
      }
    }
  }
  // Tool-call arguments and schemas are copied from the body a few levels lower at most.
  Check(Depth(msgs) <= mimo::kMaxJsonDepth + 4);
  (void)msgs.dump();
}

void CheckTurnTools(const mimo::ChatTurn& t) {
  Check(t.tools.is_null() || (t.tools.is_array() && !t.tools.empty() &&
                              t.tools.size() <= static_cast<size_t>(mimo::kMaxTools)));
  (void)t.tools.dump();
  (void)t.response_format.dump();
  (void)t.template_kwargs.dump();
}

void FuzzMessages(const OJson& body, const mimo::ServerDefaults& d, bool for_count) {
  const mimo::ParseContext ctx{d, Verify, nullptr};
  mimo::AnthropicRequest r;
  if (mimo::ParseAnthropicRequest(ctx, body, for_count, &r)) return;
  const mimo::ChatTurn& t = r.turn;
  if (!for_count) CheckGen(t.gen, d);
  if (for_count) Check(!r.stream);
  // One message per message sent (a tool_result block is one each), plus the top-level system.
  size_t bound = 1;
  for (const OJson& m : body["messages"]) {
    const OJson& c = m["content"];
    bound += c.is_array() ? std::max<size_t>(1, c.size()) : 1;
  }
  CheckMessages(t.messages, bound);
  CheckTurnTools(t);
  Check(t.template_kwargs == OJson{{"enable_thinking", r.thinking}});
  Check(r.thinking || (!r.omit_thinking && t.reasoning_budget == -1));
  if (t.reasoning_budget != -1) {
    Check(t.reasoning_budget >= 1);
    Check(t.gen.stop.max_tokens <= 0 || t.reasoning_budget < t.gen.stop.max_tokens);
  }
  if (t.continue_final_message) {
    const OJson& last = t.messages.back();
    Check(last["role"] == "assistant" && !last.contains("tool_calls"));
  }
}

void FuzzResponses(const OJson& body, const mimo::ServerDefaults& d) {
  const mimo::ResponseStore& store = Store();
  const mimo::ParseContext ctx{d, Verify, &store};
  mimo::ResponsesRequest r;
  if (mimo::ParseResponsesRequest(ctx, body, &r)) return;
  const mimo::ChatTurn& t = r.turn;
  CheckGen(t.gen, d);
  size_t bound = 1;  // instructions
  if (!r.previous_response_id.empty()) {
    const auto prev = store.Get(r.previous_response_id);
    Check(prev.has_value());
    bound += prev->messages.size();
  }
  const OJson& input = body.contains("input") ? body["input"] : OJson();
  bound += input.is_array() ? input.size() : 1;  // at most one message per item
  CheckMessages(t.messages, bound);
  CheckTurnTools(t);
  Check(r.history.is_array() && r.history.size() <= bound);
  Check(r.input_items.is_array());
  for (const OJson& item : r.input_items) Check(!item.is_object() || item.contains("id"));
  Check(r.echo.is_object());
  (void)r.echo.dump();
  (void)r.input_items.dump();
  static const std::set<int> kBudgets = {-1, 256, 1024, 4096, 16384};
  Check(kBudgets.count(t.reasoning_budget) == 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {  // unverified signatures are logged as warnings
    mimo::SetLogLevel(mimo::LogLevel::kError);
    return true;
  }();
  (void)quiet;
  if (size < 1) return 0;
  const uint8_t which = data[0] % 9;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  OJson body;
  if (mimo::ParseRequestBody(text, &body)) return 0;
  Check(body.is_object());
  Check(Depth(body) <= mimo::kMaxJsonDepth);
  (void)body.dump();  // recursive: bounded by the depth limit
  const mimo::ServerDefaults d = Defaults();
  switch (which) {
    case 0: {  // /v1/chat/completions (and /tokenize with messages)
      mimo::ChatRequest r;
      if (!mimo::ParseChatRequest(body, d, &r)) {
        CheckGen(r.turn.gen, d);
        Check(r.turn.messages.is_array() && !r.turn.messages.empty());
        Check(r.turn.messages.size() <= static_cast<size_t>(mimo::kMaxMessages));
        Check(r.turn.tools.is_null() ||
              r.turn.tools.size() <= static_cast<size_t>(mimo::kMaxTools));
        (void)r.turn.messages.dump();  // tool-call arguments parsed: still bounded
      }
      break;
    }
    case 1: {  // /v1/completions
      mimo::CompletionRequest r;
      if (!mimo::ParseCompletionRequest(body, d, &r)) {
        CheckGen(r.gen, d);
        Check(!r.prompts.empty());
        Check(r.prompts.size() <= static_cast<size_t>(mimo::kMaxCompletionPrompts));
        Check(r.prompts.size() * static_cast<size_t>(r.gen.n) <=
              static_cast<size_t>(mimo::kMaxCompletionChoices));
        for (const auto& p : r.prompts)
          for (int32_t id : p.ids) Check(id >= 0 && id < d.vocab_size);
      }
      break;
    }
    case 2: {  // /detokenize
      std::vector<int32_t> ids;
      if (!mimo::ParseDetokenizeRequest(body, d, nullptr, &ids)) {
        for (int32_t id : ids) Check(id >= 0 && id < d.vocab_size);
      }
      break;
    }
    case 3: {  // the shared sampling fields (Anthropic and Responses map theirs onto them)
      mimo::GenerationRequest g;
      if (!mimo::ParseGenerationFields(body, d, /*chat=*/true, &g)) CheckGen(g, d);
      mimo::GenerationRequest g2;
      if (!mimo::ParseGenerationFields(body, d, /*chat=*/false, &g2)) CheckGen(g2, d);
      break;
    }
    case 4: {  // tools and tool_choice (every protocol's tools end here)
      mimo::ChatTurn t;
      if (!mimo::CheckTools(body, &t)) {
        Check(t.tools.is_null() || t.tools.size() <= static_cast<size_t>(mimo::kMaxTools));
      }
      break;
    }
    case 5: {  // nested JSON text (tool-call arguments) inside a string field
      for (const auto& [k, v] : body.items()) {
        if (!v.is_string()) continue;
        const OJson j = mimo::ParseNestedJson(v.get<std::string>());
        if (!j.is_discarded()) Check(Depth(j) <= mimo::kMaxJsonDepth);
      }
      break;
    }
    case 6:  // /v1/messages
      FuzzMessages(body, d, /*for_count=*/false);
      break;
    case 7:  // /v1/messages/count_tokens
      FuzzMessages(body, d, /*for_count=*/true);
      break;
    default:  // /v1/responses
      FuzzResponses(body, d);
      break;
  }
  return 0;
}
