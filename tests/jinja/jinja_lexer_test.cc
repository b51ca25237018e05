// Lexer: token kinds, jinja2's whitespace rules (trim_blocks, lstrip_blocks, -, +), and errors.
#include "jinja/jinja_lexer.h"

#include <gtest/gtest.h>

namespace mimo::jinja {
namespace {

std::vector<Token> Lex(const std::string& s, LexerOptions opt = {}) {
  auto t = Tokenize(s, opt);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? *t : std::vector<Token>{};
}

// Concatenation of the data tokens: the literal text a template would emit.
std::string Data(const std::string& s, LexerOptions opt = {}) {
  std::string out;
  for (const auto& t : Lex(s, opt)) {
    if (t.type == TokenType::kData) out += t.value;
  }
  return out;
}

TEST(JinjaLexer, TokenKinds) {
  auto toks = Lex("a{{ x.y[0] + 1.5 // 2 }}b{% if 'q\\n' %}");
  std::vector<TokenType> kinds;
  for (const auto& t : toks) kinds.push_back(t.type);
  std::vector<TokenType> want = {
      TokenType::kData,     TokenType::kVarBegin, TokenType::kName,     TokenType::kOperator,
      TokenType::kName,     TokenType::kOperator, TokenType::kInt,      TokenType::kOperator,
      TokenType::kOperator, TokenType::kFloat,    TokenType::kOperator, TokenType::kInt,
      TokenType::kVarEnd,   TokenType::kData,     TokenType::kBlockBegin, TokenType::kName,
      TokenType::kString,   TokenType::kBlockEnd, TokenType::kEof};
  EXPECT_EQ(kinds, want);
  EXPECT_EQ(toks[9].float_value, 1.5);
  EXPECT_EQ(toks[10].value, "//");
  EXPECT_EQ(toks[16].value, "q\n");  // escapes decoded like Python's unicode-escape
}

TEST(JinjaLexer, TrimBlocksRemovesOneNewlineAfterBlockTags) {
  EXPECT_EQ(Data("{% if x %}\nA\n{% endif %}\nB"), "A\nB");
  // Not after variable tags.
  EXPECT_EQ(Data("{{ x }}\nA"), "\nA");
  // Only one newline.
  EXPECT_EQ(Data("{% if x %}\n\nA"), "\nA");
  LexerOptions off;
  off.trim_blocks = false;
  off.lstrip_blocks = false;
  EXPECT_EQ(Data("{% if x %}\nA", off), "\nA");
}

TEST(JinjaLexer, LstripBlocksRemovesIndentBeforeBlockTags) {
  EXPECT_EQ(Data("A\n    {% if x %}B"), "A\nB");
  EXPECT_EQ(Data("A\n  {{ x }}"), "A\n  ");           // variables keep their indent
  EXPECT_EQ(Data("A\n  x {% if y %}"), "A\n  x ");     // text before the tag on that line
  EXPECT_EQ(Data("A\n  {%+ if x %}B"), "A\n  B");      // `+` disables lstrip
  EXPECT_EQ(Data("  {# c #}\nB"), "B");               // comments too, and trim after them
}

TEST(JinjaLexer, MinusStripsAllWhitespace) {
  EXPECT_EQ(Data("A  \n\t {{- x -}} \n\n B"), "AB");
  EXPECT_EQ(Data("A \n {%- if x -%}\n\n B"), "AB");
  EXPECT_EQ(Data("A {#- c -#} B"), "AB");
}

TEST(JinjaLexer, NewlinesNormalisedAndTrailingNewlineDropped) {
  EXPECT_EQ(Data("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(Data("a\n\n"), "a\n");
}

TEST(JinjaLexer, RawBlocksAreData) {
  EXPECT_EQ(Data("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(JinjaLexer, ErrorsNameTheLine) {
  auto r = Tokenize("a\nb\n{{ x $ }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status().message();
  auto c = Tokenize("a\n{# never closed");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("comment"), std::string::npos);
  auto u = Tokenize("{{ 'open }}");
  ASSERT_FALSE(u.ok());
  auto b = Tokenize("{{ (1 ] }}");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("unexpected ']'"), std::string::npos);
}

}  // namespace
}  // namespace mimo::jinja
