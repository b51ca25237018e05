// AnswerFinishReason: the one place that decides how a chat answer ended for chat completions,
// Anthropic messages and the Responses API. Expectations from the rule (chat_turn.h): tool calls
// that ended as the token budget ran out were cut to fit and report kLength; anything else keeps
// the engine's reason.
#include "server/chat_turn.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace mimo {
namespace {

ToolSchema WeatherSchema() {
  StatusOr<ToolSchema> s = ToolSchema::FromJsonText(R"([{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}}}}])");
  EXPECT_TRUE(s.ok());
  return std::move(s).value();
}

// A parser that has read `text` (and, when it ended, was finished).
std::unique_ptr<ChatOutputParser> ParserAfter(const std::string& text) {
  ChatParserOptions o;
  o.tool_calls.id_seed = 1;
  auto p = std::make_unique<ChatOutputParser>(WeatherSchema(), o);
  p->Feed(text);
  p->Finish();
  return p;
}

RequestOutput Finished(FinishReason r, int output_tokens, std::string stop_reason) {
  RequestOutput ev;
  ev.finished = true;
  ev.finish_reason = r;
  ev.num_output_tokens = output_tokens;
  ev.stop_reason = std::move(stop_reason);
  return ev;
}

constexpr const char* kEos = "151645";  // a stop token id, as the engine writes it

TEST(AnswerFinishReason, CallsEndingAsTheBudgetRunsOutAreCut) {
  const auto call = ParserAfter(
      "<tool_call>\n<function=get_weather>\n<parameter=city>Fen</parameter>\n</function>\n"
      "</tool_call>");
  ASSERT_TRUE(call->made_tool_calls());
  // The EOS on the budget's last token.
  EXPECT_EQ(AnswerFinishReason(Finished(FinishReason::kStop, 20, kEos), *call, 20),
            FinishReason::kLength);
  // A grammar that ends by itself keeps one slot for the end: one token before the budget.
  EXPECT_EQ(AnswerFinishReason(Finished(FinishReason::kStop, 19, "grammar"), *call, 20),
            FinishReason::kLength);
  // With room left the call was the model's own.
  EXPECT_EQ(AnswerFinishReason(Finished(FinishReason::kStop, 19, kEos), *call, 20),
            FinishReason::kStop);
  EXPECT_EQ(AnswerFinishReason(Finished(FinishReason::kStop, 18, "grammar"), *call, 20),
            FinishReason::kStop);
  // The engine's own length and errors are kept; no budget known: the engine's reason.
  EXPECT_EQ(AnswerFinishReason(Finished(FinishReason::kLength, 20, ""), *call, 20),
            FinishReason::kLength);
  EXPECT_EQ(AnswerFinishReason(Finished(FinishReason::kAbort, 20, ""), *call, 20),
            FinishReason::kAbort);
  EXPECT_EQ(AnswerFinishReason(Finished(FinishReason::kStop, 20, kEos), *call, 0),
            FinishReason::kStop);
  // Not finished yet: nothing decided.
  RequestOutput mid;
  mid.num_output_tokens = 20;
  EXPECT_EQ(AnswerFinishReason(mid, *call, 20), FinishReason::kNone);
}

TEST(AnswerFinishReason, TextAnswersKeepTheEnginesReason) {
  // A text answer that ends with its EOS on the last token is a natural stop.
  const auto text = ParserAfter("The weather is fine.");
  EXPECT_FALSE(text->made_tool_calls());
  EXPECT_EQ(AnswerFinishReason(Finished(FinishReason::kStop, 20, kEos), *text, 20),
            FinishReason::kStop);
  // A block of an unknown function is text, not a call.
  const auto unknown = ParserAfter("<tool_call><function=nope></function></tool_call>");
  EXPECT_FALSE(unknown->made_tool_calls());
  EXPECT_EQ(AnswerFinishReason(Finished(FinishReason::kStop, 20, kEos), *unknown, 20),
            FinishReason::kStop);
}

}  // namespace
}  // namespace mimo
