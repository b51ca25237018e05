// Tool-call grammars checked with the chat layer's own parser (chat/tool_call_parser.h): every
// random walk parses into calls of known functions (only the named one when forced; one call
// unless parallel) whose arguments validate against the function's parameters, and nothing
// else is left as content.
#include "grammar/tool_call_grammar.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/tool_call_parser.h"
#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar/grammar_walker.h"
#include "grammar_test_env.h"
#include "schema_checker.h"

namespace mimo {
namespace {

using testing::EosIds;
using testing::QwenVocab;
using testing::SchemaChecker;

std::string ToolsText() {
  return testing::ReadFile(std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/tools/tools.json");
}

void CheckWalks(const std::string& only_function, bool parallel, int samples) {
  const std::string tools_text = ToolsText();
  auto g = Grammar::ToolCalls(tools_text, only_function, parallel, QwenVocab());
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto schema = ToolSchema::FromJsonText(tools_text);
  ASSERT_TRUE(schema.ok());
  const SchemaChecker::Json tools = SchemaChecker::Json::parse(tools_text);
  std::map<std::string, SchemaChecker::Json> params;
  for (const auto& t : tools)
    params[t["function"]["name"]] = t["function"].value("parameters", SchemaChecker::Json::object());
  std::set<std::string> names_seen;
  for (int s = 0; s < samples; ++s) {
    WalkOptions o;
    o.seed = 500 + s;
    WalkResult r = GrammarWalker::Walk(*g, o, EosIds());
    ASSERT_TRUE(r.terminated && !r.stuck) << r.text;
    ToolParseResult p = MimoToolCallParser::Parse(*schema, r.text, {.id_seed = 1});
    EXPECT_EQ(p.content, "") << r.text;
    ASSERT_GE(p.tool_calls.size(), 1u) << r.text;
    if (!parallel) {
      EXPECT_EQ(p.tool_calls.size(), 1u) << r.text;
    }
    for (const ToolCall& c : p.tool_calls) {
      names_seen.insert(c.name);
      ASSERT_TRUE(params.count(c.name)) << c.name;
      if (!only_function.empty()) {
        EXPECT_EQ(c.name, only_function);
      }
      auto args = SchemaChecker::Json::parse(c.arguments, nullptr, false);
      ASSERT_FALSE(args.is_discarded()) << c.arguments;
      // Nested $refs resolve inside the function's parameters document.
      const SchemaChecker::Json& ps = params[c.name];
      EXPECT_EQ(SchemaChecker(ps).Check(args), "") << c.name << " " << c.arguments << "\n" << r.text;
    }
  }
  if (only_function.empty()) {
    EXPECT_GE(names_seen.size(), 3u) << "walks should reach most tools";
  }
}

TEST(ToolCallGrammar, RequiredCallsParseIntoValidArguments) { CheckWalks("", false, 40); }
TEST(ToolCallGrammar, ParallelCallsParseIntoValidArguments) { CheckWalks("", true, 30); }
TEST(ToolCallGrammar, NamedFunctionIsTheOnlyOne) { CheckWalks("create_event", false, 30); }

// A string parameter whose anyOf refers back to itself: the raw-string compiler follows the $ref
// each time, so it must stop at its nesting limit instead of overflowing the stack.
TEST(ToolCallGrammar, SelfReferencingStringParameterEnds) {
  const char* tools = R"([{"type": "function", "function": {"name": "f", "parameters": {
      "type": "object", "properties": {"a": {"anyOf": [{"$ref": "#/properties/a"}]}}}}}])";
  auto g = Grammar::ToolCalls(tools, "", false, QwenVocab());
  ASSERT_FALSE(g.ok());  // reaching here at all is the point: no stack overflow
  EXPECT_NE(g.status().message().find("parameter 'a'"), std::string::npos) << g.status().message();
}

// Keywords of the wrong type in a tool's parameters are errors naming the keyword.
TEST(ToolCallGrammar, WrongKeywordTypesInParametersAreErrors) {
  const char* tools = R"([{"type": "function", "function": {"name": "f", "parameters": {
      "type": "object", "properties": {"a": {"type": "string", "minLength": "a"}}}}}])";
  auto g = Grammar::ToolCalls(tools, "", false, QwenVocab());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'minLength'"), std::string::npos) << g.status().message();
}

TEST(ToolCallGrammar, RejectsWhatTheFormatCannotCarry) {
  struct Case {
    const char* tools;
    const char* only;
    const char* needle;
  };
  const Case cases[] = {
      {R"([{"type": "function", "function": {"name": "f"}}])", "g", "'g' is not among the tools"},
      {R"([{"type": "function", "function": {"name": "a>b"}}])", "", "cannot be written"},
      {R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"n": {"enum": [1, 2]}}}}}])", "", "passes it as a string"},
      {R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"o": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "object"}}}}}])", "",
       "passes it as a string"},
      {R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"x": {"type": "integer", "multipleOf": 2}}}}}])", "", "'multipleOf'"},
      {R"([{"type": "function", "function": {"name": "f", "parameters": {"anyOf": [
          {"type": "object"}, {"type": "null"}]}}}])", "", "'anyOf' in 'parameters'"},
      {R"([{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/$defs/a",
          "$defs": {"a": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}}])", "",
       "'parameters' given by '$ref'"},
      {"[]", "", "non-empty"},
      {"{", "", "not valid JSON"},
  };
  for (const Case& c : cases) {
    auto g = Grammar::ToolCalls(c.tools, c.only, false, QwenVocab());
    ASSERT_FALSE(g.ok()) << c.tools;
    EXPECT_NE(g.status().message().find(c.needle), std::string::npos)
        << c.tools << ": " << g.status().message();
  }
}

// tool_choice "auto": the model wrote `<tool_call>` unconstrained (here ending inside a token);
// the matcher takes that text and constrains the rest.
TEST(ToolCallGrammar, ContinuesAfterAnOpeningTagWrittenFreely) {
  auto g = Grammar::ToolCalls(ToolsText(), "", false, QwenVocab());
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  EXPECT_FALSE(m.AcceptString("<tool_cal_"));
  ASSERT_TRUE(m.AcceptString("<tool_call>\n<function=pi"));
  EXPECT_EQ(m.num_accepted(), 1);
  const auto ids = testing::QwenTokenizer().Encode("ng>\n</function>\n</tool_call>", false);
  for (int32_t id : ids) ASSERT_TRUE(m.AcceptToken(id)) << id;
  EXPECT_TRUE(m.IsTerminated());
  m.Rollback(static_cast<int>(ids.size()) + 1);
  EXPECT_EQ(m.num_accepted(), 0);
}

// Strings that would end a raw parameter early, or that the parser's HTML unescaping would
// change, never reach a parameter.
TEST(ToolCallGrammar, ParameterValuesSurviveTheParser) {
  const char* tools = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"text": {"type": "string"}, "obj": {"type": "object", "properties":
      {"s": {"type": "string"}}, "required": ["s"], "additionalProperties": false},
      "pick": {"type": "string", "enum": ["a</parameter>b", "x&amp;y", "<b>"]}},
      "required": ["text", "obj", "pick"]}}}])";
  auto g = Grammar::ToolCalls(tools, "f", false, QwenVocab());
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto schema = ToolSchema::FromJsonText(tools);
  for (int s = 0; s < 40; ++s) {
    WalkOptions o;
    o.seed = 900 + s;
    o.steer = 0.05;  // long strings: more chances to meet '<' and '&'
    WalkResult r = GrammarWalker::Walk(*g, o, EosIds());
    ASSERT_TRUE(r.terminated) << r.text;
    ToolParseResult p = MimoToolCallParser::Parse(*schema, r.text, {.id_seed = 1});
    ASSERT_EQ(p.tool_calls.size(), 1u) << r.text;
    auto args = nlohmann::ordered_json::parse(p.tool_calls[0].arguments);
    const std::string pick = args["pick"];
    EXPECT_TRUE(pick == "x&amp;y" || pick == "<b>") << pick;  // the value with the tag is dropped
    // The object's string comes back exactly as the grammar spelled it.
    const size_t at = r.text.find("<parameter=obj>") + 15;
    const std::string raw = r.text.substr(at, r.text.find("</parameter>", at) - at);
    EXPECT_EQ(nlohmann::ordered_json::parse(raw), args["obj"]) << raw;
    EXPECT_EQ(raw.find('<'), std::string::npos);
    EXPECT_EQ(raw.find('&'), std::string::npos);
  }
}

}  // namespace
}  // namespace mimo
