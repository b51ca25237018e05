// GrammarMatcher against brute force on the real Qwen3 vocabulary: at sampled positions of random
// walks, the mask must equal the set of tokens whose bytes the automaton accepts one by one
// (AcceptToken + Rollback for every id), special tokens must never be allowed, EOS exactly when
// the grammar can end, and partial UTF-8 tokens must be allowed and then completed.
#include "grammar/grammar_matcher.h"

#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar.h"
#include "grammar/grammar_walker.h"
#include "grammar_test_env.h"
#include "schema_checker.h"

namespace mimo {
namespace {

using testing::EosIds;
using testing::QwenTokenizer;
using testing::QwenVocab;

bool Bit(const std::vector<uint32_t>& m, int32_t id) { return (m[id >> 5] >> (id & 31)) & 1u; }

// Compares the mask at the matcher's current position with the brute-force set.
void ExpectMaskMatchesBruteForce(GrammarMatcher* m, const std::string& where) {
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  std::vector<uint32_t> mask(vocab.mask_words());
  m->FillNextTokenMask(mask.data(), eos);
  int mismatches = 0;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    bool brute = false;
    if (vocab.maskable(id)) {
      brute = m->AcceptToken(id);
      if (brute) m->Rollback(1);
    } else if (std::find(eos.begin(), eos.end(), id) != eos.end()) {
      brute = m->CanTerminate();
    }
    if (brute != Bit(mask, id) && ++mismatches <= 5) {
      ADD_FAILURE() << where << ": token " << id << " '" << vocab.bytes(id) << "' mask says "
                    << Bit(mask, id) << ", brute force says " << brute;
    }
  }
  for (const AddedToken& t : QwenTokenizer().added_tokens()) {
    if (t.special && std::find(eos.begin(), eos.end(), t.id) == eos.end()) {
      EXPECT_FALSE(Bit(mask, t.id)) << where << ": special token " << t.content << " allowed";
    }
  }
}

// Walks `samples` random paths and checks the mask against brute force at `checks` positions
// of each (chosen at random along the path).
void CheckGrammar(std::shared_ptr<const Grammar> g, const std::string& name, int samples,
                  int checks) {
  const std::vector<int32_t> eos = EosIds();
  std::mt19937_64 rng(42);
  for (int s = 0; s < samples; ++s) {
    WalkOptions o;
    o.seed = 1000 + s;
    WalkResult w = GrammarWalker::Walk(g, o, eos);
    ASSERT_FALSE(w.stuck) << name << ": walk " << s << " got stuck after '" << w.text << "'";
    ASSERT_TRUE(w.terminated) << name << ": walk " << s;
    GrammarMatcher m(g);
    std::vector<size_t> at;
    for (int c = 0; c < checks; ++c)
      at.push_back(std::uniform_int_distribution<size_t>(0, w.tokens.size() - 1)(rng));
    std::sort(at.begin(), at.end());
    size_t next = 0;
    for (size_t i = 0; i < w.tokens.size(); ++i) {
      while (next < at.size() && at[next] == i) {
        ExpectMaskMatchesBruteForce(&m, name + " walk " + std::to_string(s) + " step " +
                                            std::to_string(i));
        ++next;
      }
      ASSERT_TRUE(m.AcceptToken(w.tokens[i]));
    }
  }
}

std::shared_ptr<const Grammar> Schema(const std::string& text) {
  auto g = Grammar::FromJsonSchema(text, QwenVocab());
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : nullptr;
}

TEST(GrammarMatcher, MasksMatchBruteForceOnSchemas) {
  for (const char* name : {"person", "patterns", "lengths", "tree_ref", "escapes",
                           "additional_schema", "number_bounds", "unicode_strings"}) {
    auto g = Schema(testing::ReadFile(std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/" +
                                      name + ".json"));
    ASSERT_TRUE(g);
    CheckGrammar(g, name, 1, 3);
  }
}

// Every position of short walks through nested containers, where tokens like `},` or `]}` are
// context-dependent (they leave the rule on top of the stack).
TEST(GrammarMatcher, MasksMatchBruteForceAtEveryPosition) {
  const std::vector<int32_t> eos = EosIds();
  for (const char* name : {"nested_deep", "tree_ref", "root_array"}) {
    auto g = Schema(testing::ReadFile(std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/" +
                                      name + ".json"));
    ASSERT_TRUE(g);
    WalkOptions o;
    o.seed = 8;
    WalkResult w = GrammarWalker::Walk(g, o, eos);
    ASSERT_TRUE(w.terminated);
    GrammarMatcher m(g);
    for (size_t i = 0; i < w.tokens.size(); ++i) {
      ExpectMaskMatchesBruteForce(&m, std::string(name) + " step " + std::to_string(i));
      if (!m.AcceptToken(w.tokens[i])) break;  // the final EOS
    }
  }
}

TEST(GrammarMatcher, MasksMatchBruteForceOnJsonObjectAndWhitespace) {
  GrammarOptions any_ws;
  any_ws.whitespace = GrammarOptions::Whitespace::kAny;
  auto g = Grammar::JsonObject(QwenVocab(), any_ws);
  ASSERT_TRUE(g.ok());
  CheckGrammar(*g, "json_object", 2, 3);
}

TEST(GrammarMatcher, MasksMatchBruteForceOnToolCalls) {
  const std::string tools = testing::ReadFile(std::string(MIMO_SOURCE_DIR) +
                                              "/tests/data/schemas/tools/tools.json");
  auto g = Grammar::ToolCalls(tools, "", /*parallel=*/true, QwenVocab());
  ASSERT_TRUE(g.ok()) << g.status().message();
  CheckGrammar(*g, "tool_calls", 2, 3);
}

TEST(GrammarMatcher, SpecialTokensNeverAllowedAndEosOnlyAtTheEnd) {
  auto g = Schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  GrammarMatcher m(g);
  const TokenVocabulary& vocab = *QwenVocab();
  const std::vector<int32_t> eos = EosIds();
  std::vector<uint32_t> mask(vocab.mask_words());
  for (const char* piece : {"{\"", "a", "\":", "1", "2", "}"}) {
    m.FillNextTokenMask(mask.data(), eos);
    for (int32_t e : eos) EXPECT_FALSE(Bit(mask, e)) << "EOS allowed before the end";
    const auto ids = QwenTokenizer().Encode(piece, /*parse_special=*/false);
    ASSERT_EQ(ids.size(), 1u) << piece;
    ASSERT_TRUE(Bit(mask, ids[0])) << piece;
    ASSERT_TRUE(m.AcceptToken(ids[0])) << piece;
  }
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_TRUE(m.IsTerminated());
  m.FillNextTokenMask(mask.data(), eos);
  int allowed = 0;
  for (int32_t id = 0; id < vocab.size(); ++id) allowed += Bit(mask, id);
  EXPECT_EQ(allowed, static_cast<int>(eos.size())) << "only EOS may follow a finished object";
  for (int32_t e : eos) EXPECT_TRUE(Bit(mask, e));
  // A special token that is not an EOS id is never accepted.
  EXPECT_FALSE(m.AcceptToken(QwenTokenizer().TokenToId("<|im_start|>")));
  EXPECT_TRUE(m.AcceptToken(eos[0]));
  EXPECT_TRUE(m.IsTerminated());
  m.FillNextTokenMask(mask.data(), eos);
  for (int32_t id = 0; id < vocab.size(); ++id) ASSERT_FALSE(Bit(mask, id));
}

TEST(GrammarMatcher, PartialUtf8TokensAreAllowedThenCompleted) {
  auto g = Schema(R"({"type": "string"})");
  GrammarMatcher m(g);
  const TokenVocabulary& vocab = *QwenVocab();
  std::vector<uint32_t> mask(vocab.mask_words());
  const std::vector<int32_t> eos = EosIds();
  ASSERT_TRUE(m.AcceptToken(QwenTokenizer().Encode("\"", false)[0]));
  // A token holding only the first byte of a 3-byte character (e.g. 0xE4 of CJK).
  int32_t lead = -1;
  for (int32_t id = 0; id < vocab.size() && lead < 0; ++id)
    if (vocab.maskable(id) && vocab.bytes(id) == std::string("\xE4")) lead = id;
  ASSERT_GE(lead, 0);
  m.FillNextTokenMask(mask.data(), eos);
  EXPECT_TRUE(Bit(mask, lead));
  ASSERT_TRUE(m.AcceptToken(lead));
  m.FillNextTokenMask(mask.data(), eos);
  int allowed = 0;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (!Bit(mask, id)) continue;
    ++allowed;
    const uint8_t first = static_cast<uint8_t>(vocab.bytes(id)[0]);
    EXPECT_TRUE(first >= 0x80 && first <= 0xBF) << "token " << id << " does not continue UTF-8";
  }
  EXPECT_GT(allowed, 0);
  // An invalid continuation (a second lead byte) is refused.
  int32_t ascii = QwenTokenizer().Encode("a", false)[0];
  EXPECT_FALSE(m.AcceptToken(ascii));
}

TEST(GrammarMatcher, RollbackRestoresMasks) {
  auto g = Schema(testing::ReadFile(std::string(MIMO_SOURCE_DIR) + "/tests/data/schemas/order.json"));
  WalkOptions o;
  o.seed = 3;
  WalkResult w = GrammarWalker::Walk(g, o, EosIds());
  ASSERT_TRUE(w.terminated);
  const TokenVocabulary& vocab = *QwenVocab();
  GrammarMatcher m(g);
  std::vector<std::vector<uint32_t>> masks;
  std::vector<uint32_t> mask(vocab.mask_words());
  for (int32_t t : w.tokens) {
    m.FillNextTokenMask(mask.data(), EosIds());
    masks.push_back(mask);
    ASSERT_TRUE(m.AcceptToken(t));
  }
  for (size_t back = 1; back <= w.tokens.size(); back += 7) {
    GrammarMatcher r(g);
    for (int32_t t : w.tokens) ASSERT_TRUE(r.AcceptToken(t));
    r.Rollback(static_cast<int>(back));
    r.FillNextTokenMask(mask.data(), EosIds());
    EXPECT_EQ(mask, masks[w.tokens.size() - back]) << "after rolling back " << back;
  }
}

TEST(GrammarMatcher, RefusedTokenLeavesStateUnchanged) {
  auto g = Schema(R"({"type": "object", "properties": {"k": {"enum": ["yes", "no"]}}, "required": ["k"]})");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptToken(QwenTokenizer().Encode("{\"", false)[0]));
  EXPECT_FALSE(m.AcceptToken(QwenTokenizer().Encode("x", false)[0]));
  EXPECT_EQ(m.num_accepted(), 1);
  EXPECT_TRUE(m.AcceptToken(QwenTokenizer().Encode("k", false)[0]));
}

// A model whose eos id is also ordinary text (a byte token): the engine ends the output on it
// wherever it is sampled, so the grammar allows it only where the text may end, and accepting it
// ends the match instead of adding its byte.
TEST(GrammarMatcher, EosIdThatIsAlsoTextIsAllowedOnlyAtTheEnd) {
  auto g = Schema(R"({"type": "string"})");
  GrammarMatcher m(g);
  const TokenVocabulary& vocab = *QwenVocab();
  std::vector<uint32_t> mask(vocab.mask_words());
  const int32_t hash = QwenTokenizer().Encode("#", false)[0];
  ASSERT_TRUE(vocab.maskable(hash));
  const std::vector<int32_t> eos = {hash};
  ASSERT_TRUE(m.AcceptToken(QwenTokenizer().Encode("\"", false)[0]));
  m.FillNextTokenMask(mask.data(), eos);
  EXPECT_FALSE(Bit(mask, hash)) << "'#' is text inside the string, but it is the eos id";
  EXPECT_FALSE(m.AcceptToken(hash));
  ASSERT_TRUE(m.AcceptToken(QwenTokenizer().Encode("a", false)[0]));
  ASSERT_TRUE(m.AcceptToken(QwenTokenizer().Encode("\"", false)[0]));
  m.FillNextTokenMask(mask.data(), eos);
  EXPECT_TRUE(Bit(mask, hash));
  EXPECT_TRUE(m.AcceptToken(hash));
  EXPECT_TRUE(m.IsTerminated());
}

}  // namespace
}  // namespace mimo
