// OutputConstraint: the reasoning block, its budget, the tool-call tag under auto / none, and
// ending in time, on the real Qwen3 vocabulary. Outputs are sampled from the masks by a "model"
// that picks allowed tokens at random (now and then one of the tags), and checked with the chat
// layer's own parsers (chat/reasoning_parser.h splits reasoning from content, the mimo tool
// parser reads calls) and the independent schema checker.
#include "grammar/output_constraint.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"
#include "grammar_test_env.h"
#include "schema_checker.h"

namespace mimo {
namespace {

using testing::EosIds;
using testing::QwenTokenizer;
using testing::QwenVocab;
using testing::SchemaChecker;
using Answer = OutputFormat::Answer;
using Reasoning = OutputFormat::Reasoning;

bool Bit(const std::vector<uint32_t>& m, int32_t id) { return (m[id >> 5] >> (id & 31)) & 1u; }
int32_t Id(const char* token) { return QwenTokenizer().TokenToId(token); }

const char* kSchema = R"({"type": "object", "properties": {"city": {"type": "string",
  "minLength": 2}, "days": {"type": "integer"}}, "required": ["city", "days"]})";

std::shared_ptr<const Grammar> SchemaGrammar() {
  GrammarOptions o;
  o.max_string_length = 24;
  static auto g = Grammar::FromJsonSchema(kSchema, QwenVocab(), o);
  EXPECT_TRUE(g.ok());
  return *g;
}

std::string ToolsText() {
  return testing::ReadFile(std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/tools/tools.json");
}

std::shared_ptr<const Grammar> ToolGrammar(bool parallel) {
  GrammarOptions o;
  o.max_string_length = 24;
  auto g = Grammar::ToolCalls(ToolsText(), "", parallel, QwenVocab(), o);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return *g;
}

OutputFormat Format(Answer a, std::shared_ptr<const Grammar> g, Reasoning r, int budget = -1) {
  OutputFormat f;
  f.answer = a;
  f.grammar = std::move(g);
  f.vocab = QwenVocab();
  f.reasoning = r;
  f.think_start_id = Id("<think>");
  f.think_end_id = Id("</think>");
  f.reasoning_budget = budget;
  return f;
}

std::shared_ptr<const OutputPlan> Plan(OutputFormat f) {
  auto p = OutputPlan::Make(std::move(f));
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

struct Sample {
  std::vector<int32_t> tokens;
  std::string text;          // bytes of the non-eos tokens
  bool ended = false;        // eos, or the grammar's end, before max_tokens ran out
  int reasoning_tokens = 0;  // inside the block, as the constraint counted them
};

// A random model: each step takes, with probability `tag_p`, one of the tags if allowed, else a
// uniformly random allowed token.
Sample Sampled(std::shared_ptr<const OutputPlan> plan, int max_tokens, uint64_t seed,
               double tag_p = 0.05) {
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  const std::vector<int32_t> tags = {Id("<think>"), Id("</think>"), Id("<tool_call>"), eos[0]};
  OutputConstraint c(plan);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(vocab.mask_words());
  Sample s;
  for (int i = 0; i < max_tokens && !s.ended; ++i) {
    c.FillMask(mask.data(), eos, max_tokens - i);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab.size(); ++id)
      if (Bit(mask, id)) allowed.push_back(id);
    EXPECT_FALSE(allowed.empty());
    if (allowed.empty()) break;
    int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (std::uniform_real_distribution<double>(0, 1)(rng) < tag_p) {
      std::vector<int32_t> ok;
      for (int32_t t : tags)
        if (Bit(mask, t)) ok.push_back(t);
      if (!ok.empty()) pick = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
    }
    EXPECT_TRUE(c.Accept(pick)) << "an allowed token was refused: " << pick;
    s.tokens.push_back(pick);
    if (std::count(eos.begin(), eos.end(), pick)) {
      s.ended = true;
    } else {
      s.text += vocab.bytes(pick);
      // As the engine: an output that ends by itself on its last slot finishes "length".
      s.ended = c.IsTerminated() && i + 1 < max_tokens;
    }
  }
  s.reasoning_tokens = c.reasoning_tokens();
  return s;
}

// Thinking on, the model may skip `<think>` or open it: either way the content the parser
// returns is valid JSON, the output ends in time, and the reasoning (when opened) closed.
TEST(OutputConstraint, OptionalReasoningThenSchemaEndsValidInTime) {
  auto plan = Plan(Format(Answer::kGrammar, SchemaGrammar(), Reasoning::kOptional));
  const int min = plan->MinTokens();
  {
    GrammarMatcher m(SchemaGrammar());
    EXPECT_EQ(min, m.TokensToEnd()) << "skipping the block is shortest";
  }
  const SchemaChecker checker(nlohmann::ordered_json::parse(kSchema));
  int opened = 0, skipped = 0;
  for (int max_tokens : {min, min + 1, min + 8, 40, 120}) {
    for (int s = 0; s < 12; ++s) {
      Sample out = Sampled(plan, max_tokens, 100 * max_tokens + s, /*tag_p=*/0.3);
      ASSERT_TRUE(out.ended) << "max_tokens " << max_tokens << ": " << out.text;
      const ReasoningDelta parsed = MimoReasoningParser::Parse(out.text, {.enable_thinking = true});
      const bool thought = out.tokens[0] == Id("<think>");
      opened += thought;
      skipped += !thought;
      auto v = nlohmann::ordered_json::parse(parsed.content, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << "max_tokens " << max_tokens << ": " << out.text;
      EXPECT_EQ(checker.Check(v), "") << out.text;
      if (!thought) {
        EXPECT_EQ(parsed.reasoning, "") << out.text;
      }
    }
  }
  EXPECT_GE(opened, 5);
  EXPECT_GE(skipped, 5);
}

// The opening step offers the grammar's first tokens and `<think>` (when the block and the
// answer after it still fit), nothing else.
TEST(OutputConstraint, OpeningMaskIsTheGrammarsAndThink) {
  auto plan = Plan(Format(Answer::kGrammar, SchemaGrammar(), Reasoning::kOptional));
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  std::vector<uint32_t> got(vocab.mask_words()), want(vocab.mask_words());
  GrammarMatcher m(SchemaGrammar());
  const int32_t d = m.TokensToEnd();
  for (int remaining : {d, d + 1, d + 2, 100}) {
    OutputConstraint c(plan);
    c.FillMask(got.data(), eos, remaining);
    m.FillMaskWithin(want.data(), eos, remaining);
    // <think> + `</think>` + the answer: remaining - 1 >= 1 + d.
    want[Id("<think>") >> 5] |= (remaining - 1 >= 1 + d ? 1u : 0u) << (Id("<think>") & 31);
    EXPECT_EQ(got, want) << "remaining " << remaining;
  }
}

// A budget closes the block by force: after `budget` reasoning tokens only the closing tags are
// allowed (the </think> token, a token ending a spelled `</think>`, or for a tool-call answer a
// `<tool_call>`), and the output still ends valid.
TEST(OutputConstraint, ReasoningBudgetForcesTheClose) {
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  for (int budget : {0, 3, 17}) {
    for (bool tools : {false, true}) {
      auto plan = Plan(Format(Answer::kGrammar, tools ? ToolGrammar(false) : SchemaGrammar(),
                              Reasoning::kOpen, budget));
      OutputConstraint c(plan);
      std::vector<uint32_t> mask(vocab.mask_words());
      std::mt19937_64 rng(budget);
      for (int i = 0; i < budget; ++i) {  // random reasoning tokens (none that closes)
        c.FillMask(mask.data(), eos, 1000);
        int32_t pick;
        do {
          pick = std::uniform_int_distribution<int32_t>(0, vocab.size() - 1)(rng);
        } while (!Bit(mask, pick) || pick == Id("</think>") || pick == Id("<tool_call>") ||
                 std::count(eos.begin(), eos.end(), pick) ||
                 vocab.bytes(pick).find('<') != std::string_view::npos ||
                 vocab.bytes(pick).find('>') != std::string_view::npos);
        ASSERT_TRUE(c.Accept(pick));
      }
      ASSERT_EQ(c.phase(), OutputConstraint::Phase::kReasoning);
      EXPECT_EQ(c.reasoning_tokens(), budget);
      c.FillMask(mask.data(), eos, 1000);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab.size(); ++id)
        if (Bit(mask, id)) allowed.push_back(id);
      std::vector<int32_t> want = {Id("</think>")};
      if (tools) want.push_back(Id("<tool_call>"));
      std::sort(want.begin(), want.end());
      EXPECT_EQ(allowed, want) << "budget " << budget << (tools ? " (tools)" : "");
    }
  }
  // And sampled through: within the budget, valid.
  const SchemaChecker checker(nlohmann::ordered_json::parse(kSchema));
  for (int s = 0; s < 20; ++s) {
    auto plan = Plan(Format(Answer::kGrammar, SchemaGrammar(), Reasoning::kOptional, 5));
    Sample out = Sampled(plan, 80, 7000 + s, 0.2);
    ASSERT_TRUE(out.ended) << out.text;
    EXPECT_LE(out.reasoning_tokens, 5);
    const ReasoningDelta parsed = MimoReasoningParser::Parse(out.text, {.enable_thinking = true});
    auto v = nlohmann::ordered_json::parse(parsed.content, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << out.text;
    EXPECT_EQ(checker.Check(v), "") << out.text;
  }
}

// The prompt opened the block: from inside it, at any max_tokens the plan accepts, the answer
// after `</think>` (or the call a `<tool_call>` starts, for a tool-call answer) completes in time.
TEST(OutputConstraint, OpenReasoningClosesInTimeForTheAnswer) {
  const std::string tools_text = ToolsText();
  auto tool_schema = ToolSchema::FromJsonText(tools_text);
  ASSERT_TRUE(tool_schema.ok());
  for (bool tools : {false, true}) {
    auto plan = Plan(
        Format(Answer::kGrammar, tools ? ToolGrammar(true) : SchemaGrammar(), Reasoning::kOpen));
    const int min = plan->MinTokens();
    for (int max_tokens : {min, min + 2, min + 15, 150}) {
      for (int s = 0; s < 10; ++s) {
        Sample out = Sampled(plan, max_tokens, 31 * max_tokens + s, 0.01);
        ASSERT_TRUE(out.ended) << "max_tokens " << max_tokens << ": " << out.text;
        const ReasoningDelta parsed =
            MimoReasoningParser::Parse(out.text, {.prompt_ends_in_think = true});
        if (tools) {
          // A call inside the block comes out as the reasoning parser's tool-call text.
          ToolParseResult r = MimoToolCallParser::Parse(
              *tool_schema, parsed.ToolCallText() + parsed.content, {});
          EXPECT_GE(r.tool_calls.size(), 1u) << out.text;
          EXPECT_EQ(r.content, "") << out.text;
        } else {
          auto v = nlohmann::ordered_json::parse(parsed.content, nullptr, false);
          EXPECT_FALSE(v.is_discarded()) << out.text;
        }
      }
    }
  }
}

// Without a grammar (a reasoning budget alone, as Anthropic's thinking.budget_tokens): only the
// close is forced, at the budget and at the last token; the answer after it is free.
TEST(OutputConstraint, BudgetAloneOnlyForcesTheClose) {
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  auto plan = Plan(Format(Answer::kFree, nullptr, Reasoning::kOptional, 6));
  EXPECT_EQ(plan->MinTokens(), 0);
  std::vector<uint32_t> mask(vocab.mask_words());
  for (int max_tokens : {2, 5, 30}) {
    for (int s = 0; s < 8; ++s) {
      Sample out = Sampled(plan, max_tokens, 900 + s, 0.5);
      if (out.tokens[0] != Id("<think>")) continue;
      // Within the budget; closed unless the model itself ended the output inside the block.
      EXPECT_LE(out.reasoning_tokens, 6);
      const bool closed = out.text.find("</think>") != std::string::npos;
      EXPECT_TRUE(closed || (out.ended && out.tokens.back() == eos[0])) << out.text;
    }
  }
  // At the last token inside the block only `</think>` is left; before it, nearly everything.
  OutputConstraint c(plan);
  c.FillMask(mask.data(), eos, 10);
  ASSERT_TRUE(c.Accept(Id("<think>")));
  c.FillMask(mask.data(), eos, 9);
  int allowed = 0;
  for (int32_t id = 0; id < vocab.size(); ++id) allowed += Bit(mask, id);
  EXPECT_GT(allowed, vocab.size() - 1000);
  c.FillMask(mask.data(), eos, 1);
  allowed = 0;
  for (int32_t id = 0; id < vocab.size(); ++id) allowed += Bit(mask, id);
  EXPECT_EQ(allowed, 1);
  EXPECT_TRUE(Bit(mask, Id("</think>")));
}

// `</think>` and `<tool_call>` are found in the text as the parser finds them: spelled over
// several tokens they end the block; completed in the middle of a token they are refused.
TEST(OutputConstraint, TagsSpelledAcrossTokensAreSeen) {
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  auto plan = Plan(Format(Answer::kGrammar, SchemaGrammar(), Reasoning::kOpen));
  OutputConstraint c(plan);
  std::vector<uint32_t> mask(vocab.mask_words());
  std::vector<int32_t> ids = QwenTokenizer().Encode("I think </thi", /*parse_special=*/false);
  const std::vector<int32_t> rest = QwenTokenizer().Encode("nk>", false);
  ids.insert(ids.end(), rest.begin(), rest.end() - 1);
  for (int32_t t : ids) {
    c.FillMask(mask.data(), eos, 200);
    ASSERT_TRUE(Bit(mask, t));
    ASSERT_TRUE(c.Accept(t));
  }
  EXPECT_EQ(c.phase(), OutputConstraint::Phase::kReasoning);
  // The last token ends with the tag and closes; a longer one that completes it and goes on is
  // refused (the rest would be answer bytes inside a reasoning token).
  const int32_t last = rest.back();
  const std::string_view lb = vocab.bytes(last);
  int32_t longer = -1;
  for (int32_t id = 0; id < vocab.size() && longer < 0; ++id)
    if (vocab.maskable(id) && vocab.bytes(id).size() > lb.size() &&
        vocab.bytes(id).substr(0, lb.size()) == lb)
      longer = id;
  ASSERT_GE(longer, 0) << "a token that starts with '" << lb << "'";
  c.FillMask(mask.data(), eos, 200);
  EXPECT_TRUE(Bit(mask, last));
  EXPECT_FALSE(Bit(mask, longer)) << vocab.bytes(longer);
  EXPECT_FALSE(c.Accept(longer));
  ASSERT_TRUE(c.Accept(last));
  EXPECT_EQ(c.phase(), OutputConstraint::Phase::kAnswer);
  c.FillMask(mask.data(), eos, 200);
  GrammarMatcher m(SchemaGrammar());
  std::vector<uint32_t> want(vocab.mask_words());
  m.FillMaskWithin(want.data(), eos, 200);
  EXPECT_EQ(mask, want) << "the answer starts right after the tag";
}

// A vocabulary that marks `</think>` special (no text for the masks' tries): the token still
// closes the block, by force at the budget.
TEST(OutputConstraint, SpecialThinkEndTokenStillCloses) {
  std::vector<std::string> bytes;
  for (int c = 0x20; c < 0x7f; ++c) bytes.emplace_back(1, static_cast<char>(c));
  bytes.emplace_back("</think>");
  bytes.emplace_back("<|end|>");
  std::vector<bool> excluded(bytes.size(), false);
  const int32_t end_think = static_cast<int32_t>(bytes.size()) - 2;
  const int32_t eos = static_cast<int32_t>(bytes.size()) - 1;
  excluded[end_think] = excluded[eos] = true;
  auto vocab = TokenVocabulary::FromBytes(bytes, excluded);
  auto g = Grammar::FromJsonSchema(R"({"type": "integer"})", vocab);
  ASSERT_TRUE(g.ok());
  OutputFormat f;
  f.answer = Answer::kGrammar;
  f.grammar = *g;
  f.reasoning = Reasoning::kOpen;
  f.think_end_id = end_think;
  f.reasoning_budget = 2;
  auto plan = Plan(f);
  OutputConstraint c(plan);
  std::vector<uint32_t> mask(vocab->mask_words());
  const std::vector<int32_t> eos_ids = {eos};
  for (char ch : std::string("ab")) {
    c.FillMask(mask.data(), eos_ids, 50);
    ASSERT_TRUE(c.Accept(ch - 0x20));
  }
  c.FillMask(mask.data(), eos_ids, 50);
  for (int32_t id = 0; id < vocab->size(); ++id)
    EXPECT_EQ(Bit(mask, id), id == end_think) << "only </think> at the budget: " << id;
  ASSERT_TRUE(c.Accept(end_think));
  EXPECT_EQ(c.phase(), OutputConstraint::Phase::kAnswer);
  EXPECT_TRUE(c.Accept('7' - 0x20));
}

// tool_choice none: the answer never writes `<tool_call>` (the token, or the tag completed by a
// token after part of it); everything else stays allowed.
TEST(OutputConstraint, ToolChoiceNoneMasksTheCallTag) {
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  OutputFormat f = Format(Answer::kFree, nullptr, Reasoning::kNone);
  f.forbid_tool_calls = true;
  auto plan = Plan(f);
  OutputConstraint c(plan);
  std::vector<uint32_t> mask(vocab.mask_words());
  c.FillMask(mask.data(), eos, 100);
  EXPECT_FALSE(Bit(mask, Id("<tool_call>")));
  int allowed = 0;
  for (int32_t id = 0; id < vocab.size(); ++id) allowed += Bit(mask, id);
  EXPECT_GE(allowed, vocab.size() - 5);
  for (int32_t t : QwenTokenizer().Encode("Sure: <tool", false)) ASSERT_TRUE(c.Accept(t));
  const auto rest = QwenTokenizer().Encode("_call>", false);
  c.FillMask(mask.data(), eos, 100);
  if (rest.size() == 1) {
    EXPECT_FALSE(Bit(mask, rest[0])) << "completes <tool_call>";
  }
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (!vocab.maskable(id) || Bit(mask, id)) continue;
    const std::string text = "<tool" + std::string(vocab.bytes(id));
    EXPECT_NE(text.find("<tool_call>"), std::string::npos) << "refused: " << vocab.bytes(id);
  }
  // Sampled with the tags pushed: never a call in the text.
  for (int s = 0; s < 20; ++s) {
    Sample out = Sampled(plan, 30, 50 + s, 0.5);
    EXPECT_EQ(out.text.find("<tool_call>"), std::string::npos) << out.text;
  }
}

// tool_choice auto: free text until the model opens a call, which must still fit; then the call
// is the grammar's, and the output parses into calls. Reasoning first is optional.
TEST(OutputConstraint, AutoCallsOpenOnlyWhenTheyFit) {
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  auto tool_schema = ToolSchema::FromJsonText(ToolsText());
  ASSERT_TRUE(tool_schema.ok());
  auto g = ToolGrammar(true);
  GrammarMatcher after_tag(g);
  ASSERT_TRUE(after_tag.AcceptString("<tool_call>"));
  const int32_t need = after_tag.TokensToEnd();
  for (Reasoning r : {Reasoning::kNone, Reasoning::kOptional}) {
    auto plan = Plan(Format(Answer::kGrammarAfterTag, g, r));
    EXPECT_EQ(plan->MinTokens(), 0);
    std::vector<uint32_t> mask(vocab.mask_words());
    OutputConstraint c(plan);
    c.FillMask(mask.data(), eos, need);
    EXPECT_FALSE(Bit(mask, Id("<tool_call>"))) << "a call opened here could not close";
    c.FillMask(mask.data(), eos, need + 1);
    EXPECT_TRUE(Bit(mask, Id("<tool_call>")));
    int calls = 0;
    for (int max_tokens : {need, need + 1, need + 10, 64}) {
      for (int s = 0; s < 10; ++s) {
        Sample out = Sampled(plan, max_tokens, 300 + 7 * max_tokens + s, 0.3);
        const ReasoningDelta parsed =
            MimoReasoningParser::Parse(out.text, {.enable_thinking = r == Reasoning::kOptional});
        const std::string answer = parsed.ToolCallText() + parsed.content;  // calls in the block too
        const size_t at = answer.find("<tool_call>");
        if (at == std::string::npos) continue;
        ++calls;
        EXPECT_TRUE(out.ended) << "an opened call must close: " << out.text;
        ToolParseResult p = MimoToolCallParser::Parse(*tool_schema, answer, {});
        EXPECT_GE(p.tool_calls.size(), 1u) << out.text;
      }
    }
    EXPECT_GE(calls, 10);
  }
}

}  // namespace
}  // namespace mimo
