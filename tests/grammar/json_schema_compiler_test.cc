// JSON Schema compilation: every schema of the suite compiles, random walks through it always end
// (IsTerminated exactly when the output is complete) with JSON that our independent checker
// validates, and unsupported or unsatisfiable schemas are rejected with a message naming why.
#include "grammar/json_schema_compiler.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

// Empty when `text` is a complete JSON document valid for `schema`.
std::string Invalidity(const SchemaChecker::Json& schema, const std::string& text) {
  SchemaChecker::Json v = SchemaChecker::Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return "not JSON";
  return SchemaChecker(schema).Check(v);
}

TEST(JsonSchemaCompiler, SuiteWalksAreValidAndEndExactlyWhenComplete) {
  const auto suite = testing::SchemaSuite();
  ASSERT_GE(suite.size(), 20u);
  const std::vector<int32_t> eos = EosIds();
  for (const auto& s : suite) {
    auto g = Grammar::FromJsonSchema(s.text, QwenVocab());
    ASSERT_TRUE(g.ok()) << s.name << ": " << g.status().message();
    const auto schema = SchemaChecker::Json::parse(s.text);
    for (int w = 0; w < 15; ++w) {
      WalkOptions o;
      o.seed = 77 + w;
      WalkResult r = GrammarWalker::Walk(*g, o, eos);
      ASSERT_FALSE(r.stuck) << s.name << " seed " << o.seed << ": stuck after " << r.text;
      ASSERT_TRUE(r.terminated) << s.name << " seed " << o.seed;
      EXPECT_EQ(Invalidity(schema, r.text), "") << s.name << ": " << r.text;
      // Replay: the matcher may end exactly at the prefixes that are complete, valid documents.
      GrammarMatcher m(*g);
      std::string prefix;
      for (size_t i = 0; i < r.tokens.size(); ++i) {
        const int32_t t = r.tokens[i];
        if (std::find(eos.begin(), eos.end(), t) != eos.end()) {
          EXPECT_EQ(i + 1, r.tokens.size());
          break;
        }
        ASSERT_TRUE(m.AcceptToken(t));
        prefix += QwenVocab()->bytes(t);
        const bool complete = Invalidity(schema, prefix).empty();
        ASSERT_EQ(m.CanTerminate(), complete) << s.name << ": at '" << prefix << "'";
        if (!m.CanTerminate()) {
          ASSERT_FALSE(m.IsTerminated());
        }
      }
    }
  }
}

// An unsupported keyword or pattern feature must be refused, naming it, never ignored.
TEST(JsonSchemaCompiler, RejectsUnsupportedFeaturesNamingThem) {
  struct Case {
    const char* schema;
    StatusCode code;
    const char* needle;
  };
  const Case cases[] = {
      {R"({"type": "object", "patternProperties": {"^a": {}}})", StatusCode::kUnimplemented, "'patternProperties'"},
      {R"({"type": "object", "propertyNames": {"maxLength": 3}})", StatusCode::kUnimplemented, "'propertyNames'"},
      {R"({"if": {"type": "string"}, "then": {"maxLength": 2}})", StatusCode::kUnimplemented, "'if'"},
      {R"({"not": {"type": "null"}})", StatusCode::kUnimplemented, "'not'"},
      {R"({"type": "integer", "multipleOf": 3})", StatusCode::kUnimplemented, "'multipleOf'"},
      {R"({"type": "array", "uniqueItems": true})", StatusCode::kUnimplemented, "'uniqueItems'"},
      {R"({"type": "array", "contains": {"type": "integer"}})", StatusCode::kUnimplemented, "'contains'"},
      {R"({"type": "object", "minProperties": 1})", StatusCode::kUnimplemented, "'minProperties'"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", StatusCode::kUnimplemented, "'dependentRequired'"},
      {R"({"type": "object", "unevaluatedProperties": false})", StatusCode::kUnimplemented, "'unevaluatedProperties'"},
      {R"({"type": "string", "format": "hostname"})", StatusCode::kUnimplemented, "'format' 'hostname'"},
      {R"({"$ref": "https://example.com/s.json"})", StatusCode::kUnimplemented, "'$ref'"},
      {R"({"type": "string", "pattern": "^(?=a)b$"})", StatusCode::kUnimplemented, "lookaround"},
      {R"({"type": "string", "pattern": "(a)\\1"})", StatusCode::kUnimplemented, "backreference"},
      {R"({"type": "string", "pattern": "\\bword"})", StatusCode::kUnimplemented, "word boundary"},
      {R"({"type": "string", "pattern": "a^b"})", StatusCode::kUnimplemented, "anchor"},
      {R"({"type": "string", "pattern": "\\p{L}"})", StatusCode::kUnimplemented, "\\p"},
      {R"({"allOf": [{"type": "object"}, {"required": ["a"]}]})", StatusCode::kUnimplemented, "'allOf'"},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", StatusCode::kUnimplemented, "'oneOf'"},
      // Values the other branch's pattern or bounds accept: they may match both.
      {R"({"oneOf": [{"enum": ["all", "12"]}, {"type": "string", "pattern": "^[1-9][0-9]*$"}]})", StatusCode::kUnimplemented, "'oneOf'"},
      {R"({"oneOf": [{"type": "string", "pattern": "x"}, {"const": "axb"}]})", StatusCode::kUnimplemented, "'oneOf'"},
      {R"({"oneOf": [{"const": "abc"}, {"type": "string", "minLength": 3}]})", StatusCode::kUnimplemented, "'oneOf'"},
      {R"({"type": "object", "anyOf": [{"required": ["a"]}]})", StatusCode::kUnimplemented, "'anyOf' with sibling"},
      {R"({"$defs": {"a": {"type": "integer"}}, "$ref": "#/$defs/a", "minimum": 3})", StatusCode::kUnimplemented, "'$ref' with sibling"},
      {R"({"type": "array", "minItems": 5000})", StatusCode::kUnimplemented, "minItems/maxItems"},
      {R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})",
       StatusCode::kUnimplemented, "left recursion"},
      {R"({"type": "string", "pattern": "^[a-z]+$", "maxLength": 100000})", StatusCode::kUnimplemented, "maxLength"},
      {"{not json", StatusCode::kInvalidArgument, "not valid JSON"},
      {R"({"type": "string", "minLength": 5, "maxLength": 2})", StatusCode::kInvalidArgument, "minLength > maxLength"},
      {R"({"type": "integer", "minimum": 5, "maximum": 4})", StatusCode::kInvalidArgument, "no integer"},
      {R"({"type": "integer", "enum": ["a", "b"]})", StatusCode::kInvalidArgument, "'enum'"},
      {R"({"type": "object", "properties": {"a": false}, "required": ["a"]})", StatusCode::kInvalidArgument, "'a'"},
      {R"(false)", StatusCode::kInvalidArgument, "never be satisfied"},
      {R"({"$ref": "#/$defs/missing"})", StatusCode::kInvalidArgument, "does not resolve"},
      {R"({"type": "strin"})", StatusCode::kInvalidArgument, "unknown type 'strin'"},
      {R"({"type": "string", "pattern": "^[0-9]{5}$", "maxLength": 3})", StatusCode::kInvalidArgument, "never be satisfied"},
      {R"({"type": "string", "pattern": "(ab"})", StatusCode::kInvalidArgument, "'pattern'"},
  };
  for (const Case& c : cases) {
    auto g = Grammar::FromJsonSchema(c.schema, QwenVocab());
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_EQ(g.status().code(), c.code) << c.schema << ": " << g.status().message();
    EXPECT_NE(g.status().message().find(c.needle), std::string::npos)
        << c.schema << ": '" << g.status().message() << "' does not name " << c.needle;
    EXPECT_EQ(g.status().message().rfind("JSON schema", 0), 0u) << g.status().message();
  }
}

// A keyword of the wrong type ("minLength": "a", from a request) is an InvalidArgument naming the
// keyword, never an exception from the JSON library (which the server answered with a 500).
TEST(JsonSchemaCompiler, WrongKeywordTypesAreInvalidArgumentsNamingTheKeyword) {
  struct Case {
    const char* schema;
    const char* keyword;
  };
  const Case cases[] = {
      {R"({"type": "string", "minLength": "a"})", "'minLength'"},
      {R"({"type": "string", "maxLength": [1]})", "'maxLength'"},
      {R"({"type": "string", "minLength": -1e300})", "'minLength'"},
      {R"({"type": "string", "minLength": 1.5})", "'minLength'"},
      {R"({"type": "array", "minItems": "2"})", "'minItems'"},
      {R"({"type": "array", "maxItems": {}})", "'maxItems'"},
      {R"({"type": "object", "minProperties": "1"})", "'minProperties'"},
      {R"({"type": "number", "minimum": "0"})", "'minimum'"},
      {R"({"type": "number", "maximum": null})", "'maximum'"},
      {R"({"type": "number", "exclusiveMinimum": "0"})", "'exclusiveMinimum'"},
      {R"({"type": "integer", "multipleOf": "3"})", "'multipleOf'"},
      {R"({"type": "string", "pattern": 5})", "'pattern'"},
      {R"({"type": "string", "format": {}})", "'format'"},
      {R"({"enum": "a"})", "'enum'"},
      {R"({"type": "object", "required": [1]})", "'required'"},
      {R"({"type": "object", "properties": []})", "'properties'"},
      {R"({"type": "object", "additionalProperties": 1})", "'additionalProperties'"},
      {R"({"type": "array", "items": 1})", "'items'"},
      {R"({"type": "array", "prefixItems": {}})", "'prefixItems'"},
      {R"({"type": "array", "uniqueItems": "yes"})", "'uniqueItems'"},
      {R"({"anyOf": {"type": "string"}})", "'anyOf'"},
      {R"({"oneOf": "x"})", "'oneOf'"},
      {R"({"allOf": 1})", "'allOf'"},
      {R"({"$ref": 5})", "'$ref'"},
      {R"({"type": 5})", "'type'"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": "9"}}})",
       "'maxLength'"},
      {R"({"$defs": {"a": {"minItems": true}}, "$ref": "#/$defs/a"})", "'minItems'"},
      {R"({"oneOf": [{"type": "object", "properties": [], "required": ["a"]}, {"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": false}]})",
       "'properties'"},
  };
  for (const Case& c : cases) {
    auto g = Grammar::FromJsonSchema(c.schema, QwenVocab());
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument)
        << c.schema << ": " << g.status().message();
    EXPECT_NE(g.status().message().find(c.keyword), std::string::npos)
        << c.schema << ": '" << g.status().message() << "' does not name " << c.keyword;
  }
}

// $ref pointers that do not parse as numbers or escapes are errors, not exceptions.
TEST(JsonSchemaCompiler, MalformedRefPointersAreErrors) {
  for (const char* schema : {
           R"({"$defs": {"a": {"type": "string"}}, "$ref": "#/$defs/%zz"})",
           R"({"$defs": {"a": [{"type": "string"}]}, "$ref": "#/$defs/a/99999999999999999999999"})",
       }) {
    auto g = Grammar::FromJsonSchema(schema, QwenVocab());
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().message();
  }
}

// A oneOf over branches that $ref themselves grows exponentially in the disjointness proof; the
// proof gives up (conservatively: "may overlap") instead of running for hours.
TEST(JsonSchemaCompiler, OneOfProofOverSelfReferencesEnds) {
  std::string refs;
  for (int i = 0; i < 8; ++i) refs += std::string(i ? "," : "") + R"({"$ref": "#/$defs/a"})";
  const std::string schema = R"({"$defs": {"a": {"anyOf": [)" + refs +
                             R"(]}}, "oneOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]})";
  auto g = Grammar::FromJsonSchema(schema, QwenVocab());
  EXPECT_FALSE(g.ok());  // the branches are not provably disjoint: refused, and quickly
}

// Schemas that look unusual but are supported (and what they generate).
TEST(JsonSchemaCompiler, AcceptsAnnotationsAndHarmlessKeywords) {
  for (const char* schema : {
           R"({"type": "string", "title": "t", "description": "d", "default": "x", "examples": ["y"], "$comment": "c"})",
           R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "boolean", "deprecated": true})",
           R"({"type": "integer", "x-vendor": {"anything": 1}, "nullable": true})",
           R"({"type": "array", "uniqueItems": false, "maxItems": 2})",
           R"({"type": "array", "uniqueItems": true, "maxItems": 1})",
           R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true})",
           R"({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})",
           R"({"oneOf": [{"type": "object", "properties": {"t": {"const": "a"}}, "required": ["t"]},
                         {"type": "object", "properties": {"t": {"const": "b"}}, "required": ["t"]}]})",
           R"({"anyOf": [{"type": "string", "pattern": "^[0-9]{5}$", "maxLength": 3}, {"type": "null"}]})",
           // Qwen Code's agent.fork_turns: "all" is not a positive integer string.
           R"({"oneOf": [{"type": "string", "enum": ["all"]}, {"type": "string", "pattern": "^[1-9][0-9]*$"}]})",
           R"({"oneOf": [{"const": "ab"}, {"type": "string", "minLength": 3}]})",
           R"({"oneOf": [{"type": "string", "maxLength": 1}, {"enum": ["ab", "cd"]}]})",
       }) {
    auto g = Grammar::FromJsonSchema(schema, QwenVocab());
    EXPECT_TRUE(g.ok()) << schema << ": " << g.status().message();
  }
}

// Generates the one output of a schema with a single possible value.
std::string OnlyOutput(const std::string& schema) {
  auto g = Grammar::FromJsonSchema(schema, QwenVocab(), {.whitespace = GrammarOptions::Whitespace::kNone});
  EXPECT_TRUE(g.ok()) << g.status().message();
  WalkOptions o;
  WalkResult r = GrammarWalker::Walk(*g, o, EosIds());
  EXPECT_TRUE(r.terminated);
  return r.text;
}

// {"type": "object"} alone is any object; with properties and no additionalProperties, only the
// declared ones are written.
TEST(JsonSchemaCompiler, BareObjectIsFreeForm) {
  auto g = Grammar::FromJsonSchema(R"({"type": "object"})", QwenVocab());
  ASSERT_TRUE(g.ok());
  int non_empty = 0;
  for (int i = 0; i < 20; ++i) {
    WalkOptions o;
    o.seed = i;
    WalkResult r = GrammarWalker::Walk(*g, o, EosIds());
    ASSERT_TRUE(r.terminated);
    auto v = nlohmann::json::parse(r.text);
    ASSERT_TRUE(v.is_object());
    non_empty += !v.empty();
  }
  EXPECT_GT(non_empty, 5);
  auto d = Grammar::FromJsonSchema(R"({"type": "object", "properties": {"a": {"const": 1}}})", QwenVocab());
  ASSERT_TRUE(d.ok());
  for (int i = 0; i < 20; ++i) {
    WalkOptions o;
    o.seed = i;
    auto v = nlohmann::json::parse(GrammarWalker::Walk(*d, o, EosIds()).text);
    for (auto it = v.begin(); it != v.end(); ++it) EXPECT_EQ(it.key(), "a");
  }
}

TEST(JsonSchemaCompiler, CanonicalSpellings) {
  EXPECT_EQ(OnlyOutput(R"({"const": "a\"b\\c\nd\u0001é"})"), "\"a\\\"b\\\\c\\nd\\u0001é\"");
  EXPECT_EQ(OnlyOutput(R"({"const": {"b": [1, 2.5, null], "a": true}})"), R"({"b":[1,2.5,null],"a":true})");
  EXPECT_EQ(OnlyOutput(R"({"type": "object", "properties": {"z": {"const": 1}, "a": {"const": 2}}, "required": ["z", "a"]})"),
            R"({"z":1,"a":2})");  // schema order
  EXPECT_EQ(OnlyOutput(R"({"type": "integer", "minimum": 7, "maximum": 7})"), "7");
  EXPECT_EQ(OnlyOutput(R"({"type": "array", "items": {"const": 0}, "minItems": 3, "maxItems": 3})"), "[0,0,0]");
}

}  // namespace
}  // namespace mimo
