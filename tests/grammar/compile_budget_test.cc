// Grammar compiles within a budget (compile_budget.h): the attacks of issue 44 - a 13-byte pattern
// whose repetitions multiply, string bounds no output can reach, schemas whose automata or tables
// would take gigabytes - end in a ResourceExhausted / InvalidArgument naming what ran out, while
// the recorded agents' tools compile within the default limits. The grammar cache keeps what
// compiled within its byte bound and nothing of a failed compile.
#include "grammar/compile_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/grammar_cache.h"
#include "grammar_test_env.h"

namespace mimo {
namespace {

using testing::QwenVocab;

std::string StringSchema(const std::string& keywords) {
  return R"({"type": "string", )" + keywords + "}";
}

// What mimo serve passes: 32768 tokens of context x the longest Qwen token (128 characters).
GrammarOptions ServerOptions() {
  GrammarOptions o;
  o.max_text_chars = int64_t{32768} * 128;
  return o;
}

void ExpectRefused(const StatusOr<std::shared_ptr<const Grammar>>& g, StatusCode code,
                   const std::string& says) {
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), code) << g.status().message();
  EXPECT_NE(g.status().message().find(says), std::string::npos) << g.status().message();
}

TEST(CompileBudget, NestedRepetitionsAreCountedAsAProduct) {
  // 1000 x 1000 x 1000 copies of x: refused from the size of the first copy, before the rest.
  ExpectRefused(Grammar::FromJsonSchema(StringSchema(R"("pattern": "((x{1000}){1000}){1000}")"),
                                        QwenVocab(), ServerOptions()),
                StatusCode::kResourceExhausted, "repetitions multiply");
  // 10 000 copies fit the automaton limit, but the string language would need 10 000 states,
  // each a walk of the vocabulary and up to ~1 MB of profile: refused at the state limit.
  ExpectRefused(Grammar::FromJsonSchema(StringSchema(R"("pattern": "(x{100}){100}")"), QwenVocab(),
                                        ServerOptions()),
                StatusCode::kResourceExhausted, "'pattern' is too complex");
  // A pattern of the size real schemas use still compiles.
  EXPECT_TRUE(Grammar::FromJsonSchema(StringSchema(R"("pattern": "^[A-Z]{2}-(x{10}){3}$")"),
                                      QwenVocab(), ServerOptions())
                  .ok());
}

TEST(CompileBudget, StringBoundsNoOutputCanReach) {
  const GrammarOptions o = ServerOptions();
  // minLength beyond what the context can hold can never be met.
  ExpectRefused(Grammar::FromJsonSchema(StringSchema(R"("minLength": 1000000000)"), QwenVocab(), o),
                StatusCode::kInvalidArgument, "minLength 1000000000 can never be met");
  ExpectRefused(
      Grammar::FromJsonSchema(StringSchema(R"("minLength": 1e300)"), QwenVocab(), o),
      StatusCode::kInvalidArgument, "can never be met");
  // maxLength beyond it can never bind: the grammar is the unbounded string's, same size.
  auto unbounded = Grammar::FromJsonSchema(StringSchema(R"("minLength": 1)"), QwenVocab(), o);
  auto huge = Grammar::FromJsonSchema(StringSchema(R"("minLength": 1, "maxLength": 1000000000)"),
                                      QwenVocab(), o);
  ASSERT_TRUE(unbounded.ok() && huge.ok()) << huge.status().message();
  EXPECT_EQ((*huge)->bytes(), (*unbounded)->bytes());
  EXPECT_EQ((*huge)->pda().text_rule(0).max_chars, -1);
  // A bound that can bind but whose distance table would be too large: refused, naming it.
  ExpectRefused(Grammar::FromJsonSchema(StringSchema(R"("maxLength": 4000000)"), QwenVocab(), o),
                StatusCode::kResourceExhausted, "string-length table entries");
  // Inside a tool call's raw parameters too.
  const std::string tools =
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"a": {"type": "string", "minLength": 1000000000}}}}}])";
  ExpectRefused(Grammar::ToolCalls(tools, "", false, QwenVocab(), o), StatusCode::kInvalidArgument,
                "can never be met");
}

TEST(CompileBudget, EachLimitNamesWhatRanOut) {
  const std::string object =
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array",
          "items": {"type": "number"}}, "c": {"enum": ["x", "y", "z"]}}, "required": ["a", "b", "c"]})";
  GrammarOptions o;
  o.limits.max_states = 20;
  ExpectRefused(Grammar::FromJsonSchema(object, QwenVocab(), o), StatusCode::kResourceExhausted,
                "more than 20 automaton states");
  o = GrammarOptions();
  o.limits.max_bytes = 1000;
  ExpectRefused(Grammar::FromJsonSchema(object, QwenVocab(), o), StatusCode::kResourceExhausted,
                "bytes of tables");
  o = GrammarOptions();
  o.limits.max_nfa_states = 50;
  ExpectRefused(Grammar::FromJsonSchema(object, QwenVocab(), o), StatusCode::kResourceExhausted,
                "automaton states before determinizing");
  // A string language whose profile is not cached yet (a vocabulary of its own): its states are
  // charged, one short of them is refused.
  const std::string pattern = StringSchema(R"("pattern": "^q[0-7]{2}z$")");
  auto fresh = [] { return TokenVocabulary::FromTokenizer(testing::QwenTokenizer()); };
  auto ok = Grammar::FromJsonSchema(pattern, fresh());
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  o = GrammarOptions();
  o.limits.max_text_states = (*ok)->pda().text_rule(0).dfa->num_states() - 1;
  ExpectRefused(Grammar::FromJsonSchema(pattern, fresh(), o), StatusCode::kResourceExhausted,
                "string-pattern states");
  o = GrammarOptions();
  o.limits.max_text_nodes = 1000;
  ExpectRefused(Grammar::FromJsonSchema(StringSchema(R"("maxLength": 5000)"), QwenVocab(), o),
                StatusCode::kResourceExhausted, "string-length table entries");
  // Within the defaults all of these compile.
  EXPECT_TRUE(Grammar::FromJsonSchema(object, QwenVocab()).ok());
  EXPECT_TRUE(Grammar::FromJsonSchema(StringSchema(R"("maxLength": 5000)"), QwenVocab()).ok());
}

TEST(CompileBudget, DeadlineAndCancel) {
  const std::string schema = StringSchema(R"("maxLength": 20000)");
  GrammarOptions o;
  o.limits.deadline_s = 1e-9;
  ExpectRefused(Grammar::FromJsonSchema(schema, QwenVocab(), o), StatusCode::kResourceExhausted,
                "took longer than");
  std::atomic<bool> cancel{true};
  auto g = Grammar::FromJsonSchema(schema, QwenVocab(), {}, &cancel);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(IsCancelledCompile(g.status())) << g.status().message();
  cancel = false;
  EXPECT_TRUE(Grammar::FromJsonSchema(schema, QwenVocab(), {}, &cancel).ok());
}

// 32 tools whose parameters nest 60 objects deep (the issue's 512 took 29 s and 1.45 GB before
// the 400; 32 of them took 40 s and 900 MB to compile): refused at the automaton limit.
TEST(CompileBudget, DeeplyNestedToolsAreRefused) {
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (int t = 0; t < 32; ++t) {
    nlohmann::ordered_json s = {{"type", "string"}};
    for (int d = 0; d < 60; ++d) {
      const std::string key = "a" + std::to_string(d);
      s = {{"type", "object"},
           {"properties", {{key, s}, {"b", {{"type", "integer"}}}}},
           {"required", {key}}};
    }
    tools.push_back({{"type", "function"},
                     {"function", {{"name", "f" + std::to_string(t)}, {"parameters", s}}}});
  }
  ExpectRefused(Grammar::ToolCalls(tools.dump(), "", true, QwenVocab(), ServerOptions()),
                StatusCode::kResourceExhausted, "automaton states");
}

// The largest recorded agent tool set (Claude Code's 12 tools, with a maxLength 524288) compiles
// within the default limits, as a fresh server compiles it.
TEST(CompileBudget, RecordedAgentToolsFitTheDefaults) {
  const auto rec = nlohmann::json::parse(testing::ReadFile(
      std::string(MIMO_SOURCE_DIR) + "/tests/data/agents/claude-code-01-first.json"));
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (const auto& t : rec["body"]["tools"]) {
    tools.push_back({{"type", "function"},
                     {"function", {{"name", t["name"]}, {"parameters", t["input_schema"]}}}});
  }
  ASSERT_EQ(tools.size(), 12u);
  auto g = Grammar::ToolCalls(tools.dump(), "", true, QwenVocab(), ServerOptions());
  ASSERT_TRUE(g.ok()) << g.status().message();
  const GrammarLimits defaults;
  std::printf("Claude Code tools: %d states, %zu bytes (limit %lld)\n", (*g)->stats().num_states,
              (*g)->bytes(), static_cast<long long>(defaults.max_bytes));
  EXPECT_LT(static_cast<int64_t>((*g)->bytes()), defaults.max_bytes);
}

// Every recorded agent's tool set (tests/data/agents: Claude Code, Codex, opencode, pi, Qwen Code)
// compiles into a tool-call constraint with the server's options: with tool_choice auto a tool
// set that does not compile is left unconstrained. The tools are converted as the server does
// (Anthropic input_schema, chat functions, Responses functions and namespaces; custom tools are
// one free-form string; web_search and tool_search are left out).
TEST(CompileBudget, EveryRecordedAgentToolSetCompiles) {
  int sets = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(MIMO_SOURCE_DIR) +
                                                         "/tests/data/agents")) {
    if (e.path().extension() != ".json") continue;
    const auto rec = nlohmann::json::parse(testing::ReadFile(e.path().string()));
    const std::string path = rec["path"];
    nlohmann::json tools = nlohmann::json::array();
    auto fn = [&](const nlohmann::json& name, const nlohmann::json& params) {
      tools.push_back({{"type", "function"}, {"function", {{"name", name}, {"parameters", params}}}});
    };
    const nlohmann::json free_text = {{"type", "object"},
                                      {"properties", {{"input", {{"type", "string"}}}}},
                                      {"required", {"input"}}};
    std::function<void(const nlohmann::json&)> responses = [&](const nlohmann::json& t) {
      const std::string type = t.value("type", "");
      if (type == "function") fn(t["name"], t["parameters"]);
      if (type == "custom") fn(t["name"], free_text);
      if (type == "namespace")
        for (const auto& inner : t["tools"]) responses(inner);
    };
    for (const auto& t : rec["body"].value("tools", nlohmann::json::array())) {
      if (path.starts_with("/v1/messages")) {
        fn(t["name"], t["input_schema"]);
      } else if (path.starts_with("/v1/responses")) {
        responses(t);
      } else if (t.value("type", "") == "function") {
        tools.push_back(t);
      }
    }
    if (tools.empty()) continue;
    ++sets;
    auto g = Grammar::ToolCalls(tools.dump(), "", true, QwenVocab(), ServerOptions());
    EXPECT_TRUE(g.ok()) << e.path().filename() << ": " << g.status().message();
  }
  EXPECT_GE(sets, 10);
}

TEST(GrammarCacheBounds, KeysAreDigestsAndBytesAreBounded) {
  GrammarCache cache(QwenVocab(), 64, size_t{4} << 20);
  // A schema with a 2 MB annotation: the cache holds its digest, not its text.
  const std::string big = R"({"type": "integer", "description": ")" + std::string(2 << 20, 'd') + "\"}";
  ASSERT_TRUE(cache.JsonSchema(big).ok());
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_LT(cache.bytes(), size_t{1} << 20);
  // A grammar larger than the whole bound is returned but not kept: four tools' calls (~20 MB of
  // masks; a string's maxLength no longer makes one large: its distances are banded).
  auto large = cache.ToolCalls(
      testing::ReadFile(std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/tools/tools.json"), "",
      true);
  ASSERT_TRUE(large.ok());
  EXPECT_GT((*large)->bytes(), size_t{4} << 20);
  EXPECT_EQ(cache.size(), 1u);
  // Many small ones: the least recently used go, the bytes stay within the bound.
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(cache.JsonSchema(StringSchema(R"("maxLength": )" + std::to_string(1000 + i))).ok());
    EXPECT_LE(cache.bytes(), size_t{4} << 20);
  }
  EXPECT_LT(cache.size(), 41u);
}

TEST(GrammarCacheBounds, FailedCompilesLeaveNothing) {
  GrammarCache cache(QwenVocab());
  GrammarOptions o = ServerOptions();
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(cache.JsonSchema(StringSchema(R"("maxLength": 4000000)"), o).ok());
    EXPECT_FALSE(cache.JsonSchema(StringSchema(R"("pattern": "(x{100}){100}")"), o).ok());
  }
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  // The refusal is remembered: the same schema again is refused without compiling.
  EXPECT_EQ(cache.misses(), 2);
  auto again = cache.JsonSchema(StringSchema(R"("pattern": "(x{100}){100}")"), o, {nullptr, true});
  ASSERT_FALSE(again.ok());
  EXPECT_FALSE(GrammarCache::IsMiss(again.status()));
  EXPECT_NE(again.status().message().find("'pattern' is too complex"), std::string::npos);
  std::atomic<bool> cancel{true};
  auto g = cache.JsonSchema(StringSchema(R"("maxLength": 777)"), o, {&cancel, false});
  EXPECT_TRUE(IsCancelledCompile(g.status()));
  EXPECT_EQ(cache.size(), 0u);
}

TEST(GrammarCacheBounds, CachedOnlyLookupsAndOneCompilePerKey) {
  GrammarCache cache(QwenVocab());
  const std::string schema = StringSchema(R"("maxLength": 3000)");
  auto miss = cache.JsonSchema(schema, {}, {nullptr, true});
  ASSERT_FALSE(miss.ok());
  EXPECT_TRUE(GrammarCache::IsMiss(miss.status()));
  EXPECT_EQ(cache.misses(), 0);  // nothing was compiled
  std::vector<std::shared_ptr<const Grammar>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto g = cache.JsonSchema(schema);
      ASSERT_TRUE(g.ok());
      got[i] = *g;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.misses(), 1);  // the three others waited for the first compile
  for (int i = 1; i < 4; ++i) EXPECT_EQ(got[i].get(), got[0].get());
  auto hit = cache.JsonSchema(schema, {}, {nullptr, true});
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->get(), got[0].get());
}

}  // namespace
}  // namespace mimo
