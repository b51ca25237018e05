// The request converters' sections (openai_request.cc, responses_request.cc,
// anthropic_request.cc): fields are read in a fixed order, so a body with several bad fields is
// refused naming the first one; Responses input items gather into assistant turns as the chat
// template renders them; Anthropic blocks become the messages they stand for.
#include <gtest/gtest.h>

#include <string>

#include "io/generation_config.h"
#include "server/anthropic_request.h"
#include "server/openai_request.h"
#include "server/request_json.h"
#include "server/responses_request.h"

namespace mimo {
namespace {

ServerDefaults Defaults() {
  ServerDefaults d;
  d.served_model_name = "m";
  d.max_model_len = 4096;
  d.vocab_size = 1000;
  return d;
}

OJson Body(const std::string& text) {
  OJson body;
  EXPECT_FALSE(ParseRequestBody(text, &body)) << text;
  return body;
}

std::string GenerationParam(const std::string& text) {
  GenerationRequest g;
  const auto e = ParseGenerationFields(Body(text), Defaults(), true, &g);
  return e ? e->param : "";
}

TEST(RequestParsers, GenerationFieldsNameTheFirstBadFieldInReadingOrder) {
  // sampling, counts, length rules, stop strings, stop token ids, logit_bias, logprobs.
  EXPECT_EQ(GenerationParam(R"({"n": 0, "temperature": "hot"})"), "temperature");
  EXPECT_EQ(GenerationParam(R"({"stop": 5, "seed": 1.5})"), "seed");
  EXPECT_EQ(GenerationParam(R"({"max_tokens": 0, "best_of": 0})"), "best_of");
  EXPECT_EQ(GenerationParam(R"({"stop": 5, "min_tokens": "x"})"), "min_tokens");
  EXPECT_EQ(GenerationParam(R"({"stop_token_ids": "x", "stop": [""]})"), "stop");
  EXPECT_EQ(GenerationParam(R"({"logit_bias": [], "stop_token_ids": [5000]})"),
            "stop_token_ids");
  EXPECT_EQ(GenerationParam(R"({"top_logprobs": 2, "logit_bias": {"x": 1}})"), "logit_bias");
  EXPECT_EQ(GenerationParam(R"({"top_logprobs": 2})"), "top_logprobs");
  EXPECT_EQ(GenerationParam(R"({"temperature": 0.5, "max_completion_tokens": 8})"), "");
}

std::optional<ApiError> Responses(const std::string& text, ResponsesRequest* r) {
  const ServerDefaults d = Defaults();
  const ParseContext ctx{d, nullptr, nullptr};
  return ParseResponsesRequest(ctx, Body(text), r);
}

TEST(RequestParsers, ResponsesSectionsAreReadInOrder) {
  // switches, sampling, conversation, tools, text.format, reasoning.
  const std::pair<const char*, const char*> cases[] = {
      {R"({"store": 1, "max_output_tokens": 0, "input": "hi"})", "store"},
      {R"({"max_output_tokens": 0, "input": 5})", "max_output_tokens"},
      {R"({"input": 5, "tools": 5})", "input"},
      {R"({"input": "hi", "tools": [{"type": "file_search"}], "tool_choice": 5})",
       "tools[0].type"},
      {R"({"input": "hi", "tool_choice": 5, "text": 5})", "tool_choice"},
      {R"({"input": "hi", "text": 5, "reasoning": 5})", "text"},
      {R"({"input": "hi", "reasoning": {"effort": "x"}, "chat_template_kwargs": 5})",
       "reasoning.effort"},
      {R"({"input": [{"type": "message", "role": "user", "content": 5},
                     {"type": "bogus"}]})",
       "input[0].content"},
  };
  for (const auto& [text, param] : cases) {
    ResponsesRequest r;
    const auto e = Responses(text, &r);
    ASSERT_TRUE(e) << text;
    EXPECT_EQ(e->param, param) << text << " -> " << e->message;
  }
}

TEST(RequestParsers, ResponsesJsonSchemaNameMustBeAString) {
  ResponsesRequest r;
  auto e = Responses(
      R"({"input": "hi", "text": {"format": {"type": "json_schema", "name": 5, "schema": {}}}})",
      &r);
  ASSERT_TRUE(e);  // was an exception (a 500) reading the name as a string
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "text.format.name");
  for (const char* name : {R"("name": null, )", ""}) {
    ResponsesRequest ok;
    e = Responses(std::string(R"({"input": "hi", "text": {"format": {"type": "json_schema", )") +
                      name + R"("schema": {}}}})",
                  &ok);
    ASSERT_FALSE(e) << e->message;
    EXPECT_EQ(ok.turn.response_format["json_schema"]["name"], "output");
  }
}

TEST(RequestParsers, ResponsesInputGathersAssistantTurns) {
  ResponsesRequest r;
  const auto e = Responses(R"({"input": [
      {"role": "user", "content": "hi"},
      {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "think"}]},
      {"type": "message", "role": "assistant", "content": "a"},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\": 1}"},
      {"type": "function_call_output", "call_id": "c1", "output": "1"},
      {"type": "message", "role": "assistant", "content": "b"},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "more"}]},
      {"type": "message", "role": "developer", "content": "late"}]})",
                           &r);
  ASSERT_FALSE(e) << e->message;
  const OJson& m = r.turn.messages;
  ASSERT_EQ(m.size(), 6u) << m.dump();
  EXPECT_EQ(m[0], (OJson{{"role", "user"}, {"content", "hi"}}));
  EXPECT_EQ(m[1]["content"], "a");
  EXPECT_EQ(m[1]["reasoning_content"], "think");
  ASSERT_EQ(m[1]["tool_calls"].size(), 1u);
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["arguments"], (OJson{{"x", 1}}));
  EXPECT_EQ(m[2], (OJson{{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "1"}}));
  EXPECT_EQ(m[3], (OJson{{"role", "assistant"}, {"content", "b"}}));
  // Reasoning after an assistant text opens the next turn.
  EXPECT_EQ(m[4], (OJson{{"role", "assistant"}, {"content", ""}, {"reasoning_content", "more"}}));
  EXPECT_EQ(m[5], (OJson{{"role", "system"}, {"content", "late"}}));
  ASSERT_EQ(r.input_items.size(), 8u);
  EXPECT_EQ(r.input_items[0]["type"], "message");  // listed as one
}

TEST(RequestParsers, AnthropicBlocksBecomeTheirMessages) {
  const ServerDefaults d = Defaults();
  const ParseContext ctx{d, nullptr, nullptr};  // no signature verifies
  AnthropicRequest r;
  const auto e = ParseAnthropicRequest(ctx, Body(R"({"max_tokens": 64, "messages": [
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": [
          {"type": "thinking", "thinking": "mine", "signature": "sig"},
          {"type": "thinking", "thinking": "yours"},
          {"type": "redacted_thinking", "data": "x"},
          {"type": "text", "text": "calling"},
          {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
      {"role": "user", "content": [
          {"type": "tool_result", "tool_use_id": "t1", "content": "r1"},
          {"type": "text", "text": "and"}]}]})"),
                                       false, &r);
  ASSERT_FALSE(e) << e->message;
  const OJson& m = r.turn.messages;
  ASSERT_EQ(m.size(), 4u) << m.dump();
  EXPECT_EQ(m[1]["content"], "calling");
  EXPECT_EQ(m[1]["reasoning_content"], "yours");  // the unverified signed block is left out
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m[2], (OJson{{"role", "tool"}, {"tool_call_id", "t1"}, {"content", "r1"}}));
  EXPECT_EQ(m[3], (OJson{{"role", "user"}, {"content", "and"}}));
}

TEST(RequestParsers, AnthropicNamesTheFirstBadBlock) {
  const ServerDefaults d = Defaults();
  const ParseContext ctx{d, nullptr, nullptr};
  AnthropicRequest r;
  const auto e = ParseAnthropicRequest(ctx, Body(R"({"max_tokens": 64, "messages": [
      {"role": "user", "content": [{"type": "text", "text": "ok"}, {"type": "image"}]},
      {"role": "robot", "content": "x"}], "tools": 5})"),
                                       false, &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].content[1]");
  EXPECT_NE(e->message.find("text-only"), std::string::npos) << e->message;
}

// The server's sampling defaults (generation_config.json, then --override-generation-config)
// fill the fields a request leaves out, on all three APIs; a field the request sets wins.
TEST(RequestParsers, SamplingDefaultsFillOnlyWhatTheRequestLeavesOut) {
  auto file = ParseGenerationConfig(R"({"eos_token_id": [7, 8], "temperature": 0.6,
      "top_p": 0.95, "top_k": 20, "do_sample": true, "transformers_version": "4.51"})");
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto over = ParseGenerationConfigOverride(R"({"temperature": 0, "min_p": 0.05})");
  ASSERT_TRUE(over.ok()) << over.status().message();
  ServerDefaults d = Defaults();
  d.gen = *file;
  OverrideGenerationConfig(*over, &d.gen);
  EXPECT_EQ(d.gen.eos_token_ids, (std::vector<int>{7, 8}));  // not a sampling field: kept

  GenerationRequest chat;
  ASSERT_FALSE(ParseGenerationFields(Body(R"({"top_p": 0.5})"), d, true, &chat));
  EXPECT_EQ(chat.sampling.temperature, 0.0f);   // the override
  EXPECT_EQ(chat.sampling.top_p, 0.5f);         // the request
  EXPECT_EQ(chat.sampling.top_k, 20);           // the file
  EXPECT_EQ(chat.sampling.min_p, 0.05f);        // the override
  EXPECT_EQ(chat.sampling.repetition_penalty, 1.0f);  // neither: OpenAI's

  const ParseContext ctx{d, nullptr, nullptr};
  AnthropicRequest a;
  ASSERT_FALSE(ParseAnthropicRequest(
      ctx, Body(R"({"max_tokens": 8, "temperature": 0.7, "messages": [{"role": "user", "content": "hi"}]})"),
      false, &a));
  EXPECT_EQ(a.turn.gen.sampling.temperature, 0.7f);
  EXPECT_EQ(a.turn.gen.sampling.top_k, 20);
  ResponsesRequest r;
  ASSERT_FALSE(ParseResponsesRequest(ctx, Body(R"({"input": "hi"})"), &r));
  EXPECT_EQ(r.turn.gen.sampling.temperature, 0.0f);
  EXPECT_EQ(r.turn.gen.sampling.top_p, 0.95f);

  // Without a file or an override: OpenAI's defaults.
  EXPECT_EQ(DefaultSampling(GenerationConfig{}).temperature, 1.0f);
  EXPECT_EQ(DefaultSampling(GenerationConfig{}).top_p, 1.0f);
}

TEST(RequestParsers, GenerationConfigOverrideNamesWhatIsWrong) {
  const std::pair<const char*, const char*> refused[] = {
      {"0", "not a JSON object"},
      {"{\"temperature\": 0", "not a JSON object"},
      {R"({"temp": 0})", "unknown key 'temp'"},
      {R"({"eos_token_id": 5})", "unknown key 'eos_token_id'"},
      {R"({"top_p": "high"})", "top_p must be a number"},
      {R"({"top_k": 1.5})", "top_k must be a 32-bit integer"},
      {R"({"temperature": null})", "temperature is null"},
  };
  for (const auto& [text, expect] : refused) {
    auto o = ParseGenerationConfigOverride(text);
    ASSERT_FALSE(o.ok()) << text;
    EXPECT_NE(o.status().message().find("--override-generation-config"), std::string::npos)
        << o.status().message();
    EXPECT_NE(o.status().message().find(expect), std::string::npos) << o.status().message();
  }
  auto o = ParseGenerationConfigOverride(R"({"top_k": 40, "repetition_penalty": 1.1})");
  ASSERT_TRUE(o.ok()) << o.status().message();
  GenerationConfig g;
  g.temperature = 0.3f;
  OverrideGenerationConfig(*o, &g);
  EXPECT_EQ(g.temperature, 0.3f);  // not in the override: kept
  EXPECT_EQ(g.top_k, 40);
  EXPECT_EQ(g.repetition_penalty, 1.1f);
}

}  // namespace
}  // namespace mimo
