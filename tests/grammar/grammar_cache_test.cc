// GrammarCache returns the same compiled grammar for the same request and compiles anew for a
// different one; options that change the grammar are part of the key.
#include "grammar/grammar_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include <nlohmann/json.hpp>

#include "grammar/grammar_matcher.h"
#include "grammar/grammar_walker.h"
#include "grammar_test_env.h"

namespace mimo {
namespace {

using testing::QwenVocab;

TEST(GrammarCache, SameRequestSameGrammar) {
  GrammarCache cache(QwenVocab(), 2);
  const char* a = R"({"type": "integer"})";
  const char* b = R"({"type": "boolean"})";
  auto g1 = cache.JsonSchema(a);
  auto g2 = cache.JsonSchema(a);
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_EQ(g1->get(), g2->get());
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
  GrammarOptions none;
  none.whitespace = GrammarOptions::Whitespace::kNone;
  auto g3 = cache.JsonSchema(a, none);
  EXPECT_NE(g3->get(), g1->get());
  // Capacity 2: a third grammar evicts the least recently used (a with default options).
  ASSERT_TRUE(cache.JsonSchema(b).ok());
  auto g4 = cache.JsonSchema(a);
  EXPECT_NE(g4->get(), g1->get());
  // Errors are returned, not cached.
  EXPECT_FALSE(cache.JsonSchema("{").ok());
  EXPECT_FALSE(cache.JsonSchema("{").ok());
  const int64_t misses = cache.misses();
  auto t1 = cache.ToolCalls(R"([{"type": "function", "function": {"name": "f"}}])", "", false);
  auto t2 = cache.ToolCalls(R"([{"type": "function", "function": {"name": "f"}}])", "f", false);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_NE(t1->get(), t2->get());
  EXPECT_EQ(cache.misses(), misses + 2);
}

TEST(GrammarCache, ConcurrentRequestsShareOneGrammar) {
  GrammarCache cache(QwenVocab());
  std::vector<std::shared_ptr<const Grammar>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto g = cache.JsonObject();
      ASSERT_TRUE(g.ok());
      got[i] = *g;
      // Matchers of one grammar on several threads.
      WalkOptions o;
      o.seed = 10 + i;
      EXPECT_TRUE(GrammarWalker::Walk(*g, o, testing::EosIds()).terminated);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 1; i < 4; ++i) EXPECT_EQ(got[i].get(), got[0].get());
}

TEST(GrammarOptions, MaxStringLengthBoundsUnboundedStrings) {
  GrammarOptions o;
  o.max_string_length = 5;
  auto g = Grammar::FromJsonSchema(
      R"({"type": "object", "properties": {"s": {"type": "string"}, "t": {"type": "string", "maxLength": 9}}, "required": ["s", "t"]})",
      QwenVocab(), o);
  ASSERT_TRUE(g.ok());
  for (int i = 0; i < 20; ++i) {
    WalkOptions w;
    w.seed = i;
    w.steer = 0;  // never steer: only the bound ends the strings
    w.steer_after = 1 << 20;
    WalkResult r = GrammarWalker::Walk(*g, w, testing::EosIds());
    ASSERT_TRUE(r.terminated) << r.text;
    auto v = nlohmann::json::parse(r.text);
    std::string s = v["s"], t = v["t"];
    auto chars = [](const std::string& x) {
      int n = 0;
      for (char c : x) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
      return n;
    };
    EXPECT_LE(chars(s), 5) << r.text;
    EXPECT_LE(chars(t), 9) << r.text;  // the schema's own bound is kept
  }
}

TEST(MaskLogits, ClearBitsBecomeMinusInfinity) {
  std::vector<float> logits(70, 1.0f);
  std::vector<uint32_t> mask = {0xFFFFFFFFu, 0x00000001u, 0x2u};
  MaskLogits(mask.data(), logits.data(), 66);
  for (int i = 0; i < 70; ++i) {
    const bool kept = i < 32 || i == 32 || i == 65 || i >= 66;
    EXPECT_EQ(std::isinf(logits[i]), !kept) << i;
  }
}

}  // namespace
}  // namespace mimo
