// JinjaValue: Python str()/repr(), json.dumps and comparison semantics, written from the Python
// language reference.
#include "jinja/jinja_value.h"

#include <gtest/gtest.h>

namespace mimo::jinja {
namespace {

TEST(JinjaValue, PyFloatRepr) {
  EXPECT_EQ(PyFloatRepr(1.0), "1.0");
  EXPECT_EQ(PyFloatRepr(0.5), "0.5");
  EXPECT_EQ(PyFloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PyFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PyFloatRepr(0.00001), "1e-05");
  EXPECT_EQ(PyFloatRepr(-2.5e-10), "-2.5e-10");
  EXPECT_EQ(PyFloatRepr(123456789.125), "123456789.125");
  EXPECT_EQ(PyFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(PyFloatRepr(1.0 / 0.0), "inf");
}

TEST(JinjaValue, StrAndRepr) {
  EXPECT_EQ(JinjaValue::Bool(true).Str(), "True");
  EXPECT_EQ(JinjaValue::None().Str(), "None");
  EXPECT_EQ(JinjaValue::Undefined("x").Str(), "");
  EXPECT_EQ(JinjaValue::Int(-7).Str(), "-7");
  auto m = std::make_shared<ValueMap>();
  m->Set("b", JinjaValue::String("it's"));
  m->Set("a", JinjaValue::List({JinjaValue::Float(2.0), JinjaValue::None()}));
  m->Set("t", JinjaValue::List({JinjaValue::Int(1)}, /*tuple=*/true));
  EXPECT_EQ(JinjaValue::Map(m).Str(), "{'b': \"it's\", 'a': [2.0, None], 't': (1,)}");
  EXPECT_EQ(PyStrRepr("a\nb\\'"), "\"a\\nb\\\\'\"");
  EXPECT_EQ(PyStrRepr("both ' and \""), "'both \\' and \"'");
  EXPECT_EQ(PyStrRepr("\x01\xc2\xa0\xe4\xb8\xad"), "'\\x01\\xa0\xe4\xb8\xad'");  // NBSP escaped, CJK kept
}

TEST(JinjaValue, JsonDumpsLikePython) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(
      R"({"z": 1, "a": [true, null, 1.5, "é\n\"", {}], "e": []})");
  JinjaValue v = FromJson(j);
  EXPECT_EQ(ToJson(v), "{\"z\": 1, \"a\": [true, null, 1.5, \"é\\n\\\"\", {}], \"e\": []}");
  JsonDumpOptions indent;
  indent.indent = 2;
  EXPECT_EQ(ToJson(v, indent),
            "{\n  \"z\": 1,\n  \"a\": [\n    true,\n    null,\n    1.5,\n    \"é\\n\\\"\",\n"
            "    {}\n  ],\n  \"e\": []\n}");
  JsonDumpOptions sorted;
  sorted.sort_keys = true;
  EXPECT_EQ(ToJson(FromJson(nlohmann::ordered_json::parse(R"({"b":1,"a":2})")), sorted),
            "{\"a\": 2, \"b\": 1}");
  EXPECT_EQ(ToJson(JinjaValue::String(std::string("\x1f", 1))), "\"\\u001f\"");
  EXPECT_THROW(ToJson(JinjaValue::Undefined("u")), JinjaError);
}

TEST(JinjaValue, EqualityAndOrdering) {
  EXPECT_TRUE(ValuesEqual(JinjaValue::Int(1), JinjaValue::Float(1.0)));
  EXPECT_TRUE(ValuesEqual(JinjaValue::Bool(true), JinjaValue::Int(1)));
  EXPECT_FALSE(ValuesEqual(JinjaValue::String("1"), JinjaValue::Int(1)));
  EXPECT_FALSE(ValuesEqual(JinjaValue::List({JinjaValue::Int(1)}, true),
                           JinjaValue::List({JinjaValue::Int(1)})));  // (1,) != [1]
  EXPECT_TRUE(ValuesEqual(JinjaValue::Undefined("a"), JinjaValue::Undefined("b")));
  EXPECT_LT(CompareValues(JinjaValue::String("a"), JinjaValue::String("b")), 0);
  EXPECT_GT(CompareValues(JinjaValue::Float(2.5), JinjaValue::Int(2)), 0);
  EXPECT_THROW(CompareValues(JinjaValue::Int(1), JinjaValue::String("a")), JinjaError);
}

TEST(JinjaValue, LengthCountsCodePoints) {
  EXPECT_EQ(JinjaValue::String("h\xc3\xa9llo \xf0\x9f\x98\x80").Length(), 7);
  EXPECT_EQ(JinjaValue::Undefined("u").Length(), 0);
  EXPECT_THROW(JinjaValue::Int(3).Length(), JinjaError);
}

TEST(JinjaValue, FromJsonKeepsKeyOrderAndTypes) {
  auto j = nlohmann::ordered_json::parse(R"({"b": 1, "a": 2.0, "c": 18446744073709551615})");
  JinjaValue v = FromJson(j);
  ASSERT_TRUE(v.is_map());
  EXPECT_EQ(v.map().items()[0].first, "b");
  EXPECT_TRUE(v.map().Find("b")->is_int());
  EXPECT_TRUE(v.map().Find("a")->is_float());
  EXPECT_TRUE(v.map().Find("c")->is_float());  // beyond int64: kept as a number
}

}  // namespace
}  // namespace mimo::jinja
