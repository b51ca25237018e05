// TokenTrie and TokenVocabulary: the preorder layout is the lexicographic order of the tokens'
// bytes, subtree ranges hold exactly the tokens with that prefix, and special or empty tokens are
// in no trie.
#include "grammar/token_vocabulary.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "grammar/grammar.h"
#include "grammar/grammar_walker.h"
#include "grammar_test_env.h"

namespace mimo {
namespace {

std::string PathOf(const TokenTrie& t, int32_t n) {
  // The prefix of node n: walk back through the nearest earlier node of each smaller depth.
  std::string s;
  int32_t depth = t.depth(n);
  for (int32_t m = n; m > 0 && depth > 0; --m) {
    if (t.depth(m) == depth) {
      s.insert(s.begin(), static_cast<char>(t.byte(m)));
      --depth;
    }
  }
  return s;
}

TEST(TokenTrie, SubtreesHoldExactlyThePrefixedTokens) {
  std::mt19937 rng(3);
  std::vector<std::string> bytes = {"a", "ab", "abc", "b", "\xE4", "\xE4\xBD", "ab", "", "zz", "\xFF"};
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const int len = 1 + rng() % 5;
    for (int k = 0; k < len; ++k) s += "ab\xE4\x80z"[rng() % 5];
    bytes.push_back(s);
  }
  auto v = TokenVocabulary::FromBytes(bytes, std::vector<bool>(bytes.size(), false));
  const TokenTrie& t = v->trie();
  const auto ids = t.ids();
  // Every token with bytes appears once; the empty one does not.
  std::multiset<int32_t> seen(ids.begin(), ids.end());
  for (int32_t id = 0; id < static_cast<int32_t>(bytes.size()); ++id)
    EXPECT_EQ(seen.count(id), bytes[id].empty() ? 0u : 1u) << id;
  for (int32_t n = 1; n < t.num_nodes(); ++n) {
    const std::string prefix = PathOf(t, n);
    std::set<int32_t> expect_here, expect_below;
    for (int32_t id = 0; id < static_cast<int32_t>(bytes.size()); ++id) {
      if (bytes[id] == prefix) expect_here.insert(id);
      if (!bytes[id].empty() && bytes[id].compare(0, prefix.size(), prefix) == 0) expect_below.insert(id);
    }
    std::set<int32_t> here(ids.begin() + t.token_begin(n), ids.begin() + t.token_begin(n + 1));
    std::set<int32_t> below(ids.begin() + t.token_begin(n),
                            ids.begin() + t.token_begin(t.subtree_end(n)));
    EXPECT_EQ(here, expect_here) << "node " << n << " '" << prefix << "'";
    EXPECT_EQ(below, expect_below) << "node " << n << " '" << prefix << "'";
  }
  // Preorder is lexicographic (unsigned bytes).
  for (size_t i = 1; i < ids.size(); ++i) {
    const std::string& a = bytes[ids[i - 1]];
    const std::string& b = bytes[ids[i]];
    EXPECT_TRUE(std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                             [](char x, char y) { return (uint8_t)x < (uint8_t)y; }) ||
                a == b);
  }
}

TEST(TokenVocabulary, SpecialTokensAreNeverMaskable) {
  const Tokenizer& tok = testing::QwenTokenizer();
  auto v = TokenVocabulary::FromTokenizer(tok, 151680);
  EXPECT_EQ(v->size(), 151680);
  EXPECT_EQ(v->mask_words(), 4740);
  int special = 0;
  for (const AddedToken& a : tok.added_tokens()) {
    EXPECT_EQ(v->maskable(a.id), !a.special) << a.content;
    special += a.special;
  }
  EXPECT_GT(special, 10);
  // <tool_call> is an added token that is not special: its bytes are ordinary text.
  EXPECT_TRUE(v->maskable(tok.TokenToId("<tool_call>")));
  EXPECT_FALSE(v->maskable(151679));  // beyond the tokenizer: padding rows of the model
  int32_t in_trie = static_cast<int32_t>(v->trie().ids().size());
  int32_t maskable = 0;
  for (int32_t id = 0; id < v->size(); ++id) maskable += v->maskable(id);
  EXPECT_EQ(in_trie, maskable);
}

// A model with fewer logit rows than the tokenizer (generated test checkpoints): only its ids
// are ever allowed, and grammars still end (through the single-byte tokens).
TEST(TokenVocabulary, CutVocabularyStillCompletesGrammars) {
  auto v = TokenVocabulary::FromTokenizer(testing::QwenTokenizer(), 512);
  EXPECT_EQ(v->size(), 512);
  EXPECT_EQ(v->mask_words(), 16);
  for (int32_t id : v->trie().ids()) ASSERT_LT(id, 512);
  for (const auto& s : testing::SchemaSuite()) {
    auto g = Grammar::FromJsonSchema(s.text, v);
    ASSERT_TRUE(g.ok()) << s.name << ": " << g.status().message();
    WalkOptions o;
    o.seed = 3;
    // EOS ids of the real vocabulary lie beyond 512: the walk ends on the grammar's own end.
    WalkResult r = GrammarWalker::Walk(*g, o, std::vector<int32_t>{512});
    EXPECT_TRUE(r.terminated && !r.stuck) << s.name << ": " << r.text;
    for (int32_t t : r.tokens) ASSERT_LT(t, 512);
  }
}

}  // namespace
}  // namespace mimo
