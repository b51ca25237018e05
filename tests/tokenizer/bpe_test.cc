// Tokenizer unit tests on a tiny hand-built tokenizer.json: merge order, both merge spellings,
// added-token matching, parse_special=false, invalid input and load errors. Expected ids follow
// by hand from the merge list (BPE applies the lowest-ranked adjacent pair first, leftmost on
// ties) and the vocab layout of tiny_tokenizer.h (byte b -> id b).
#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include "tokenizer/tiny_tokenizer.h"

namespace mimo {
namespace {

using testing::Added;
using testing::TinySpec;
using testing::TinyTokenizerJson;
using Ids = std::vector<int32_t>;

std::unique_ptr<Tokenizer> Make(const TinySpec& spec) {
  auto t = Tokenizer::FromJson(TinyTokenizerJson(spec));
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

TinySpec HelloSpec(bool as_strings) {
  TinySpec s;
  // ids: he=256, ll=257, hell=258, hello=259, " h"=260, " hello"=261
  s.merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "h"}, {" ", "hello"}};
  s.merges_as_strings = as_strings;
  return s;
}

TEST(BpeTest, AppliesMergesByRank) {
  auto t = Make(HelloSpec(false));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->Encode("hello"), Ids{259});
  EXPECT_EQ(t->Encode("hell"), Ids{258});
  EXPECT_EQ(t->Encode("help"), (Ids{256, 'l', 'p'}));
  // " hello" is one pre-token. "he" (rank 0) beats " h" (rank 4), so " h" is never formed;
  // the word becomes " ", "hello" and then " hello" (rank 5).
  EXPECT_EQ(t->Encode(" hello"), Ids{261});
  EXPECT_EQ(t->Encode(" help"), (Ids{' ', 256, 'l', 'p'}));
  EXPECT_EQ(t->Encode(" hip"), (Ids{260, 'i', 'p'}));
  EXPECT_EQ(t->Encode("hello hello"), (Ids{259, 261}));
  EXPECT_EQ(t->vocab_size(), 262);
}

TEST(BpeTest, StringAndPairMergesAgree) {
  auto a = Make(HelloSpec(false));
  auto b = Make(HelloSpec(true));
  ASSERT_TRUE(a && b);
  for (const char* s : {"hello", "hell help hello  world", "hehehe", "llll", " hello\n"}) {
    EXPECT_EQ(a->Encode(s), b->Encode(s)) << s;
  }
}

TEST(BpeTest, EqualRanksMergeLeftmostFirstInShortAndLongWords) {
  TinySpec s;
  s.merges = {{"a", "a"}, {"aa", "aa"}};  // aa=256, aaaa=257
  auto t = Make(s);
  ASSERT_TRUE(t);
  // a a a a a -> (aa) a a a -> (aa)(aa) a -> (aaaa) a
  EXPECT_EQ(t->Encode("aaaaa"), (Ids{257, 'a'}));
  EXPECT_EQ(t->Encode("aaa"), (Ids{256, 'a'}));
  // 101 letters takes the long-word (heap) path: 25 x aaaa + a.
  Ids want(25, 257);
  want.push_back('a');
  EXPECT_EQ(t->Encode(std::string(101, 'a')), want);
}

TEST(BpeTest, PreTokenizerKeepsMergesInsideWords) {
  TinySpec s;
  s.merges = {{"o", " "}, {"1", "2"}};  // would merge across a word boundary / digits
  auto t = Make(s);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->Encode("go on"), (Ids{'g', 'o', ' ', 'o', 'n'}));  // "go" | " on"
  EXPECT_EQ(t->Encode("12"), (Ids{'1', '2'}));                    // \p{N}: one digit each
  EXPECT_EQ(t->Encode("x 's"), (Ids{'x', ' ', '\'', 's'}));
}

TEST(BpeTest, AddedTokensLongestMatchFirst) {
  TinySpec s = HelloSpec(false);
  s.added_tokens = {Added(300, "<a>", true), Added(301, "<a><b>", true), Added(302, "<b>", false)};
  auto t = Make(s);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->vocab_size(), 303);
  EXPECT_EQ(t->Encode("hello<a><b>hello<a>"), (Ids{259, 301, 259, 300}));
  EXPECT_EQ(t->Encode("hello <a> hello"), (Ids{259, ' ', 300, 261}));
  EXPECT_EQ(t->Encode("<b><a>"), (Ids{302, 300}));
  EXPECT_EQ(t->Encode("<<a>>"), (Ids{'<', 300, '>'}));
  // parse_special=false: the same text as plain bytes (no merges apply to them).
  EXPECT_EQ(t->Encode("<a>", /*parse_special=*/false), (Ids{'<', 'a', '>'}));
  EXPECT_EQ(t->TokenToId("<a><b>"), 301);
  EXPECT_EQ(t->IdToToken(302), "<b>");
  EXPECT_EQ(t->Decode({259, 301, 302}), "hello<a><b><b>");
  EXPECT_EQ(t->Decode({259, 301, 302}, /*skip_special=*/true), "hello<b>");  // <b> not special
}

TEST(BpeTest, AddedTokenStripFlagsAbsorbWhitespace) {
  TinySpec s;
  s.added_tokens = {Added(300, "<L>", true, /*lstrip=*/true), Added(301, "<R>", true, false, true)};
  auto t = Make(s);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->Encode("x  <L>y"), (Ids{'x', 300, 'y'}));
  EXPECT_EQ(t->Encode("x<R> \n y"), (Ids{'x', 301, 'y'}));
}

TEST(BpeTest, InvalidUtf8IsRepairedAsReplacementCharacter) {
  auto t = Make(TinySpec{});
  ASSERT_TRUE(t);
  // U+FFFD is EF BF BD; "\xE2\x82" is one maximal invalid subpart -> one U+FFFD.
  EXPECT_EQ(t->Encode("a\xFF"), (Ids{'a', 0xEF, 0xBF, 0xBD}));
  EXPECT_EQ(t->Encode("\xE2\x82"), (Ids{0xEF, 0xBF, 0xBD}));
  EXPECT_EQ(t->Decode({'a', 0xE2, 0x82}), "a\xEF\xBF\xBD");
  EXPECT_EQ(t->Decode({'a', 0xFF, 'b'}),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(t->Decode({'a', 99999, -1, 'b'}), "ab");  // unknown ids are skipped
}

// Literal ranges (a rendered chat prompt's request text): no added token is recognised where it
// would overlap one; the bytes are encoded as text together with the text around them.
TEST(BpeTest, LiteralRangesKeepAddedTokenTextAsText) {
  TinySpec s = HelloSpec(false);
  s.added_tokens = {Added(300, "<a>", true), Added(301, "<a><b>", true), Added(302, "<b>", false)};
  auto t = Make(s);
  ASSERT_TRUE(t);
  using R = std::vector<TextRange>;
  const std::string text = "hello<a>hello<a>";
  // No ranges: Encode(text, true); everything literal: Encode(text, false).
  EXPECT_EQ(t->Encode(text, true, R{}), t->Encode(text));
  EXPECT_EQ(t->Encode(text, true, R{{0, text.size()}}), t->Encode(text, false));
  EXPECT_EQ(t->Encode(text, false, R{{5, 8}}), t->Encode(text, false));
  // The first <a> literal, the second a token: "hello<a>hello" is one stretch of text.
  EXPECT_EQ(t->Encode(text, true, R{{5, 8}}), (Ids{259, '<', 'a', '>', 259, 300}));
  // A range touching one byte of a token is enough; one beside it is not.
  EXPECT_EQ(t->Encode(text, true, R{{7, 8}}), (Ids{259, '<', 'a', '>', 259, 300}));
  EXPECT_EQ(t->Encode(text, true, R{{0, 5}, {8, 13}}), (Ids{259, 300, 259, 300}));
  // Ranges in any order, overlapping, empty or past the end.
  EXPECT_EQ(t->Encode(text, true, R{{14, 99}, {6, 7}, {5, 7}, {3, 3}}),
            (Ids{259, '<', 'a', '>', 259, '<', 'a', '>'}));
  // Leftmost-longest among the matches that overlap no range: <a><b> is out, <a> is not.
  EXPECT_EQ(t->Encode("<a><b>", true, R{{4, 5}}), (Ids{300, '<', 'b', '>'}));
  EXPECT_EQ(t->Encode("<a><b>", true, R{{1, 2}}), (Ids{'<', 'a', '>', 302}));
  // Invalid UTF-8 is repaired stretch by stretch; the range stays on its bytes.
  EXPECT_EQ(t->Encode("\xFF<a>\xFF", true, R{{1, 4}}),
            (Ids{0xEF, 0xBF, 0xBD, '<', 'a', '>', 0xEF, 0xBF, 0xBD}));
  EXPECT_EQ(t->Encode("\xFF<a>\xFF", true, R{{0, 1}}),
            (Ids{0xEF, 0xBF, 0xBD, 300, 0xEF, 0xBF, 0xBD}));
}

TEST(BpeTest, LiteralRangesStopStripFlags) {
  TinySpec s;
  s.added_tokens = {Added(300, "<L>", true, /*lstrip=*/true), Added(301, "<R>", true, false, true)};
  auto t = Make(s);
  ASSERT_TRUE(t);
  using R = std::vector<TextRange>;
  // The literal space stays; only the whitespace outside ranges is absorbed.
  EXPECT_EQ(t->Encode("x  <L>y", true, R{{1, 2}}), (Ids{'x', ' ', 300, 'y'}));
  EXPECT_EQ(t->Encode("x<R>  y", true, R{{5, 6}}), (Ids{'x', 301, ' ', 'y'}));
}

TEST(BpeTest, NfcAppliedOnlyWhenAsked) {
  TinySpec s;
  auto with = Make(s);
  s.nfc = false;
  auto without = Make(s);
  ASSERT_TRUE(with && without);
  EXPECT_EQ(with->Decode(with->Encode("e\xCC\x81")), "\xC3\xA9");         // e + U+0301 -> é
  EXPECT_EQ(without->Decode(without->Encode("e\xCC\x81")), "e\xCC\x81");  // unchanged
}

TEST(BpeTest, LoadErrorsNameTheProblem) {
  auto bad = Tokenizer::FromJson("{not json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos);

  auto j = nlohmann::json::parse(TinyTokenizerJson(HelloSpec(false)));
  j["model"]["type"] = "WordPiece";
  auto wp = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(wp.ok());
  EXPECT_EQ(wp.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(wp.status().message().find("WordPiece"), std::string::npos);

  j = nlohmann::json::parse(TinyTokenizerJson(HelloSpec(false)));
  j["model"]["merges"].push_back({"zz", "q"});
  auto mg = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(mg.ok());
  EXPECT_NE(mg.status().message().find("\"zz\""), std::string::npos) << mg.status().message();

  j = nlohmann::json::parse(TinyTokenizerJson(HelloSpec(false)));
  j["model"]["merges"].push_back("nospace");
  EXPECT_FALSE(Tokenizer::FromJson(j.dump()).ok());

  j = nlohmann::json::parse(TinyTokenizerJson(HelloSpec(false)));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  auto rx = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(rx.ok());
  EXPECT_NE(rx.status().message().find("regex"), std::string::npos);

  j = nlohmann::json::parse(TinyTokenizerJson(HelloSpec(false)));
  j["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_FALSE(Tokenizer::FromJson(j.dump()).ok());

  j = nlohmann::json::parse(TinyTokenizerJson(HelloSpec(false)));
  j.erase("model");
  EXPECT_FALSE(Tokenizer::FromJson(j.dump()).ok());

  // A token id far past the others would size the id tables by it (found by the fuzzer: one
  // vocab entry with id 1.6e9 asked for 48 GiB).
  j = nlohmann::json::parse(TinyTokenizerJson(HelloSpec(false)));
  j["model"]["vocab"]["far"] = 2000000000;
  auto far = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.status().message().find("model.vocab id 2000000000"), std::string::npos)
      << far.status().message();
  j = nlohmann::json::parse(TinyTokenizerJson(HelloSpec(false)));
  j["added_tokens"].push_back({{"id", 70000 + 300}, {"content", "<far>"}});
  auto far_added = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(far_added.ok());
  EXPECT_NE(far_added.status().message().find("added_tokens id 70300"), std::string::npos)
      << far_added.status().message();
  // A gap a real vocabulary could have is accepted.
  j = nlohmann::json::parse(TinyTokenizerJson(HelloSpec(false)));
  j["added_tokens"].push_back({{"id", 60000}, {"content", "<gap>"}});
  auto gap = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(gap.ok()) << gap.status().message();
  EXPECT_EQ((*gap)->Encode("<gap>", true), Ids{60000});

  auto missing = Tokenizer::FromFile("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mimo
