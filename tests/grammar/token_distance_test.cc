// Token distances (TokenDistance, GrammarMatcher::TokensToEnd / FillMaskWithin) against
// independent expectations: a breadth-first search over real matcher positions, one token of a
// small vocabulary at a time (the oracle: it knows nothing of frames or carries); on the real
// Qwen3 vocabulary, FillMaskWithin against trial steps of every token; and outputs steered from
// random cut points of unsteered walks, which must end in their budget and validate.
#include "grammar/token_distance.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <unordered_set>

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

bool Bit(const std::vector<uint32_t>& m, int32_t id) { return (m[id >> 5] >> (id & 31)) & 1u; }

// Printable ASCII and '\n' as single bytes, optionally the multi-byte tokens a JSON or tool-call
// output can use, and a special end token (the last id).
std::shared_ptr<const TokenVocabulary> SmallVocab(bool multi_byte) {
  std::vector<std::string> bytes;
  for (int c = 0x20; c < 0x7f; ++c) bytes.emplace_back(1, static_cast<char>(c));
  bytes.emplace_back("\n");
  if (multi_byte) {
    for (const char* t : {"{\"",
                          "\"}",
                          "\",",
                          "\":",
                          "\"}}",
                          "},",
                          "}}",
                          "]}",
                          "\"]",
                          "\",\"",
                          "\": \"",
                          "\", \"",
                          "true",
                          "false",
                          "null",
                          "ab",
                          "abc",
                          "12",
                          "[{",
                          "}]",
                          "\"}]",
                          "</parameter>",
                          ">\n",
                          "\n<",
                          "<tool_call>",
                          "</tool_call>",
                          "<function=",
                          "<parameter=",
                          "</function>",
                          "\n</",
                          "\n</tool_call>",
                          "q>",
                          "f>\n"})
      bytes.emplace_back(t);
  }
  bytes.emplace_back("<|end|>");
  std::vector<bool> excluded(bytes.size(), false);
  excluded.back() = true;
  return TokenVocabulary::FromBytes(std::move(bytes), std::move(excluded));
}

// Fewest tokens from the matcher's current position to the end (the end counted as one token),
// by breadth-first search over positions, trying every token at every one (AcceptToken). The
// matcher is left where it was.
int32_t OracleTokensToEnd(GrammarMatcher* m, int32_t limit) {
  const TokenVocabulary& vocab = m->grammar().vocab();
  const int base = m->num_accepted();
  auto go_to = [&](const std::vector<int32_t>& path) {
    m->Rollback(m->num_accepted() - base);
    for (int32_t t : path) EXPECT_TRUE(m->AcceptToken(t));
  };
  std::vector<std::vector<int32_t>> frontier = {{}};
  std::unordered_set<std::string> seen = {m->PositionKey()};
  int32_t result = kNoEnd;
  for (int32_t depth = 0; depth <= limit && !frontier.empty(); ++depth) {
    for (const auto& path : frontier) {
      go_to(path);
      if (m->CanTerminate()) result = depth + 1;
    }
    if (result != kNoEnd) break;  // deeper ends cost at least depth + 2
    std::vector<std::vector<int32_t>> next;
    for (const auto& path : frontier) {
      go_to(path);
      for (int32_t id = 0; id < vocab.size(); ++id) {
        if (!vocab.maskable(id) || !m->AcceptToken(id)) continue;
        if (seen.insert(m->PositionKey()).second) {
          next.push_back(path);
          next.back().push_back(id);
        }
        m->Rollback(1);
      }
    }
    frontier = std::move(next);
  }
  go_to({});
  return result;
}

struct OracleCase {
  const char* name;
  std::function<StatusOr<std::shared_ptr<const Grammar>>(std::shared_ptr<const TokenVocabulary>)>
      make;
  int32_t depth = 14;  // search depth (a tool call spelled byte by byte needs about 70)
};

std::vector<OracleCase> OracleCases() {
  GrammarOptions bounded;
  bounded.max_string_length = 3;
  bounded.whitespace = GrammarOptions::Whitespace::kNone;
  auto schema = [](const char* text, GrammarOptions o = {}) {
    return [text, o](std::shared_ptr<const TokenVocabulary> v) {
      return Grammar::FromJsonSchema(text, v, o);
    };
  };
  return {
      {"object with bounded string",
       schema(R"({"type": "object", "properties": {"a": {"type": "string", "minLength": 2,
                 "maxLength": 4}, "b": {"type": "integer"}}, "required": ["a"]})")},
      {"array of enums",
       schema(R"({"type": "array", "items": {"type": "string", "enum": ["ab", "abc", "x"]},
                 "minItems": 2, "maxItems": 3})")},
      {"recursive tree",
       schema(R"({"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"},
                 "c": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "required": ["v"]}},
                 "$ref": "#/$defs/n"})",
              bounded)},
      {"pattern string", schema(R"({"type": "string", "pattern": "^[a-c]{2,5}$"})")},
      {"anyOf of objects and numbers",
       schema(R"({"type": "array", "items": {"anyOf": [{"type": "object", "properties":
                 {"x": {"type": "number", "minimum": 10}}, "required": ["x"]},
                 {"type": "integer", "maximum": 99}]}, "minItems": 1})")},
      {"nested objects",
       schema(R"({"type": "object", "properties": {"o": {"type": "object", "properties":
                 {"s": {"type": "string"}}, "required": ["s"]}}, "required": ["o"]})",
              bounded)},
      {"any json object",
       [bounded](std::shared_ptr<const TokenVocabulary> v) {
         return Grammar::JsonObject(v, bounded);
       }},
      {"parallel tool calls",
       [bounded](std::shared_ptr<const TokenVocabulary> v) {
         return Grammar::ToolCalls(
             R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                "properties": {"q": {"type": "string", "maxLength": 3}, "n": {"type": "integer"}},
                "required": ["q"]}}}])",
             "", /*parallel=*/true, v, bounded);
       },
       80},
  };
}

// TokensToEnd equals the brute-force search at the start and along random walks, on a
// vocabulary of single bytes and on one with multi-byte tokens that cross rule boundaries
// (`"}`, `"}}`, `>\n`, `\n</tool_call>`) and the tool-call tags as single tokens.
TEST(TokenDistance, MatchesBreadthFirstSearchOnSmallVocabularies) {
  for (bool multi : {false, true}) {
    auto vocab = SmallVocab(multi);
    const std::vector<int32_t> eos = {vocab->size() - 1};
    for (const OracleCase& c : OracleCases()) {
      auto g = c.make(vocab);
      ASSERT_TRUE(g.ok()) << c.name << ": " << g.status().message();
      int checked = 0;
      for (int w = 0; w < 5; ++w) {
        WalkOptions o;
        o.seed = 10 + w;
        o.max_tokens = 40;
        o.steer_after = 24;
        WalkResult r = GrammarWalker::Walk(*g, o, eos);
        ASSERT_FALSE(r.stuck) << c.name;
        GrammarMatcher m(*g);
        size_t at = 0;  // tokens accepted
        for (size_t i = 0; i < r.tokens.size(); ++i) {
          while (at < i && m.AcceptToken(r.tokens[at])) ++at;
          if (at < i || m.IsTerminated()) break;  // (the final eos)
          const int32_t got = m.TokensToEnd();
          const int32_t want = OracleTokensToEnd(&m, c.depth);
          if (want == kNoEnd) continue;  // beyond the search's depth
          ++checked;
          ASSERT_EQ(got, want) << c.name << (multi ? " (multi-byte)" : " (bytes)") << " walk " << w
                               << " after " << i << " tokens of '" << r.text << "'";
        }
      }
      EXPECT_GE(checked, 15) << c.name;
    }
  }
}

// The tool-call tags are single tokens of the vocabulary (not special in MiMo's tokenizer), and
// the distance uses them: the shortest call costs what its tokens cost, far fewer than its bytes.
TEST(TokenDistance, ToolCallTagsAreSingleTokensOfTheShortestCall) {
  auto vocab = SmallVocab(true);
  auto g = Grammar::ToolCalls(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
         "properties": {"q": {"type": "string", "maxLength": 3}}, "required": ["q"]}}}])",
      "", false, vocab);
  ASSERT_TRUE(g.ok()) << g.status().message();
  GrammarMatcher m(*g);
  // <tool_call> <function= f>\n <parameter= q> </parameter> \n</ function > \n</tool_call> end
  // (the empty value; "f>\n" and "q>" are tokens of this vocabulary): 9 tokens with the end.
  EXPECT_EQ(m.TokensToEnd(), 9);
  EXPECT_EQ(OracleTokensToEnd(&m, 12), 9);
  EXPECT_GT(m.MinBytesToEnd(), 60);
}

// Long bounded strings keep one column for the counts where the bound cannot be felt yet
// (TextTable's band). On the real vocabulary, every (signature, state, count) of the banded tables
// equals the node-by-node search's, for JSON strings (escapes: pending characters) and raw
// tool-call values (`</parameter>` takes characters back), with and without minLength.
TEST(TokenDistance, BandedTablesEqualTheNodeByNodeSearch) {
  struct Case {
    std::string name;
    StatusOr<std::shared_ptr<const Grammar>> grammar;
  };
  auto tool = [](const char* param) {
    return std::string(R"([{"type": "function", "function": {"name": "f", "parameters": {"type":
        "object", "properties": {"q": )") +
           param + R"(, "n": {"type": "integer"}}, "required": ["q"]}}}])";
  };
  std::vector<Case> cases;
  cases.push_back({"tool value maxLength 20000",
                   Grammar::ToolCalls(tool(R"({"type": "string", "maxLength": 20000})"), "", true,
                                      QwenVocab())});
  cases.push_back({"tool value 300..9000",
                   Grammar::ToolCalls(
                       tool(R"({"type": "string", "minLength": 300, "maxLength": 9000})"), "",
                       false, QwenVocab())});
  cases.push_back({"json string maxLength 12000",
                   Grammar::FromJsonSchema(R"({"type": "string", "maxLength": 12000})",
                                           QwenVocab())});
  cases.push_back({"json member 40..6000, and a short one",
                   Grammar::FromJsonSchema(
                       R"({"type": "object", "properties": {"s": {"type": "string",
                          "minLength": 40, "maxLength": 6000}, "t": {"type": "string",
                          "maxLength": 30}}, "required": ["s", "t"]})",
                       QwenVocab())});
  for (const Case& c : cases) {
    ASSERT_TRUE(c.grammar.ok()) << c.name << ": " << c.grammar.status().message();
    const PushdownAutomaton& pda = (*c.grammar)->pda();
    auto whole = TokenDistance::Build(pda, *QwenVocab(), nullptr, INT32_MAX);
    auto banded = TokenDistance::Build(pda, *QwenVocab(), nullptr, 0);
    int bands = 0;
    for (int32_t t = 0; t < pda.num_text_rules(); ++t) {
      const TokenDistance::TextTable& w = whole->text(t);
      const TokenDistance::TextTable& b = banded->text(t);
      ASSERT_EQ(w.band_len, 0);
      ASSERT_EQ(w.cap, b.cap);
      ASSERT_EQ(w.carries, b.carries);
      ASSERT_EQ(w.sig_of, b.sig_of);
      ASSERT_EQ(w.num_sigs, b.num_sigs);
      if (b.band_len > 0) {
        ++bands;
        EXPECT_LT(b.width, w.width / 4) << c.name << " text " << t;
      }
      const int32_t states = pda.text_rule(t).dfa->num_states();
      for (int32_t sig = 0; sig < w.num_sigs; ++sig)
        for (int32_t q = 0; q < states; ++q)
          for (int32_t k = 0; k <= w.cap; ++k)
            ASSERT_EQ(w.at(sig, w.node(q, k)), b.at(sig, b.node(q, k)))
                << c.name << ": text " << t << " sig " << sig << " state " << q << " count " << k
                << " (band " << b.band_lo << " + " << b.band_len << ")";
    }
    EXPECT_GE(bands, 1) << c.name;  // the long string was banded
  }
}

// The same over a grid of bounds, where the band is long, short or empty (min close to max: the
// search node by node): JSON strings and tool-call values, every count.
TEST(TokenDistance, BandedTablesEqualTheSearchAcrossBounds) {
  int banded = 0;
  for (int min : {0, 1, 5, 37, 130}) {
    for (int extra : {0, 1, 3, 20, 150, 700}) {
      const std::string bounds = R"("minLength": )" + std::to_string(min) + R"(, "maxLength": )" +
                                 std::to_string(min + extra);
      for (bool tool : {false, true}) {
        auto g = tool ? Grammar::ToolCalls(
                            R"([{"type": "function", "function": {"name": "f", "parameters": {
                               "type": "object", "properties": {"q": {"type": "string", )" +
                                bounds + R"(}}, "required": ["q"]}}}])",
                            "", false, QwenVocab())
                      : Grammar::FromJsonSchema(R"({"type": "string", )" + bounds + "}",
                                                QwenVocab());
        ASSERT_TRUE(g.ok()) << bounds << ": " << g.status().message();
        const PushdownAutomaton& pda = (*g)->pda();
        auto whole = TokenDistance::Build(pda, *QwenVocab(), nullptr, INT32_MAX);
        auto band = TokenDistance::Build(pda, *QwenVocab(), nullptr, 0);
        for (int32_t t = 0; t < pda.num_text_rules(); ++t) {
          const TokenDistance::TextTable& w = whole->text(t);
          const TokenDistance::TextTable& b = band->text(t);
          banded += b.band_len > 0;
          for (int32_t sig = 0; sig < w.num_sigs; ++sig)
            for (int32_t q = 0; q < pda.text_rule(t).dfa->num_states(); ++q)
              for (int32_t k = 0; k <= w.cap; ++k)
                ASSERT_EQ(w.at(sig, w.node(q, k)), b.at(sig, b.node(q, k)))
                    << bounds << (tool ? " (tool value)" : " (JSON string)") << ": text " << t
                    << " state " << q << " count " << k << " (band " << b.band_lo << " + "
                    << b.band_len << ")";
        }
      }
    }
  }
  EXPECT_GE(banded, 8);
}

// Claude Code's 12 tools (one value has maxLength 524288) compile with the default threshold into
// banded tables: a few thousand columns, not the half million counts.
TEST(TokenDistance, ClaudeCodeToolsCompileBanded) {
  const nlohmann::json rec = nlohmann::json::parse(testing::ReadFile(
      std::string(MIMO_SOURCE_DIR) + "/tests/data/agents/claude-code-01-first.json"));
  nlohmann::json tools = nlohmann::json::array();
  for (const auto& t : rec["body"]["tools"]) {
    tools.push_back({{"type", "function"},
                     {"function", {{"name", t["name"]}, {"parameters", t["input_schema"]}}}});
  }
  auto g = Grammar::ToolCalls(tools.dump(), "", true, QwenVocab());
  ASSERT_TRUE(g.ok()) << g.status().message();
  const PushdownAutomaton& pda = (*g)->pda();
  int32_t longest = 0, widest = 0;
  for (int32_t t = 0; t < pda.num_text_rules(); ++t) {
    longest = std::max(longest, (*g)->distance().text(t).cap);
    widest = std::max(widest, (*g)->distance().text(t).width);
  }
  EXPECT_GE(longest, 524288);
  EXPECT_LT(widest, 8192);
}

// Positions of walks through the grammars of the real vocabulary: `n` per grammar.
struct Probe {
  std::string name;
  std::shared_ptr<const Grammar> grammar;
  std::vector<int32_t> prefix;
};

std::vector<Probe> Probes(int walks, int per_walk, int max_tokens) {
  std::vector<std::pair<std::string, std::shared_ptr<const Grammar>>> grammars;
  GrammarOptions o;
  o.max_string_length = 24;
  for (const char* name : {"person", "tree_ref", "lengths", "order", "patterns", "root_array",
                           "nested_deep", "string_map"}) {
    auto g = Grammar::FromJsonSchema(
        testing::ReadFile(std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/" + name + ".json"),
        QwenVocab(), o);
    EXPECT_TRUE(g.ok()) << name;
    if (g.ok()) grammars.emplace_back(name, *g);
  }
  auto obj = Grammar::JsonObject(QwenVocab(), o);
  if (obj.ok()) grammars.emplace_back("json_object", *obj);
  auto tools = Grammar::ToolCalls(
      testing::ReadFile(std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/tools/tools.json"), "",
      true, QwenVocab(), o);
  if (tools.ok()) grammars.emplace_back("tool_calls", *tools);
  std::vector<Probe> out;
  std::mt19937_64 rng(5);
  for (const auto& [name, g] : grammars) {
    for (int w = 0; w < walks; ++w) {
      WalkOptions wo;
      wo.seed = 300 + w;
      wo.max_tokens = max_tokens;
      wo.steer = 0.1;
      WalkResult r = GrammarWalker::Walk(g, wo, EosIds());
      for (int k = 0; k < per_walk; ++k) {
        const size_t cut = std::uniform_int_distribution<size_t>(0, r.tokens.size() - 1)(rng);
        out.push_back({name, g, std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + cut)});
      }
    }
  }
  return out;
}

// Far from max_tokens nothing is cut: FillMaskWithin is FillNextTokenMask.
TEST(TokenDistance, MaskWithinAGenerousBudgetIsTheGrammarMask) {
  const std::vector<int32_t> eos = EosIds();
  std::vector<uint32_t> a(QwenVocab()->mask_words()), b(a.size());
  for (const Probe& p : Probes(3, 6, 200)) {
    GrammarMatcher m(p.grammar);
    for (int32_t t : p.prefix) ASSERT_TRUE(m.AcceptToken(t));
    m.FillNextTokenMask(a.data(), eos);
    m.FillMaskWithin(b.data(), eos, 1 << 20);
    ASSERT_EQ(a, b) << p.name << " after " << p.prefix.size() << " tokens";
  }
}

// At sampled positions, with budgets at and just above the distance: a token is allowed exactly
// when it is grammatical and leaves at most remaining - 1 tokens to do (each token's distance by
// a trial step), and the distance falls by exactly one along the best token (exactness: no token
// does better, one does that well).
TEST(TokenDistance, MaskWithinMatchesTrialStepsOnTheRealVocabulary) {
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  std::vector<uint32_t> grammar_mask(vocab.mask_words()), within(vocab.mask_words());
  for (const Probe& p : Probes(1, 2, 120)) {
    GrammarMatcher m(p.grammar);
    for (int32_t t : p.prefix) ASSERT_TRUE(m.AcceptToken(t));
    if (m.IsTerminated()) continue;
    const int32_t d = m.TokensToEnd();
    ASSERT_LT(d, kNoEnd) << p.name;
    m.FillNextTokenMask(grammar_mask.data(), eos);
    std::vector<std::pair<int32_t, int32_t>> after;  // (token, distance after it)
    int32_t best = kNoEnd;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (!Bit(grammar_mask, id) || std::count(eos.begin(), eos.end(), id)) continue;
      ASSERT_TRUE(m.AcceptToken(id));
      const int32_t da = m.TokensToEnd();
      m.Rollback(1);
      after.emplace_back(id, da);
      best = std::min(best, da);
    }
    const std::string where = p.name + " after " + std::to_string(p.prefix.size()) + " tokens";
    if (m.CanTerminate()) {
      EXPECT_EQ(d, 1) << where;
    } else {
      EXPECT_EQ(best, d - 1) << where;
    }
    for (int32_t slack : {0, 1, 3}) {
      const int32_t remaining = d + slack;
      m.FillMaskWithin(within.data(), eos, remaining);
      for (const auto& [id, da] : after)
        ASSERT_EQ(Bit(within, id), da <= remaining - 1)
            << where << ", remaining " << remaining << ": token " << id << " '" << vocab.bytes(id)
            << "' leaves " << da;
      for (int32_t e : eos) EXPECT_EQ(Bit(within, e), m.CanTerminate()) << where;
    }
  }
}

// From anywhere in an unsteered walk, with exactly the tokens TokensToEnd says are needed (or a
// few more), taking random tokens of FillMaskWithin ends the output in time, and it validates.
TEST(TokenDistance, SteeringEndsInTimeFromRandomCutPoints) {
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  std::vector<uint32_t> mask(vocab.mask_words());
  std::mt19937_64 rng(11);
  const std::string tools_text =
      testing::ReadFile(std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/tools/tools.json");
  auto tool_schema = ToolSchema::FromJsonText(tools_text);
  ASSERT_TRUE(tool_schema.ok());
  int steered = 0;
  for (const Probe& p : Probes(6, 3, 300)) {
    GrammarMatcher m(p.grammar);
    std::string text;
    for (int32_t t : p.prefix) {
      ASSERT_TRUE(m.AcceptToken(t));
      if (!std::count(eos.begin(), eos.end(), t)) text += vocab.bytes(t);
    }
    if (m.IsTerminated()) continue;
    const int32_t budget = m.TokensToEnd() + std::uniform_int_distribution<int>(0, 2)(rng);
    int32_t used = 0;
    bool ended = false;
    while (!ended && used < budget) {
      m.FillMaskWithin(mask.data(), eos, budget - used);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab.size(); ++id)
        if (Bit(mask, id)) allowed.push_back(id);
      ASSERT_FALSE(allowed.empty()) << p.name << ": nothing allowed after '" << text << "'";
      const int32_t pick =
          allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      ASSERT_TRUE(m.AcceptToken(pick));
      ++used;
      if (std::count(eos.begin(), eos.end(), pick)) {
        ended = true;
      } else {
        text += vocab.bytes(pick);
        // An output that ends by itself must do so before its last slot (see token_distance.h).
        ended = m.IsTerminated();
        if (ended) {
          EXPECT_LT(used, budget) << p.name << ": ended on the last slot: " << text;
        }
      }
    }
    ASSERT_TRUE(ended) << p.name << ": not done in " << budget << " tokens: " << text;
    ++steered;
    if (p.name == "tool_calls") {
      ToolParseResult r = MimoToolCallParser::Parse(*tool_schema, text, {.id_seed = 1});
      EXPECT_EQ(r.content, "") << text;
      EXPECT_GE(r.tool_calls.size(), 1u) << text;
      continue;
    }
    auto v = nlohmann::ordered_json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << p.name << ": " << text;
    if (p.name != "json_object") {
      const auto schema = nlohmann::ordered_json::parse(testing::ReadFile(
          std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/" + p.name + ".json"));
      EXPECT_EQ(SchemaChecker(schema).Check(v), "") << p.name << ": " << text;
    } else {
      EXPECT_TRUE(v.is_object()) << text;
    }
  }
  EXPECT_GE(steered, 100);
}

}  // namespace
}  // namespace mimo
