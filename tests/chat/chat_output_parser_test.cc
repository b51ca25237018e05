// ChatOutputParser (reasoning then tool calls) against expectations written from serving.md
// §1.4/§1.5, the content-null rule (vLLM/OpenAI), and the split-point property.
#include "chat/chat_output_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mimo {
namespace {

using json = nlohmann::json;

const ToolSchema& Schema() {
  static const ToolSchema* s = [] {
    StatusOr<ToolSchema> r = ToolSchema::FromJsonText(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
      {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
        "properties": {"query": {"type": "string"}}}}}])");
    EXPECT_TRUE(r.ok());
    return new ToolSchema(std::move(*r));
  }();
  return *s;
}

ChatParserOptions Opts(bool thinking, bool prefilled = false) {
  ChatParserOptions o;
  o.reasoning.enable_thinking = thinking;
  o.reasoning.prompt_ends_in_think = prefilled;
  o.tool_calls.id_seed = 7;
  return o;
}

ChatParseResult Stream(const std::vector<std::string>& chunks, ChatParserOptions o) {
  ChatOutputParser p(Schema(), o);
  ChatParseResult r;
  for (const auto& c : chunks) AccumulateChatDelta(p.Feed(c), &r);
  AccumulateChatDelta(p.Finish(), &r);
  return r;
}

const char* kCall =
    "<tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
    "<parameter=days>2</parameter>\n</function>\n</tool_call>";

void ExpectWeatherCall(const ChatParseResult& r) {
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(r.tool_calls[0].arguments), json::parse(R"({"city": "Paris", "days": 2})"));
}

TEST(ChatOutputParser, ReasoningThenToolCall) {
  ChatParseResult r = ChatOutputParser::Parse(
      Schema(), std::string("<think>Need weather.</think>\n\n") + kCall, Opts(true));
  EXPECT_EQ(r.reasoning_content, "Need weather.");
  ExpectWeatherCall(r);
  EXPECT_TRUE(r.content_is_null());  // only whitespace besides the call
  json j = r.ToJson();
  EXPECT_TRUE(j["content"].is_null());
  EXPECT_EQ(j["reasoning_content"], "Need weather.");
  ASSERT_EQ(j["tool_calls"].size(), 1u);
  EXPECT_EQ(j["tool_calls"][0]["type"], "function");
  EXPECT_EQ(j["tool_calls"][0]["id"], r.tool_calls[0].id);
  EXPECT_EQ(j["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_TRUE(j["tool_calls"][0]["function"]["arguments"].is_string());
}

TEST(ChatOutputParser, ToolCallInsideReasoning) {
  ChatParseResult r = ChatOutputParser::Parse(
      Schema(), std::string("<think>I should check.\n") + kCall, Opts(true));
  EXPECT_EQ(r.reasoning_content, "I should check.\n");
  ExpectWeatherCall(r);
  EXPECT_TRUE(r.content_is_null());
}

TEST(ChatOutputParser, ThinkingDisabled) {
  ChatParseResult r =
      ChatOutputParser::Parse(Schema(), std::string("<think></think>") + kCall, Opts(false));
  EXPECT_EQ(r.reasoning_content, "");
  ExpectWeatherCall(r);
  EXPECT_TRUE(r.ToJson()["reasoning_content"].is_null());
  // With thinking off a think block stays content text.
  r = ChatOutputParser::Parse(Schema(), "<think>hmm</think>Hi", Opts(false));
  EXPECT_EQ(r.content, "<think>hmm</think>Hi");
  EXPECT_EQ(r.reasoning_content, "");
}

TEST(ChatOutputParser, PromptEndingInThink) {
  ChatParseResult r = ChatOutputParser::Parse(
      Schema(), std::string("The user asks.</think>Let me check.\n") + kCall + "\nDone.",
      Opts(true, true));
  EXPECT_EQ(r.reasoning_content, "The user asks.");
  EXPECT_EQ(r.content, "Let me check.\n\nDone.");
  EXPECT_FALSE(r.content_is_null());
  ExpectWeatherCall(r);
}

TEST(ChatOutputParser, ContentNullOnlyWithToolCalls) {
  ChatParseResult r = ChatOutputParser::Parse(Schema(), "", Opts(true));
  EXPECT_FALSE(r.content_is_null());
  EXPECT_EQ(r.ToJson()["content"], "");
  r = ChatOutputParser::Parse(Schema(), "\n\n", Opts(false));
  EXPECT_EQ(r.ToJson()["content"], "\n\n");  // whitespace without calls is kept
  r = ChatOutputParser::Parse(Schema(), "<think>only reasoning", Opts(true));
  EXPECT_EQ(r.reasoning_content, "only reasoning");
  EXPECT_EQ(r.ToJson()["content"], "");
  r = ChatOutputParser::Parse(Schema(), std::string("\n") + kCall + "\n" + kCall + "\n",
                              Opts(false));
  EXPECT_TRUE(r.ToJson()["content"].is_null());
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[1].index, 1);
}

TEST(ChatOutputParser, StreamingHoldsLeadingWhitespaceUntilDecided) {
  ChatOutputParser p(Schema(), Opts(true));
  ChatDelta d = p.Feed("<think>x</think>\n\n");
  EXPECT_EQ(d.reasoning_content, "x");
  EXPECT_EQ(d.content, "");  // held: may turn out to be whitespace next to a tool call
  d = p.Feed("Answer");
  EXPECT_EQ(d.content, "\n\nAnswer");
  EXPECT_TRUE(p.Finish().empty());

  ChatOutputParser q(Schema(), Opts(true));
  q.Feed("<think>x</think>\n");
  d = q.Finish();
  EXPECT_EQ(d.content, "\n");  // no call came: released
}

TEST(ChatOutputParser, KwargsAndPromptHelpers) {
  auto on = [](const char* kwargs) {
    StatusOr<ReasoningParserOptions> o = ReasoningOptionsFromKwargs(json::parse(kwargs));
    EXPECT_TRUE(o.ok()) << kwargs;
    return o.ok() && o->enable_thinking;
  };
  EXPECT_TRUE(on(R"({"enable_thinking": true})"));
  EXPECT_TRUE(on(R"({"thinking": true})"));
  EXPECT_FALSE(on(R"({"enable_thinking": false})"));
  EXPECT_FALSE(on(R"({"thinking": false, "enable_thinking": null})"));
  EXPECT_FALSE(on("{}"));
  EXPECT_FALSE(on("null"));
  StatusOr<ReasoningParserOptions> bad =
      ReasoningOptionsFromKwargs(json::parse(R"({"enable_thinking": "yes"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("enable_thinking"), std::string::npos);
  EXPECT_FALSE(ReasoningOptionsFromKwargs(json::parse("[1]")).ok());
  EXPECT_TRUE(PromptEndsInThink("<|im_start|>assistant\n<think>"));
  EXPECT_FALSE(PromptEndsInThink("<|im_start|>assistant\n<think></think>"));
  EXPECT_FALSE(PromptEndsInThink("<|im_start|>assistant\n"));
}

TEST(ChatOutputParser, SplitPointProperty) {
  const std::vector<std::pair<std::string, ChatParserOptions>> cases = {
      {std::string("<think>Plan: call the tool.</think>\n\nChecking.\n") + kCall +
           "\n<tool_call><function=search><parameter=query>a <b> & c\n</parameter></function>"
           "</tool_call>\nDone.",
       Opts(true)},
      {std::string("<think>Plan\n") + kCall + "\n", Opts(true)},
      {std::string("<think></think>\n") + kCall, Opts(false)},
      {std::string("reasoning</think>\n\n") + kCall + "<tool_call><function=zzz></function>"
           "</tool_call>",
       Opts(false, true)},
      {"<think>long reasoning cut sh", Opts(true)},
  };
  for (const auto& [text, o] : cases) {
    ChatParseResult whole = ChatOutputParser::Parse(Schema(), text, o);
    auto check = [&](const ChatParseResult& r, const std::string& what) {
      ASSERT_EQ(r.content, whole.content) << what;
      ASSERT_EQ(r.reasoning_content, whole.reasoning_content) << what;
      ASSERT_EQ(r.tool_calls.size(), whole.tool_calls.size()) << what;
      for (size_t i = 0; i < r.tool_calls.size(); ++i) {
        ASSERT_EQ(r.tool_calls[i].id, whole.tool_calls[i].id) << what;
        ASSERT_EQ(r.tool_calls[i].index, whole.tool_calls[i].index) << what;
        ASSERT_EQ(r.tool_calls[i].name, whole.tool_calls[i].name) << what;
        ASSERT_EQ(json::parse(r.tool_calls[i].arguments),
                  json::parse(whole.tool_calls[i].arguments))
            << what;
      }
    };
    for (size_t i = 0; i <= text.size(); ++i)
      check(Stream({text.substr(0, i), text.substr(i)}, o), text + " | split " + std::to_string(i));
    std::vector<std::string> chars;
    for (char c : text) chars.push_back(std::string(1, c));
    check(Stream(chars, o), text + " | chars");
  }
}

// Speculative decoding (MTP, and DFlash's blocks of up to 8 tokens) hands the parsers a whole
// verified burst at once: several tags, a whole <think></think> pair, or a tool call's end and the
// next one's start in one delta. Every burst length and offset gives the one-shot parse.
TEST(ChatOutputParser, BurstsAtEveryOffset) {
  const std::vector<std::pair<std::string, ChatParserOptions>> cases = {
      {"<think></think>The answer is 4.", Opts(true)},  // MiMo's empty pair, thinking on
      {std::string("<think></think>\n") + kCall, Opts(true)},
      {std::string("<think></think>\n") + kCall, Opts(false)},
      {std::string("<think>a</think>") + kCall + kCall + "\nok", Opts(true)},
      {std::string("</think>\n\n") + kCall + "\n<think></think>", Opts(false, true)},
  };
  for (const auto& [text, o] : cases) {
    const ChatParseResult whole = ChatOutputParser::Parse(Schema(), text, o);
    for (size_t len : {2, 5, 8, 13, 30}) {
      for (size_t off = 0; off < len; ++off) {
        std::vector<std::string> bursts = {text.substr(0, off)};
        for (size_t i = off; i < text.size(); i += len) bursts.push_back(text.substr(i, len));
        const ChatParseResult r = Stream(bursts, o);
        const std::string what =
            text + " | burst " + std::to_string(len) + " at " + std::to_string(off);
        ASSERT_EQ(r.content, whole.content) << what;
        ASSERT_EQ(r.reasoning_content, whole.reasoning_content) << what;
        ASSERT_EQ(r.tool_calls.size(), whole.tool_calls.size()) << what;
        for (size_t i = 0; i < r.tool_calls.size(); ++i) {
          ASSERT_EQ(r.tool_calls[i].name, whole.tool_calls[i].name) << what;
          ASSERT_EQ(json::parse(r.tool_calls[i].arguments),
                    json::parse(whole.tool_calls[i].arguments))
              << what;
        }
      }
    }
  }
  // And what the one-shot parse says, against the format: the empty pair is no reasoning.
  const ChatParseResult e =
      ChatOutputParser::Parse(Schema(), "<think></think>The answer is 4.", Opts(true));
  EXPECT_EQ(e.content, "The answer is 4.");
  EXPECT_EQ(e.reasoning_content, "");
  const ChatParseResult two = ChatOutputParser::Parse(
      Schema(), std::string("<think>a</think>") + kCall + kCall + "\nok", Opts(true));
  ASSERT_EQ(two.tool_calls.size(), 2u);
  ChatParseResult second;
  second.tool_calls = {two.tool_calls[1]};
  ExpectWeatherCall(second);
}


// A burst of tokens (speculative decoding) that ends a call and goes on with text: the writers of
// ordered blocks must see the call before the text. Expectations: the text's own order.
TEST(ChatOutputParser, FeedInOrderKeepsTheTextsOrder) {
  ChatParserOptions o = Opts(true, /*prefilled=*/true);
  // Prompt ended in <think>: reasoning, a call inside it, </think>, then the answer's text.
  const std::string text = std::string("Need weather. ") + kCall + "</think>\nChecking.";
  ChatOutputParser p(Schema(), o);
  std::vector<ChatDelta> parts = p.FeedInOrder(text, /*finish=*/true);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].reasoning_content, "Need weather. ");
  EXPECT_EQ(parts[0].content, "");
  ASSERT_EQ(parts[0].tool_calls.size(), 1u);  // the call's fragments joined into one delta
  EXPECT_EQ(parts[0].tool_calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(parts[0].tool_calls[0].arguments),
            json::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(parts[1].reasoning_content, "");
  EXPECT_EQ(parts[1].content, "\nChecking.");
  EXPECT_TRUE(parts[1].tool_calls.empty());

  // Together the parts are what Feed + Finish give, at every split of the text into two events.
  const ChatParseResult whole = ChatOutputParser::Parse(Schema(), text, o);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ChatOutputParser q(Schema(), o);
    ChatParseResult r;
    for (const ChatDelta& d : q.FeedInOrder(text.substr(0, cut), false)) AccumulateChatDelta(d, &r);
    std::vector<ChatDelta> tail = q.FeedInOrder(text.substr(cut), true);
    for (const ChatDelta& d : tail) AccumulateChatDelta(d, &r);
    EXPECT_EQ(r.ToJson(), whole.ToJson()) << "cut at " << cut;
    // Within a part nothing comes before what precedes it in the text: a part that holds the
    // answer's text holds no call (the call came first, in its own part).
    for (const ChatDelta& d : tail) EXPECT_FALSE(!d.content.empty() && !d.tool_calls.empty());
  }
}

// Reasoning, text, a call: one part (already in that order). The text between two calls comes
// after the first: a new part, so an Anthropic writer closes the first tool_use block, writes the
// text block, then opens the second call's block.
TEST(ChatOutputParser, FeedInOrderSplitsWhenTheOrderTurnsBack) {
  ChatOutputParser p(Schema(), Opts(true));
  std::vector<ChatDelta> parts = p.FeedInOrder(
      std::string("<think>a</think>Hi ") + kCall + "\n" + kCall, /*finish=*/true);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].reasoning_content, "a");
  EXPECT_EQ(parts[0].content, "Hi ");
  ASSERT_EQ(parts[0].tool_calls.size(), 1u);
  EXPECT_EQ(parts[0].tool_calls[0].index, 0);
  EXPECT_EQ(parts[1].reasoning_content, "");
  EXPECT_EQ(parts[1].content, "\n");
  ASSERT_EQ(parts[1].tool_calls.size(), 1u);
  EXPECT_EQ(parts[1].tool_calls[0].index, 1);
}

}  // namespace
}  // namespace mimo
