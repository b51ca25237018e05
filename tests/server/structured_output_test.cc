// BuildConstraint, the server's entry to structured outputs: which requests get a constraint,
// which errors (param and message) bad ones get, and the up-front max_tokens check against the
// shortest complete output counted independently (tokens of a hand-written shortest answer).
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include "grammar/grammar_cache.h"
#include "grammar/grammar_test_env.h"
#include "server/api_server.h"

namespace mimo {
namespace {

using testing::EosIds;
using testing::QwenTokenizer;
using testing::QwenVocab;
using Json = nlohmann::ordered_json;

ServingModel Model(GrammarCache* cache) {
  ServingModel m;
  m.tokenizer = &QwenTokenizer();
  m.grammars = cache;
  m.think_start_id = QwenTokenizer().TokenToId("<think>");
  m.think_end_id = QwenTokenizer().TokenToId("</think>");
  m.tool_call_id = QwenTokenizer().TokenToId("<tool_call>");
  return m;
}

Json Tools() {
  return Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}])");
}

Json SchemaFormat(const char* schema) {
  return {{"type", "json_schema"},
          {"json_schema", {{"name", "s"}, {"schema", Json::parse(schema)}}}};
}

TEST(BuildConstraint, OnlyRequestsThatNeedOneGetOne) {
  GrammarCache cache(QwenVocab());
  const ServingModel m = Model(&cache);
  ConstraintFactory f;
  ConstraintRequest plain;
  EXPECT_FALSE(BuildConstraint(plain, m, &f));
  EXPECT_FALSE(f) << "no format, no tools";
  ConstraintRequest thinking;
  thinking.thinking = true;
  EXPECT_FALSE(BuildConstraint(thinking, m, &f));
  EXPECT_FALSE(f) << "a reasoning block without a budget or an answer format";
  thinking.reasoning_budget = 64;
  EXPECT_FALSE(BuildConstraint(thinking, m, &f));
  EXPECT_TRUE(f) << "a budget alone";
  ConstraintRequest none;
  none.tools = Tools();
  EXPECT_FALSE(BuildConstraint(none, m, &f));
  ASSERT_TRUE(f) << "tool_choice none with tools: the call tag is masked";
  auto c = f();
  std::vector<uint32_t> mask(QwenVocab()->mask_words());
  c->FillMask(mask.data(), EosIds(), 100);
  const int32_t tag = m.tool_call_id;
  EXPECT_FALSE((mask[tag >> 5] >> (tag & 31)) & 1u);
  ConstraintRequest unexpressible;  // auto, tools the grammar cannot express, none strict
  unexpressible.tools = Json::parse(R"([{"type": "function", "function": {"name": "g",
    "parameters": {"type": "object", "patternProperties": {"x": {}}}}}])");
  unexpressible.tool_choice = "auto";
  EXPECT_FALSE(BuildConstraint(unexpressible, m, &f));
  EXPECT_FALSE(f);
}

TEST(BuildConstraint, BadInputNamesWhatIsWrong) {
  GrammarCache cache(QwenVocab());
  const ServingModel m = Model(&cache);
  ConstraintFactory f;
  ConstraintRequest r;
  r.response_format = SchemaFormat(R"({"type": "object", "patternProperties": {"a": {}}})");
  auto e = BuildConstraint(r, m, &f);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "response_format");
  EXPECT_NE(e->message.find("patternProperties"), std::string::npos) << e->message;
  r.response_format = {{"type", "json_schema"}};
  e = BuildConstraint(r, m, &f);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("json_schema.schema"), std::string::npos) << e->message;
  ConstraintRequest strict;
  strict.tools = Json::parse(R"([{"type": "function", "function": {"name": "g", "strict": true,
    "parameters": {"type": "object", "patternProperties": {"x": {}}}}}])");
  strict.tool_choice = "auto";
  e = BuildConstraint(strict, m, &f);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools");
  ServingModel off = m;
  off.grammars = nullptr;
  ConstraintRequest forced;
  forced.tools = Tools();
  forced.tool_choice = "required";
  e = BuildConstraint(forced, off, &f);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tool_choice");
}

// The shortest answer of {"a": integer} is `{"a":0}`; its fewest tokens are those of the best
// spelling the vocabulary has (counted here by trying the tokenizer's encodings of the
// candidates), plus the end.
TEST(BuildConstraint, RefusesMaxTokensBelowTheShortestOutput) {
  GrammarCache cache(QwenVocab());
  const ServingModel m = Model(&cache);
  size_t fewest = 1 << 30;
  for (const char* text : {"{\"a\":0}", "{\"a\": 0}", "{ \"a\":0}", "{\"a\":0 }"})
    fewest = std::min(fewest, QwenTokenizer().Encode(text, false).size());
  const int need = static_cast<int>(fewest) + 1;  // + the end
  ConstraintRequest r;
  r.response_format = SchemaFormat(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                       "required": ["a"], "additionalProperties": false})");
  ConstraintFactory f;
  r.max_tokens = need - 1;
  auto e = BuildConstraint(r, m, &f);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "max_tokens");
  EXPECT_NE(e->message.find("at least " + std::to_string(need)), std::string::npos) << e->message;
  r.max_tokens = need;
  EXPECT_FALSE(BuildConstraint(r, m, &f));
  EXPECT_TRUE(f);
  r.max_tokens = 0;  // no budget given: no check
  EXPECT_FALSE(BuildConstraint(r, m, &f));
  // The prompt opened the reasoning block: `</think>` comes first.
  r.prompt_in_reasoning = true;
  r.max_tokens = need;
  e = BuildConstraint(r, m, &f);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("at least " + std::to_string(need + 1)), std::string::npos)
      << e->message;
}

}  // namespace
}  // namespace mimo
