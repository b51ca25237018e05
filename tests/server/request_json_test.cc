// The request-body limits: the iterative depth scan (strings, escapes, unbalanced input, the
// exact limit), ParseRequestBody's answers, and the count and token-id bounds of the OpenAI
// request parsers.
#include "server/request_json.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/json_depth.h"
#include "server/anthropic_request.h"
#include "server/openai_request.h"

namespace mimo {
namespace {

std::string Nested(int levels, const std::string& inner = "1") {
  return std::string(levels, '[') + inner + std::string(levels, ']');
}

TEST(JsonNestingDepth, CountsBracketsAndBraces) {
  EXPECT_EQ(JsonNestingDepth("1"), 0);
  EXPECT_EQ(JsonNestingDepth("[]"), 1);
  EXPECT_EQ(JsonNestingDepth("{\"a\": [1, {\"b\": []}]}"), 4);
  EXPECT_EQ(JsonNestingDepth("[[]] [[[]]]"), 3);  // the deepest, not the sum
  EXPECT_EQ(JsonNestingDepth(Nested(1000)), 1000);
}

TEST(JsonNestingDepth, IgnoresBracketsInsideStrings) {
  EXPECT_EQ(JsonNestingDepth("[\"[[[[{{{{\"]"), 1);
  EXPECT_EQ(JsonNestingDepth("{\"}}}\": \"]]]\"}"), 1);
  // An escaped quote does not end the string; an escaped backslash before a quote does.
  EXPECT_EQ(JsonNestingDepth(R"(["a\"[[[["])"), 1);
  EXPECT_EQ(JsonNestingDepth(R"(["a\\", [[1]]])"), 3);
  EXPECT_EQ(JsonNestingDepth(R"(["\\\"[[", [1]])"), 2);
}

TEST(JsonNestingDepth, UnbalancedInputStillMeasured) {
  EXPECT_EQ(JsonNestingDepth("[[[["), 4);  // never closed
  EXPECT_EQ(JsonNestingDepth("]]]]"), 0);  // closed below zero: ignored
  EXPECT_EQ(JsonNestingDepth("]]][[["), 3);
  EXPECT_EQ(JsonNestingDepth("[\"[[[[["), 1);  // an unterminated string hides the rest
  EXPECT_EQ(JsonNestingDepth(""), 0);
}

TEST(JsonNestingDepth, StopsOnceTheLimitIsPassed) {
  EXPECT_EQ(JsonNestingDepth(Nested(100000), 128), 129);
  EXPECT_TRUE(JsonNestsDeeperThan(Nested(129), 128));
  EXPECT_FALSE(JsonNestsDeeperThan(Nested(128), 128));
}

TEST(ParseRequestBody, ExactlyTheDepthLimitParses) {
  // {"a": [[...]]}: the object is one level.
  const std::string ok = "{\"a\": " + Nested(kMaxJsonDepth - 1) + "}";
  OJson body;
  EXPECT_FALSE(ParseRequestBody(ok, &body));
  ASSERT_TRUE(body.is_object());
  const OJson* v = &body["a"];
  int depth = 1;
  while (v->is_array()) {
    ++depth;
    v = &(*v)[0];
  }
  EXPECT_EQ(depth, kMaxJsonDepth);
  EXPECT_EQ(*v, 1);
}

TEST(ParseRequestBody, OneLevelMoreIsRefusedNamingTheLimit) {
  const std::string deep = "{\"a\": " + Nested(kMaxJsonDepth) + "}";
  OJson body;
  auto e = ParseRequestBody(deep, &body);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_NE(e->message.find("nested deeper than 128 levels"), std::string::npos) << e->message;
}

TEST(ParseRequestBody, HugeNestingIsRefusedWithoutParsing) {
  // 50k levels would overflow the stack in a recursive copy or dump; it never gets that far.
  const std::string deep = "{\"messages\": [{\"content\": " + Nested(50000) + "}]}";
  OJson body;
  auto e = ParseRequestBody(deep, &body);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("nested deeper"), std::string::npos);
  // Brackets inside a string are text, not nesting.
  const std::string text = "{\"prompt\": \"" + std::string(50000, '[') + "\"}";
  EXPECT_FALSE(ParseRequestBody(text, &body));
  EXPECT_EQ(body["prompt"].get<std::string>().size(), 50000u);
}

TEST(ParseRequestBody, KeepsTheExistingMessages) {
  OJson body;
  auto e = ParseRequestBody("  \r\n", &body);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "the request body is empty: send a JSON object");
  e = ParseRequestBody("{\"a\": ", &body);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "the request body is not valid JSON");
  e = ParseRequestBody("]]]]", &body);  // unbalanced: measured, then refused by the parser
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "the request body is not valid JSON");
  e = ParseRequestBody("[1, 2]", &body);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "the request body must be a JSON object");
}

TEST(MeasureJson, ValuesAreBoundedFromAbove) {
  // Every value is the document, the first in a container or after a comma.
  EXPECT_EQ(MeasureJson("1", 128, 100).values, 1);
  EXPECT_EQ(MeasureJson("[1,2,3]", 128, 100).values, 4);
  EXPECT_EQ(MeasureJson(R"({"a":1,"b":[2,"x,y"]})", 128, 100).values, 5);  // commas in strings: no
  std::string many = "[";
  for (int i = 0; i < 1000; ++i) many += "{},";
  many += "{}]";
  EXPECT_GE(MeasureJson(many, 128, 1 << 20).values, 1002);
  EXPECT_EQ(MeasureJson(many, 128, 100).values, 101);  // the scan stops past the bound
}

// 60 MiB of "{}," in an ignored field used to become 22M values (1.45 GB, 10 s): refused by
// the scan, before anything is built.
TEST(ParseRequestBody, MoreValuesThanTheBudgetAreRefusedUnbuilt) {
  std::string body = R"({"messages": [], "junk": [)";
  body.reserve(body.size() + 3 * (kMaxJsonValues + 1));
  for (int64_t i = 0; i <= kMaxJsonValues; ++i) body += "{},";
  body += "{}]}";
  OJson out;
  auto e = ParseRequestBody(body, &out, RequestKind::kChatCompletions);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_NE(e->message.find("more than 2097152 JSON values"), std::string::npos) << e->message;
  EXPECT_TRUE(out.is_null());  // nothing was parsed
}

TEST(ParseRequestBody, UnknownTopLevelFieldsAreSkipped) {
  const std::string body =
      R"({"messages": [{"role": "user", "content": "hi"}], "junk": {"a": [1, {"b": "c"}]},
          "temperature": 0.5, "metadata": {"k": "v"}, "x-extra": "y"})";
  OJson out;
  ASSERT_FALSE(ParseRequestBody(body, &out, RequestKind::kChatCompletions));
  EXPECT_FALSE(out.contains("junk"));
  EXPECT_FALSE(out.contains("x-extra"));
  EXPECT_EQ(out["temperature"], 0.5);
  EXPECT_EQ(out["metadata"]["k"], "v");
  EXPECT_EQ(out["messages"][0]["content"], "hi");
  // Nested objects keep all their fields; only the top level is filtered.
  ASSERT_FALSE(ParseRequestBody(R"({"tools": [{"type": "function", "junk": 1}]})", &out,
                                RequestKind::kChatCompletions));
  EXPECT_EQ(out["tools"][0]["junk"], 1);
  // kAny keeps everything; each API keeps its own fields.
  ASSERT_FALSE(ParseRequestBody(body, &out));
  EXPECT_TRUE(out.contains("junk"));
  ASSERT_FALSE(ParseRequestBody(R"({"system": "s", "max_tokens": 5, "stop_sequences": [],
                                    "messages": [], "temperature": 1})",
                                &out, RequestKind::kMessages));
  EXPECT_EQ(out.size(), 5u);
  ASSERT_FALSE(ParseRequestBody(R"({"tokens": [1], "prompt": "p"})", &out, RequestKind::kDetokenize));
  EXPECT_EQ(out.size(), 1u);
}

// What real agents send reaches the parsers: every top-level field of the recorded Claude Code,
// Codex and opencode requests that an API documents is kept (Codex's client_metadata, which no
// API has, is the one dropped).
TEST(ParseRequestBody, RecordedAgentRequestsKeepTheirFields) {
  namespace fs = std::filesystem;
  int checked = 0;
  for (const auto& e : fs::directory_iterator(fs::path(MIMO_SOURCE_DIR) / "tests/data/agents")) {
    if (e.path().extension() != ".json") continue;
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    const OJson rec = OJson::parse(ss.str());
    const std::string path = rec["path"];
    const OJson& b = rec["body"];
    const std::string text = b.is_string() ? b.get<std::string>() : b.dump();
    const RequestKind kind = path.rfind("/v1/messages", 0) == 0 ? RequestKind::kMessages
                             : path == "/v1/responses"          ? RequestKind::kResponses
                                                                : RequestKind::kChatCompletions;
    OJson out;
    ASSERT_FALSE(ParseRequestBody(text, &out, kind)) << e.path();
    const OJson whole = OJson::parse(text);
    for (auto it = whole.begin(); it != whole.end(); ++it) {
      if (it.key() == "client_metadata") {
        EXPECT_FALSE(out.contains(it.key()));
        continue;
      }
      EXPECT_TRUE(out.contains(it.key())) << e.path() << ": " << it.key();
      EXPECT_EQ(out[it.key()], it.value()) << e.path() << ": " << it.key();
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

TEST(ParseNestedJson, DiscardsTextNestedTooDeep) {
  EXPECT_TRUE(ParseNestedJson(Nested(kMaxJsonDepth + 1)).is_discarded());
  EXPECT_EQ(ParseNestedJson("{\"a\": 1}")["a"], 1);
}

ServerDefaults Defaults() {
  ServerDefaults d;
  d.served_model_name = "m";
  d.max_model_len = 4096;
  d.vocab_size = 1000;
  return d;
}

std::optional<ApiError> Completion(const std::string& text) {
  OJson body;
  if (auto e = ParseRequestBody(text, &body)) return e;
  CompletionRequest r;
  return ParseCompletionRequest(body, Defaults(), &r);
}

std::optional<ApiError> Chat(const std::string& extra) {
  OJson body;
  const std::string text = R"({"messages": [{"role": "user", "content": "hi"}])" + extra + "}";
  if (auto e = ParseRequestBody(text, &body)) return e;
  ChatRequest r;
  return ParseChatRequest(body, Defaults(), &r);
}

TEST(RequestLimits, NIsBoundedBeforeAnythingIsSized) {
  EXPECT_FALSE(Chat(", \"n\": 128"));
  for (const char* n : {"0", "129", "2147483647"}) {
    auto e = Chat(std::string(", \"n\": ") + n);
    ASSERT_TRUE(e) << n;
    EXPECT_EQ(e->param, "n");
    EXPECT_NE(e->message.find("[1, 128]"), std::string::npos) << e->message;
  }
  auto e = Chat(", \"best_of\": 1000");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "best_of");
}

TEST(RequestLimits, CompletionChoicesArePromptsTimesN) {
  std::string prompts = "[";
  for (int i = 0; i < 16; ++i) prompts += std::string(i ? "," : "") + "\"p\"";
  prompts += "]";
  EXPECT_FALSE(Completion("{\"prompt\": " + prompts + ", \"n\": 64}"));  // 1024
  auto e = Completion("{\"prompt\": " + prompts + ", \"n\": 65}");       // 1040
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "n");
  EXPECT_NE(e->message.find("1024"), std::string::npos) << e->message;
  std::string many = "[\"p\"";
  for (int i = 0; i < 1024; ++i) many += ",\"p\"";
  e = Completion("{\"prompt\": " + many + "]}");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");
}

TEST(RequestLimits, TokenIdsAreCheckedAs64BitValues) {
  // 4294967301 = 2^32 + 5: an int32_t read wraps it to 5.
  auto e = Completion(R"({"prompt": [1, 2, 4294967301]})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");
  EXPECT_NE(e->message.find("4294967301"), std::string::npos) << e->message;
  e = Completion(R"({"prompt": [[1], [18446744073709551615]]})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");
  e = Completion(R"({"prompt": [-1]})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");
  EXPECT_FALSE(Completion(R"({"prompt": [0, 999]})"));
  e = Chat(R"(, "logit_bias": {"4294967301": 5})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "logit_bias");
  e = Chat(R"(, "logit_bias": {"+5": 5})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "logit_bias");
  EXPECT_FALSE(Chat(R"(, "logit_bias": {"5": 5})"));
  e = Chat(R"(, "stop_token_ids": [4294967301])");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "stop_token_ids");
  std::vector<int32_t> ids;
  OJson body = OJson::parse(R"({"tokens": [1, 4294967297]})");
  e = ParseDetokenizeRequest(body, Defaults(), nullptr, &ids);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tokens");
  body = OJson::parse(R"({"tokens": [1, 2]})");
  EXPECT_FALSE(ParseDetokenizeRequest(body, Defaults(), nullptr, &ids));
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
}

// Issue 44: integers above INT64_MAX arrive as unsigned JSON numbers; read as int64 they wrapped
// (top_k 2^64 - 1 became -1, "no top-k", and the request was served). Every integer field is a
// 400 naming itself when it does not fit its range, whichever API carries it.
TEST(RequestLimits, IntegersAboveInt64MaxAreRefusedNotWrapped) {
  const std::string huge = "18446744073709551615";  // 2^64 - 1
  for (const char* field : {"top_k", "n", "best_of", "max_tokens", "max_completion_tokens",
                            "min_tokens", "seed"}) {
    auto e = Chat(std::string(", \"") + field + "\": " + huge);
    ASSERT_TRUE(e) << field;
    EXPECT_EQ(e->param, field);
    EXPECT_NE(e->message.find(huge), std::string::npos) << e->message;
  }
  auto e = Chat(", \"top_k\": " + huge);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "'top_k' must be an integer in [-2147483648, 2147483647], got " + huge);
  e = Chat(", \"logprobs\": true, \"top_logprobs\": " + huge);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "top_logprobs");
  e = Completion(R"({"prompt": "p", "logprobs": )" + huge + "}");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "logprobs");
  EXPECT_NE(e->message.find("[0, 20]"), std::string::npos) << e->message;
  // 2^63 (the first value int64 cannot hold) and values past 2^31 read into an int.
  e = Chat(R"(, "seed": 9223372036854775808)");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "seed");
  e = Chat(R"(, "top_k": 4294967296)");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "top_k");
  // In range they pass: a negative seed (vLLM takes int64 seeds), top_k -1 (off), INT64_MAX seed.
  EXPECT_FALSE(Chat(R"(, "seed": -5, "top_k": -1)"));
  EXPECT_FALSE(Chat(R"(, "seed": 9223372036854775807, "top_k": 40)"));
}

TEST(RequestLimits, AnthropicIntegersAreRefusedNotWrapped) {
  const ServerDefaults d = Defaults();
  const ParseContext ctx{d, nullptr, nullptr};
  const std::string huge = "18446744073709551615";
  for (const std::string& extra :
       {R"("top_k": )" + huge, R"("max_tokens": )" + huge,
        R"("thinking": {"type": "enabled", "budget_tokens": )" + huge + "}"}) {
    OJson body;
    const std::string text =
        R"({"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], )" + extra + "}";
    ASSERT_FALSE(ParseRequestBody(text, &body)) << text;
    AnthropicRequest r;
    auto e = ParseAnthropicRequest(ctx, body, false, &r);
    ASSERT_TRUE(e) << extra;
    EXPECT_NE(e->message.find(huge), std::string::npos) << extra << " -> " << e->message;
  }
}

TEST(RequestLimits, ListsAreBounded) {
  std::string stops = "[\"a\"";
  for (int i = 1; i < 65; ++i) stops += ",\"s" + std::to_string(i) + "\"";
  auto e = Chat(", \"stop\": " + stops + "]");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "stop");
  EXPECT_NE(e->message.find("64"), std::string::npos) << e->message;
  e = Chat(", \"stop\": \"" + std::string(5000, 'x') + "\"");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "stop");
  std::string tools = "[";
  for (int i = 0; i <= kMaxTools; ++i) {
    tools += std::string(i ? "," : "") + R"({"type": "function", "function": {"name": "f"}})";
  }
  e = Chat(", \"tools\": " + tools + "]");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools");
  e = Chat(", \"logprobs\": true, \"top_logprobs\": 21");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "top_logprobs");
}

TEST(RequestLimits, DeepToolCallArgumentsAreRefused) {
  const std::string args = Nested(kMaxJsonDepth + 1);
  auto e = Chat(
      R"(, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ")" +
      args + R"("}}]}])");
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("nested deeper than 128 levels"), std::string::npos) << e->message;
}

}  // namespace
}  // namespace mimo
