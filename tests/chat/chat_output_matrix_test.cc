// The thinking x tool-call matrix of issue 47, through ChatOutputParser: calls inside and after
// the reasoning block, several calls, output cut inside reasoning, inside a call and inside a
// parameter, multi-line and empty values, for both kinds of MiMo generation prompt (the
// think-prefill template ends it in `<think>`, V2.5/V2.6-style templates end without it and the
// model writes `<think>` itself). Every expectation is written by hand from the format
// (serving.md §1.4/§1.5, chat/reasoning_parser.h, chat/tool_call_parser.h); the streamed parse at
// every chunk size 1..16 (and every start offset) must equal the whole-text parse.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_output_parser.h"
#include "chat/chat_template.h"

namespace mimo {
namespace {

using json = nlohmann::json;

constexpr const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
  {"type": "function", "function": {"name": "run", "parameters": {"type": "object",
    "properties": {"command": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
    "properties": {"query": {"type": "string"}}}}}])";

const ToolSchema& Schema() {
  static const ToolSchema* s = [] {
    StatusOr<ToolSchema> r = ToolSchema::FromJsonText(kTools);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return new ToolSchema(std::move(*r));
  }();
  return *s;
}

std::string ReadRepoFile(const std::string& rel) {
  std::ifstream f(std::string(MIMO_SOURCE_DIR) + "/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The template form, as the generation prompt of each MiMo template family.
enum class Prompt {
  kEndsInThink,    // think-prefill template: the prompt ends in `<think>`
  kModelOpensThink,  // V2.5/V2.6 style: the prompt ends in "assistant\n", the model writes <think>
};

// Parser options as the server derives them (server/chat_turn.cc PrepareTurn): thinking from the
// request's kwargs, prompt_ends_in_think from the rendered prompt of the real template.
ChatParserOptions OptionsFor(Prompt p) {
  const char* name = p == Prompt::kEndsInThink ? "mimo-v2.5-think-prefill" : "mimo-v2.5";
  StatusOr<ChatTemplate> t = ChatTemplate::FromString(
      ReadRepoFile(std::string("tests/data/chat_templates/") + name + ".jinja"));
  EXPECT_TRUE(t.ok()) << t.status().message();
  const nlohmann::ordered_json kwargs = {{"enable_thinking", true}};
  const auto msgs = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Weather?"}])");
  const auto tools = nlohmann::ordered_json::parse(kTools);
  StatusOr<std::string> prompt = t->Render(msgs, tools, true, kwargs);
  EXPECT_TRUE(prompt.ok()) << prompt.status().message();
  StatusOr<ReasoningParserOptions> r = ReasoningOptionsFromKwargs(json(kwargs));
  EXPECT_TRUE(r.ok());
  ChatParserOptions o;
  o.reasoning = *r;
  o.reasoning.prompt_ends_in_think = PromptEndsInThink(*prompt);
  EXPECT_EQ(o.reasoning.prompt_ends_in_think, p == Prompt::kEndsInThink) << *prompt;
  o.tool_calls.id_seed = 47;
  return o;
}

// What the model generates for `body` (text written inside the reasoning block onwards).
std::string Generated(Prompt p, const std::string& body) {
  return p == Prompt::kEndsInThink ? body : "<think>" + body;
}

struct Call {
  std::string name;
  std::string arguments;  // JSON object text
};

struct Case {
  std::string name;
  std::string body;  // generated text after `<think>`
  std::string reasoning;
  std::optional<std::string> content;  // nullopt: null (tool calls and no other text)
  std::vector<Call> calls;
};

const char* kWeather =
    "<tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
    "<parameter=days>2</parameter>\n</function>\n</tool_call>";
// V2.6's compact form.
const char* kWeatherCompact =
    "<tool_call><function=get_weather><parameter=city>Oslo</parameter><parameter=days>1"
    "</parameter></function></tool_call>";
const char* kParis = R"({"city": "Paris", "days": 2})";
const char* kOslo = R"({"city": "Oslo", "days": 1})";

std::vector<Case> Cases() {
  const std::string w = kWeather, wc = kWeatherCompact;
  return {
      // Issue 47's first report: the call inside the block, then `</think>` and an answer.
      {"call inside think, then answer", "I need the weather. " + w + "</think>\nChecking.",
       "I need the weather. ", "\nChecking.", {{"get_weather", kParis}}},
      // Its second: two calls in one block and nothing after it.
      {"two calls inside think", "Two cities. " + w + "\n" + wc + "</think>", "Two cities. \n",
       std::nullopt, {{"get_weather", kParis}, {"get_weather", kOslo}}},
      {"reasoning between and after calls inside think", "a " + w + " b " + wc + " c</think>\n",
       "a  b  c", std::nullopt, {{"get_weather", kParis}, {"get_weather", kOslo}}},
      {"call inside think, model ends without </think>", "Checking. " + w, "Checking. ",
       std::nullopt, {{"get_weather", kParis}}},
      {"call after think", "Plan.</think>\n\n" + w, "Plan.", std::nullopt,
       {{"get_weather", kParis}}},
      {"calls inside and after think", "a" + w + "b</think>Text " + wc, "ab", "Text ",
       {{"get_weather", kParis}, {"get_weather", kOslo}}},
      {"several calls after think with text around", "p</think>A" + w + "B" + wc + "C", "p",
       "ABC", {{"get_weather", kParis}, {"get_weather", kOslo}}},
      {"empty reasoning, then a call", "</think>" + w, "", std::nullopt,
       {{"get_weather", kParis}}},
      {"no call", "Just think.</think>The answer.", "Just think.", "The answer.", {}},
      // Cut by max_tokens.
      {"cut inside think", "I am still thinking about the", "I am still thinking about the", "",
       {}},
      {"cut inside think on a partial </think>", "thinking </thi", "thinking </thi", "", {}},
      {"cut inside think on a partial <tool_call>", "thinking <tool_ca", "thinking <tool_ca", "",
       {}},
      {"cut inside a call inside think, at a non-string value",
       "r <tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
       "<parameter=days>1",
       "r ", std::nullopt, {{"get_weather", R"({"city": "Paris"})"}}},
      {"cut inside a string parameter inside think",
       "r <tool_call><function=run><parameter=command>ls -la\ncd /tm", "r ", std::nullopt,
       {{"run", R"({"command": "ls -la\ncd /tm"})"}}},
      {"cut inside a closing tag inside think",
       "r <tool_call><function=run><parameter=command>pwd</parameter></function></tool_ca", "r ",
       std::nullopt, {{"run", R"({"command": "pwd"})"}}},
      {"cut inside a parameter after think",
       "p</think><tool_call>\n<function=run>\n<parameter=command>echo hi", "p", std::nullopt,
       {{"run", R"({"command": "echo hi"})"}}},
      {"cut inside a call after think, between parameters",
       "p</think><tool_call>\n<function=get_weather>\n<parameter=city>Rome</parameter>\n", "p",
       std::nullopt, {{"get_weather", R"({"city": "Rome"})"}}},
      // A block cut before its function name is complete is text (tool_call_parser.h).
      {"cut before the function name after think", "p</think>Sure. <tool_call>\n<function=get_wea",
       "p", "Sure. <tool_call>\n<function=get_wea", {}},
      // Values.
      {"multi-line value inside think",
       "r <tool_call>\n<function=run>\n<parameter=command>cd /tmp\nls -la\n</parameter>\n"
       "</function>\n</tool_call></think>",
       "r ", std::nullopt, {{"run", R"({"command": "cd /tmp\nls -la\n"})"}}},
      {"multi-line value after think",
       "p</think><tool_call><function=run><parameter=command>\nline 1\n\nline 3</parameter>"
       "</function></tool_call>",
       "p", std::nullopt, {{"run", R"({"command": "\nline 1\n\nline 3"})"}}},
      {"empty values inside think",
       "r <tool_call><function=search><parameter=query></parameter></function></tool_call>"
       "<tool_call><function=get_weather><parameter=city></parameter><parameter=days>"
       "</parameter></function></tool_call></think>",
       "r ", std::nullopt,
       // An empty integer does not fit: kept as the raw (empty) string.
       {{"search", R"({"query": ""})"}, {"get_weather", R"({"city": "", "days": ""})"}}},
      {"a call with no parameters after think",
       "p</think><tool_call>\n<function=search>\n</function>\n</tool_call>", "p", std::nullopt,
       {{"search", "{}"}}},
      // Not calls: an unknown function is text wherever it is written; `</think>` never leaks.
      {"unknown function inside think",
       "r <tool_call><function=nope></function></tool_call></think>ok", "r ",
       "<tool_call><function=nope></function></tool_call>ok", {}},
      // A `</think>` inside a call is the call's text (the output constraint allows it in a
      // value): the call runs to its `</tool_call>`, and the think block goes on after it.
      {"</think> inside a parameter value inside think",
       "r <tool_call><function=run><parameter=command>echo </think> x</parameter></function>"
       "</tool_call>s</think>Done.", "r s",
       "Done.", {{"run", R"({"command": "echo </think> x"})"}}},
  };
}

ChatParseResult Streamed(const std::string& text, size_t size, size_t offset,
                         const ChatParserOptions& o) {
  ChatOutputParser p(Schema(), o);
  ChatParseResult r;
  auto feed = [&](std::string_view chunk) {
    const ChatDelta d = p.Feed(chunk);
    // A streamed delta never carries the reasoning block's tags.
    EXPECT_EQ(d.content.find("</think>"), std::string::npos) << d.content;
    AccumulateChatDelta(d, &r);
  };
  if (offset > 0) feed(std::string_view(text).substr(0, offset));
  for (size_t i = offset; i < text.size(); i += size) feed(std::string_view(text).substr(i, size));
  AccumulateChatDelta(p.Finish(), &r);
  return r;
}

void ExpectSame(const ChatParseResult& got, const ChatParseResult& want, const std::string& what) {
  ASSERT_EQ(got.ToJson().dump(), want.ToJson().dump()) << what;  // ids included (seeded)
  for (size_t i = 0; i < got.tool_calls.size(); ++i) {
    ASSERT_EQ(got.tool_calls[i].index, want.tool_calls[i].index) << what;
  }
}

TEST(ChatOutputMatrix, EveryCaseForBothPromptForms) {
  for (Prompt p : {Prompt::kEndsInThink, Prompt::kModelOpensThink}) {
    const ChatParserOptions o = OptionsFor(p);
    for (const Case& c : Cases()) {
      const std::string text = Generated(p, c.body);
      const std::string what =
          c.name + (p == Prompt::kEndsInThink ? " [prompt ends in <think>]" : " [model opens it]");
      const ChatParseResult whole = ChatOutputParser::Parse(Schema(), text, o);
      const json j = whole.ToJson();
      EXPECT_EQ(whole.reasoning_content, c.reasoning) << what;
      if (c.content) {
        EXPECT_EQ(j["content"], *c.content) << what;
      } else {
        EXPECT_TRUE(j["content"].is_null()) << what << ": " << j["content"];
      }
      ASSERT_EQ(whole.tool_calls.size(), c.calls.size()) << what;
      for (size_t i = 0; i < c.calls.size(); ++i) {
        EXPECT_EQ(whole.tool_calls[i].index, static_cast<int>(i)) << what;
        EXPECT_EQ(whole.tool_calls[i].name, c.calls[i].name) << what;
        // The arguments text exactly (Python json.dumps layout, emitted key order).
        EXPECT_EQ(whole.tool_calls[i].arguments, c.calls[i].arguments) << what;
      }
      for (size_t size = 1; size <= 16; ++size) {
        for (size_t offset = 0; offset < size; ++offset) {
          ExpectSame(Streamed(text, size, offset, o), whole,
                     what + " | chunk " + std::to_string(size) + " from " + std::to_string(offset));
        }
      }
    }
  }
}

// V2.5/V2.6-style prompts with thinking on: the model may also answer without a reasoning block;
// then everything is content (and a later `<think>` is text).
TEST(ChatOutputMatrix, ModelSkipsTheBlock) {
  const ChatParserOptions o = OptionsFor(Prompt::kModelOpensThink);
  ChatParseResult r = ChatOutputParser::Parse(Schema(), std::string("Sure.\n") + kWeather, o);
  EXPECT_EQ(r.reasoning_content, "");
  EXPECT_EQ(r.content, "Sure.\n");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, kParis);
  r = ChatOutputParser::Parse(Schema(), "Hi <think>x</think>", o);
  EXPECT_EQ(r.content, "Hi <think>x</think>");
  EXPECT_EQ(r.reasoning_content, "");
}

// The stream of issue 47's first case, delta by delta as a client sees it: the reasoning, then
// the call's header and arguments, then the answer; `</think>` nowhere.
TEST(ChatOutputMatrix, CallInsideThinkStreamsInOrder) {
  ChatOutputParser p(Schema(), OptionsFor(Prompt::kEndsInThink));
  ChatDelta d = p.Feed("I need the weather. <tool_call>\n<function=get_weather>\n");
  EXPECT_EQ(d.reasoning_content, "I need the weather. ");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].index, 0);
  d = p.Feed("<parameter=city>Paris</parameter>\n</function>\n</tool_call></think>");
  EXPECT_EQ(d.reasoning_content, "");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city": "Paris"})");
  d = p.Feed("\nChecking.");
  EXPECT_EQ(d.content, "\nChecking.");
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_TRUE(p.Finish().empty());
}

}  // namespace
}  // namespace mimo
