// The mimo tool-call parser against expectations written from serving.md §1.4, the MiMo-V2.5
// chat template and the peers' bug reports (sglang#33186, #34685, #40633, vllm#58019), plus the
// streaming property: any chunking gives the one-shot result.
#include "chat/tool_call_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

namespace mimo {
namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kTools = R"([
  {"type": "function", "function": {"name": "execute_bash", "parameters": {"type": "object",
    "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}}}}},
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "temp": {"type": "number"}, "metric": {"type": "boolean"},
                   "options": {"type": "object"}, "tags": {"type": "array"},
                   "note": {"type": ["string", "null"]}, "limit": {"type": ["integer", "null"]},
                   "maybe": {"anyOf": [{"type": "number"}, {"type": "null"}]},
                   "anything": {"description": "no type"}, "odd": {"type": "decimal"}}}}},
  {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}},
  {"name": "ping"}
])";

const ToolSchema& Schema() {
  static const ToolSchema* s = [] {
    StatusOr<ToolSchema> r = ToolSchema::FromJsonText(kTools);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return new ToolSchema(std::move(*r));
  }();
  return *s;
}

ToolCallParserOptions Seeded() { return {.id_seed = 1234}; }

ToolParseResult Parse(const std::string& text) {
  return MimoToolCallParser::Parse(Schema(), text, Seeded());
}

ToolParseResult Stream(const std::vector<std::string>& chunks) {
  MimoToolCallParser p(Schema(), Seeded());
  ToolParseResult r;
  for (const auto& c : chunks) AccumulateToolDelta(p.Feed(c), &r);
  AccumulateToolDelta(p.Finish(), &r);
  return r;
}

// Checks one call: name, index, id format, and arguments equal to `args` (an ordered JSON text,
// so key order is checked too).
void ExpectCall(const ToolCall& c, int index, const std::string& name, const std::string& args) {
  EXPECT_EQ(c.index, index);
  EXPECT_EQ(c.name, name);
  EXPECT_TRUE(std::regex_match(c.id, std::regex("call_[A-Za-z0-9]{24}"))) << c.id;
  ojson got = ojson::parse(c.arguments, nullptr, false);
  ASSERT_FALSE(got.is_discarded()) << "arguments not JSON: " << c.arguments;
  EXPECT_EQ(got, ojson::parse(args)) << "arguments: " << c.arguments;
  EXPECT_EQ(got.dump(), ojson::parse(args).dump()) << "key order: " << c.arguments;
}

TEST(ToolSchema, ReadsTypesAndRejectsBadInput) {
  EXPECT_TRUE(Schema().HasFunction("get_weather"));
  EXPECT_TRUE(Schema().HasFunction("ping"));
  EXPECT_FALSE(Schema().HasFunction("nope"));
  EXPECT_EQ(Schema().ParamTypes("get_weather", "days"), kJsonInteger);
  EXPECT_EQ(Schema().ParamTypes("get_weather", "note"), kJsonString | kJsonNull);
  EXPECT_EQ(Schema().ParamTypes("get_weather", "maybe"), kJsonNumber | kJsonNull);
  EXPECT_EQ(Schema().ParamTypes("get_weather", "anything"), 0u);
  EXPECT_EQ(Schema().ParamTypes("get_weather", "odd"), 0u);
  EXPECT_EQ(Schema().ParamTypes("get_weather", "undeclared"), 0u);
  EXPECT_FALSE(ToolSchema::FromJsonText("{").ok());
  EXPECT_FALSE(ToolSchema::FromJsonText(R"({"name": "f"})").ok());
  StatusOr<ToolSchema> bad = ToolSchema::FromJsonText(R"([{"type": "function", "function": {}}])");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tools[0]"), std::string::npos);
  EXPECT_FALSE(ToolSchema::FromJsonText(R"([{"name": "f", "parameters": 3}])").ok());
  EXPECT_TRUE(ToolSchema::FromJsonText("null").ok());
}

TEST(MimoToolCallParser, TemplateFormat) {
  // Exactly as the chat template renders an assistant tool call in history.
  ToolParseResult r = Parse(
      "<tool_call>\n<function=execute_bash>\n<parameter=command>pwd && ls</parameter>\n"
      "</function>\n</tool_call>");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "execute_bash", R"({"command": "pwd && ls"})");
  // The arguments text is formatted like Python's json.dumps.
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"command": "pwd && ls"})");
}

TEST(MimoToolCallParser, CompactFormV26) {
  ToolParseResult r = Parse(
      "<tool_call><function=get_weather><parameter=city>Paris</parameter><parameter=days>3"
      "</parameter></function></tool_call>");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "get_weather", R"({"city": "Paris", "days": 3})");
}

TEST(MimoToolCallParser, TextBeforeBetweenAndAfterCallsIsKept) {
  ToolParseResult r = Parse(
      "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
      "</function>\n</tool_call>\nand\n<tool_call><function=get_weather><parameter=city>Rome"
      "</parameter></function></tool_call>\nDone. Anything else?");
  EXPECT_EQ(r.content, "Let me check.\n\nand\n\nDone. Anything else?");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  ExpectCall(r.tool_calls[0], 0, "get_weather", R"({"city": "Paris"})");
  ExpectCall(r.tool_calls[1], 1, "get_weather", R"({"city": "Rome"})");
  EXPECT_NE(r.tool_calls[0].id, r.tool_calls[1].id);
}

TEST(MimoToolCallParser, StringValuesAreVerbatim) {
  // Newlines (including leading/trailing ones), spaces, '<', '>', '&', entities, quotes,
  // backslashes, "null" and number-like text all stay exactly as emitted.
  const std::string value =
      "\n  def f(a, b):\n\tif a < b and b > 0: return \"&amp; &lt;x&gt;\\n\"\n\n";
  ToolParseResult r = Parse("<tool_call>\n<function=write_file>\n<parameter=path> /tmp/a.py "
                            "</parameter>\n<parameter=content>" + value +
                            "</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ojson args = ojson::parse(r.tool_calls[0].arguments);
  EXPECT_EQ(args["path"], " /tmp/a.py ");
  EXPECT_EQ(args["content"], value);

  r = Parse("<tool_call><function=get_weather><parameter=city>null</parameter>"
            "<parameter=note>null</parameter><parameter=anything>42</parameter>"
            "<parameter=undeclared>true</parameter><parameter=odd>1.5</parameter>"
            "</function></tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "get_weather",
             R"({"city": "null", "note": "null", "anything": "42", "undeclared": "true",
                 "odd": "1.5"})");
}

TEST(MimoToolCallParser, ValueContainingPartialTagsAndOtherTags) {
  ToolParseResult r = Parse(
      "<tool_call><function=write_file><parameter=content>a</param b</parameter c <parameter=x>"
      "</function></tool_call> d</parameter></function></tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "write_file",
             R"({"content": "a</param b</parameter c <parameter=x></function></tool_call> d"})");
  EXPECT_EQ(r.content, "");
}

TEST(MimoToolCallParser, NonStringValuesAreCoerced) {
  ToolParseResult r = Parse(
      "<tool_call>\n<function=get_weather>\n"
      "<parameter=days>\n7\n</parameter>\n"
      "<parameter=temp>21.5</parameter>\n"
      "<parameter=metric>True</parameter>\n"
      "<parameter=options>{\"units\": \"si\", \"a\": [1, 2.5, null], \"z\": {\"k\": false}}"
      "</parameter>\n"
      "<parameter=tags>[\"x\", \"y\"]</parameter>\n"
      "<parameter=limit>null</parameter>\n"
      "<parameter=maybe>None</parameter>\n"
      "</function>\n</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "get_weather",
             R"({"days": 7, "temp": 21.5, "metric": true,
                 "options": {"units": "si", "a": [1, 2.5, null], "z": {"k": false}},
                 "tags": ["x", "y"], "limit": null, "maybe": null})");
}

TEST(MimoToolCallParser, NumberCoercionDetails) {
  auto args = [](const std::string& param, const std::string& value) {
    ToolParseResult r = Parse("<tool_call><function=get_weather><parameter=" + param + ">" +
                              value + "</parameter></function></tool_call>");
    EXPECT_EQ(r.tool_calls.size(), 1u);
    return r.tool_calls.empty() ? ojson() : ojson::parse(r.tool_calls[0].arguments)[param];
  };
  // Integral numbers are emitted as integers.
  EXPECT_TRUE(args("temp", "3.0").is_number_integer());
  EXPECT_EQ(args("temp", "3.0"), 3);
  EXPECT_EQ(args("temp", "1e3"), 1000);
  EXPECT_EQ(args("temp", "-0.25"), -0.25);
  EXPECT_EQ(args("temp", "+4"), 4);
  EXPECT_EQ(args("days", "5.0"), 5);
  EXPECT_EQ(args("days", "-12"), -12);
  EXPECT_EQ(args("days", "9007199254740993"), 9007199254740993LL);
  // Not a number of the declared type: kept as the raw string.
  EXPECT_EQ(args("days", "three"), "three");
  EXPECT_EQ(args("days", "2.5"), "2.5");
  EXPECT_EQ(args("temp", "inf"), "inf");
  EXPECT_EQ(args("temp", "nan"), "nan");
  EXPECT_EQ(args("temp", "0x10"), "0x10");
  EXPECT_EQ(args("metric", "yes"), "yes");
  EXPECT_EQ(args("metric", " FALSE\n"), false);
  EXPECT_EQ(args("options", "{broken"), "{broken");
  EXPECT_EQ(args("options", "[1]"), "[1]");  // an array where an object is declared
  EXPECT_EQ(args("limit", "8"), 8);
}

TEST(MimoToolCallParser, HtmlEntitiesUnescapedOnlyForNonStrings) {
  ToolParseResult r = Parse(
      "<tool_call><function=get_weather>"
      "<parameter=city>Rock &amp; Roll &lt;3</parameter>"
      "<parameter=options>{&quot;q&quot;: &quot;a &amp; b &#60; c &#x3E; d&quot;}</parameter>"
      "<parameter=days>&#55;</parameter>"
      "</function></tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "get_weather",
             R"({"city": "Rock &amp; Roll &lt;3", "options": {"q": "a & b < c > d"}, "days": 7})");
  // Raw JSON that only parses without unescaping keeps its entity text.
  r = Parse("<tool_call><function=get_weather><parameter=options>{\"q\": \"&quot;\"}</parameter>"
            "</function></tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "get_weather", R"({"options": {"q": "&quot;"}})");
}

TEST(MimoToolCallParser, KeysKeepEmittedOrderAndToolsWithoutParams) {
  ToolParseResult r = Parse(
      "<tool_call><function=get_weather><parameter=tags>[]</parameter><parameter=city>Oslo"
      "</parameter><parameter=days>1</parameter></function></tool_call>"
      "<tool_call>\n<function=ping>\n</function>\n</tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"tags": [], "city": "Oslo", "days": 1})");
  ExpectCall(r.tool_calls[1], 1, "ping", "{}");
  EXPECT_EQ(r.tool_calls[1].arguments, "{}");
}

TEST(MimoToolCallParser, UnknownFunctionIsContent) {
  const std::string unknown =
      "<tool_call>\n<function=rm_rf>\n<parameter=path>/</parameter>\n</function>\n</tool_call>";
  ToolParseResult r = Parse("A " + unknown + " B <tool_call><function=ping></function>"
                            "</tool_call> C");
  EXPECT_EQ(r.content, "A " + unknown + " B  C");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "ping", "{}");  // unknown blocks take no index

  // No tools in the request: every block is content.
  const std::string known =
      "<tool_call><function=ping></function></tool_call>";
  ToolParseResult none = MimoToolCallParser::Parse(ToolSchema(), known + "x", Seeded());
  EXPECT_EQ(none.content, known + "x");
  EXPECT_TRUE(none.tool_calls.empty());
  // Names match exactly (after trimming whitespace).
  r = Parse("<tool_call><function=Ping></function></tool_call>");
  EXPECT_EQ(r.content, "<tool_call><function=Ping></function></tool_call>");
  r = Parse("<tool_call><function= ping\t></function></tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "ping");
}

TEST(MimoToolCallParser, MalformedBlocks) {
  // <tool_call> not followed by <function=...>: the tag is text.
  ToolParseResult r = Parse("use <tool_call> tags\n");
  EXPECT_EQ(r.content, "use <tool_call> tags\n");
  EXPECT_TRUE(r.tool_calls.empty());
  r = Parse("<tool_call>\n<function=bad\nname></function></tool_call>");
  EXPECT_EQ(r.content, "<tool_call>\n<function=bad\nname></function></tool_call>");
  // An incomplete marker at the end of output is released as text.
  r = Parse("Hello <tool_ca");
  EXPECT_EQ(r.content, "Hello <tool_ca");
  // Stray text between parameters is ignored; missing closing tags are tolerated.
  r = Parse("<tool_call><function=get_weather>oops<parameter=city>Oslo</parameter>junk"
            "</function></tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "get_weather", R"({"city": "Oslo"})");
  r = Parse("<tool_call><function=ping></function>\nThen text");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.content, "\nThen text");
  r = Parse("<tool_call><function=get_weather><parameter=days>2</parameter></tool_call>after");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "get_weather", R"({"days": 2})");
  EXPECT_EQ(r.content, "after");
  r = Parse("<tool_call><function=ping><tool_call><function=ping></function></tool_call>");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.content, "");
}

TEST(MimoToolCallParser, TruncatedOutput) {
  // Before the function name is complete: content.
  ToolParseResult r = Parse("Sure <tool_call>\n<function=get_wea");
  EXPECT_EQ(r.content, "Sure <tool_call>\n<function=get_wea");
  EXPECT_TRUE(r.tool_calls.empty());
  // Inside a string value: the call is kept with the text so far (it was already streamed).
  r = Parse("<tool_call>\n<function=write_file>\n<parameter=path>a.txt</parameter>\n"
            "<parameter=content>line 1\nline");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "write_file", R"({"path": "a.txt", "content": "line 1\nline"})");
  // A held partial closing tag is value text once the output ends.
  r = Parse("<tool_call><function=write_file><parameter=content>x</param");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "write_file", R"({"content": "x</param"})");
  // Inside a non-string value: the value is dropped.
  r = Parse("<tool_call><function=get_weather><parameter=city>Oslo</parameter><parameter=days>1");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "get_weather", R"({"city": "Oslo"})");
  r = Parse("<tool_call><function=get_weather>\n<parame");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ExpectCall(r.tool_calls[0], 0, "get_weather", "{}");
}

TEST(MimoToolCallParser, IdsAreSeededAndDistinct) {
  const std::string text = "<tool_call><function=ping></function></tool_call>"
                           "<tool_call><function=ping></function></tool_call>";
  ToolParseResult a = Parse(text), b = Parse(text);
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0].id, b.tool_calls[0].id);
  EXPECT_NE(a.tool_calls[0].id, a.tool_calls[1].id);
  ToolParseResult c = MimoToolCallParser::Parse(Schema(), text, {.id_seed = 99});
  EXPECT_NE(a.tool_calls[0].id, c.tool_calls[0].id);
  ToolParseResult d = MimoToolCallParser::Parse(Schema(), text);  // random seed
  ASSERT_EQ(d.tool_calls.size(), 2u);
  ExpectCall(d.tool_calls[0], 0, "ping", "{}");
}

// sglang#33186: a <tool_call> split across chunks must be recognised, with no markup leaked.
TEST(MimoToolCallParserStreaming, SplitToolCallTagAndNameAsSoonAsComplete) {
  MimoToolCallParser p(Schema(), Seeded());
  ToolParseDelta d = p.Feed("Checking. <tool_");
  EXPECT_EQ(d.content, "Checking. ");
  EXPECT_TRUE(d.tool_calls.empty());
  d = p.Feed("call>\n<function=get_wea");
  EXPECT_TRUE(d.empty());
  d = p.Feed("ther>");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);  // the header, before any parameter
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "");
  EXPECT_TRUE(std::regex_match(d.tool_calls[0].id, std::regex("call_[A-Za-z0-9]{24}")));
}

// sglang#34685: string arguments are streamed as they arrive; non-string ones when complete.
TEST(MimoToolCallParserStreaming, IncrementalArguments) {
  MimoToolCallParser p(Schema(), Seeded());
  std::string args;
  auto feed = [&](const std::string& text) {
    ToolParseDelta d = p.Feed(text);
    EXPECT_EQ(d.content, "");
    std::string frag;
    for (const auto& t : d.tool_calls) {
      EXPECT_EQ(t.index, 0);
      frag += t.arguments;
    }
    args += frag;
    return frag;
  };
  feed("<tool_call>\n<function=execute_bash>\n");
  EXPECT_EQ(feed("<parameter=command>echo hel"), R"({"command": "echo hel)");
  EXPECT_EQ(feed("lo \"w\"</param"), R"(lo \"w\")");  // no partial closing tag
  EXPECT_EQ(feed("eter>\n"), "\"");
  EXPECT_EQ(feed("<parameter=timeout>1"), "");  // integer: held until complete
  EXPECT_EQ(feed("20</parameter>\n"), ", \"timeout\": 120");
  EXPECT_EQ(feed("</function>"), "}");
  EXPECT_EQ(feed("\n</tool_call>"), "");
  ToolParseDelta tail = p.Finish();
  EXPECT_TRUE(tail.empty());
  EXPECT_EQ(ojson::parse(args), ojson::parse(R"({"command": "echo hello \"w\"", "timeout": 120})"));
}

// UTF-8 code points of `s`, one string each.
std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) == 0x80 && !out.empty()) {
      out.back() += c;
    } else {
      out.push_back(std::string(1, c));
    }
  }
  return out;
}

// Feeding a string value one character at a time: after every delta while the value is open,
// the arguments streamed so far, closed with "\"}", are valid JSON whose value is a prefix of the
// final value (no partial escape, no partial tag).
TEST(MimoToolCallParserStreaming, StringFragmentsAreAlwaysWholeEscapes) {
  const std::string value = "a\"b\\c\nd\te\x01 <x> </para é 😀 end";
  const std::string head = "<tool_call><function=write_file><parameter=content>";
  const std::string text = head + value + "</parameter></function></tool_call>";
  const size_t value_end = head.size() + value.size();
  MimoToolCallParser p(Schema(), Seeded());
  std::string args;
  size_t fed = 0, checks = 0;
  for (const std::string& c : CodePoints(text)) {
    ToolParseDelta d = p.Feed(c);
    fed += c.size();
    EXPECT_EQ(d.content, "");
    for (const auto& t : d.tool_calls) args += t.arguments;
    if (fed < head.size() || fed >= value_end + std::string("</parameter>").size()) continue;
    ++checks;
    ojson partial = ojson::parse(args + "\"}", nullptr, false);
    ASSERT_FALSE(partial.is_discarded()) << args;
    std::string got = partial["content"];
    ASSERT_EQ(value.substr(0, got.size()), got);
    if (fed == value_end) {
      EXPECT_EQ(got, value);  // all streamed before </parameter> arrives
    }
  }
  for (const auto& t : p.Finish().tool_calls) args += t.arguments;
  EXPECT_GT(checks, value.size() / 2);
  EXPECT_EQ(ojson::parse(args)["content"], value);
}

// Large values fed in small deltas: correct results, and (implicitly, through the suite's time
// budget) no rescanning of the whole buffered value per delta.
TEST(MimoToolCallParserStreaming, LargeValuesInSmallDeltas) {
  std::string array = "[";
  for (int i = 0; i < 40000; ++i) array += (i ? ", " : "") + std::to_string(i);
  array += "]";
  std::string text = "<tool_call><function=get_weather><parameter=tags>" + array +
                     "</parameter><parameter=city>" + std::string(200000, 'x') +
                     "</parameter></function></tool_call>";
  MimoToolCallParser p(Schema(), Seeded());
  ToolParseResult r;
  for (size_t i = 0; i < text.size(); i += 3) AccumulateToolDelta(p.Feed(text.substr(i, 3)), &r);
  AccumulateToolDelta(p.Finish(), &r);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  ojson args = ojson::parse(r.tool_calls[0].arguments);
  EXPECT_EQ(args["tags"], ojson::parse(array));
  EXPECT_EQ(args["city"], std::string(200000, 'x'));
}

// sglang#33186: text after the last call is emitted when streaming.
TEST(MimoToolCallParserStreaming, TextAfterLastCall) {
  MimoToolCallParser p(Schema(), Seeded());
  p.Feed("<tool_call><function=ping></function></tool_call>");
  ToolParseDelta d = p.Feed("\nAll done.");
  EXPECT_EQ(d.content, "\nAll done.");
  EXPECT_TRUE(p.Finish().empty());
}

void ExpectSameResult(const ToolParseResult& got, const ToolParseResult& want,
                      const std::string& what) {
  ASSERT_EQ(got.content, want.content) << what;
  ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size()) << what;
  for (size_t i = 0; i < want.tool_calls.size(); ++i) {
    const ToolCall& g = got.tool_calls[i];
    const ToolCall& w = want.tool_calls[i];
    ASSERT_EQ(g.index, w.index) << what;
    ASSERT_EQ(g.id, w.id) << what;
    ASSERT_EQ(g.name, w.name) << what;
    ASSERT_EQ(g.arguments, w.arguments) << what;
    ojson ga = ojson::parse(g.arguments, nullptr, false);
    ASSERT_FALSE(ga.is_discarded()) << what << ": " << g.arguments;
    ASSERT_EQ(ga, ojson::parse(w.arguments)) << what;
  }
}

// Every split into two chunks, and one-character chunks, give the one-shot result.
TEST(MimoToolCallParserStreaming, SplitPointProperty) {
  const std::vector<std::string> outputs = {
      // Template format, text before and after.
      "I'll look that up.\n<tool_call>\n<function=get_weather>\n<parameter=city>San Francisco"
      "</parameter>\n<parameter=days>3</parameter>\n<parameter=metric>false</parameter>\n"
      "</function>\n</tool_call>\nOne moment.",
      // Compact V2.6 form, two calls, multi-line string with special characters.
      "<tool_call><function=write_file><parameter=path>src/x.py</parameter><parameter=content>"
      "\nimport os\nif a < b:\n    print(\"&amp; \\\\ é\")\n</parameter></function></tool_call>"
      "<tool_call><function=execute_bash><parameter=command>python src/x.py</parameter>"
      "<parameter=timeout> 30 </parameter></function></tool_call>",
      // Unknown function between known ones, object/array/null values, entities.
      "<tool_call>\n<function=nope>\n<parameter=a>1</parameter>\n</function>\n</tool_call>\n"
      "<tool_call>\n<function=get_weather>\n<parameter=options>{&quot;a&quot;: [1, 2]}"
      "</parameter>\n<parameter=tags>[\"x\"]</parameter>\n<parameter=limit>null</parameter>\n"
      "<parameter=note>null</parameter>\n</function>\n</tool_call>",
      // Malformed and truncated pieces.
      "a <tool_call> b <tool_call><function=ping>junk</function> tail <tool_",
      "<tool_call><function=write_file><parameter=content>cut </param",
      "<tool_call><function=get_weather><parameter=days>4",
      "<tool_call>\n<function=get_weather",
  };
  for (const auto& text : outputs) {
    ToolParseResult whole = Parse(text);
    for (size_t i = 0; i <= text.size(); ++i)
      ExpectSameResult(Stream({text.substr(0, i), text.substr(i)}), whole,
                       text + " | split at " + std::to_string(i));
    std::vector<std::string> chars;
    for (char c : text) chars.push_back(std::string(1, c));
    ExpectSameResult(Stream(chars), whole, text + " | one char at a time");
  }
}

}  // namespace
}  // namespace mimo
