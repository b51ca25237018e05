// RegexParser against std::wregex (ECMAScript, an independent engine): on random strings the
// compiled automaton accepts exactly the strings in which std::regex_search finds a match; for
// the shorthands we deliberately narrow (\D \W \S, see regex_parser.h) everything we accept must
// match.
#include "grammar/regex_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>

#include "grammar/dfa.h"

namespace mimo {
namespace {

std::string Utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

std::wstring Wide(const std::u32string& s) { return std::wstring(s.begin(), s.end()); }

Dfa Compile(const std::string& pattern) {
  Nfa n;
  auto f = RegexParser::Compile(pattern, &n);
  EXPECT_TRUE(f.ok()) << pattern << ": " << f.status().message();
  auto d = Dfa::Determinize(n, *f, 100000);
  EXPECT_TRUE(d.ok());
  return d->Trimmed();
}

bool Accepts(const Dfa& d, const std::string& s) {
  int32_t q = 0;
  for (char c : s) {
    q = d.Next(q, static_cast<uint8_t>(c));
    if (q < 0) return false;
  }
  return d.accepting(q);
}

// Random strings over `alphabet` (lengths 0..max_len), plus strings sampled from the language
// by walking the automaton, so that both acceptance and rejection are exercised.
std::vector<std::u32string> Samples(const std::u32string& alphabet, int count, int max_len,
                                    std::mt19937* rng) {
  std::vector<std::u32string> out;
  for (int i = 0; i < count; ++i) {
    std::u32string s;
    const int len = (*rng)() % (max_len + 1);
    for (int k = 0; k < len; ++k) s += alphabet[(*rng)() % alphabet.size()];
    out.push_back(s);
  }
  return out;
}

void CompareWithStdRegex(const std::string& pattern, const std::u32string& alphabet,
                         bool exact) {
  Dfa d = Compile(pattern);
  std::u32string wide_pattern;
  for (size_t i = 0; i < pattern.size();) {  // the pattern as code points
    const unsigned char c = pattern[i];
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (pattern[i + k] & 0x3F);
    wide_pattern += cp;
    i += n;
  }
  std::wregex re(Wide(wide_pattern), std::regex::ECMAScript);
  std::mt19937 rng(std::hash<std::string>()(pattern));
  int matched = 0;
  for (const auto& s : Samples(alphabet, 3000, 8, &rng)) {
    const bool ours = Accepts(d, Utf8(s));
    const bool theirs = std::regex_search(Wide(s), re);
    matched += theirs;
    if (exact) {
      ASSERT_EQ(ours, theirs) << "pattern " << pattern << " on '" << Utf8(s) << "'";
    } else if (ours) {
      ASSERT_TRUE(theirs) << "pattern " << pattern << " accepted '" << Utf8(s) << "'";
    }
  }
  EXPECT_GT(matched, 0) << pattern << ": no sample matched; the comparison says little";
}

TEST(RegexParser, MatchesStdRegexOnRandomStrings) {
  const std::u32string ascii = U"ab01_-. @x\n\"\\";
  const std::u32string mixed = U"aZ9 _é日\u2028\r\n-";
  CompareWithStdRegex("^a+b?$", U"ab", true);
  CompareWithStdRegex("ab", U"abc", true);
  CompareWithStdRegex("^(ab|ba)*$", U"ab", true);
  CompareWithStdRegex("^[a-c]{2,3}$", U"abcd", true);
  CompareWithStdRegex("^x{2}$|^y{1,}$", U"xyz", true);
  CompareWithStdRegex("^[^a]b", U"abc\u00e9", true);
  CompareWithStdRegex("^\\d+(\\.\\d{1,2})?$", U"0123.a", true);
  CompareWithStdRegex("\\w@\\w", ascii, true);
  CompareWithStdRegex("^.{2}$", mixed, true);
  CompareWithStdRegex("^[é日]+$", mixed, true);
  CompareWithStdRegex("^(?:a|b)(c)?$", U"abc", true);
  CompareWithStdRegex("^[\\-\\.]+\\\\$", ascii, true);
  CompareWithStdRegex("^\\x41\\u00e9?$", U"A\u00e9", true);
  CompareWithStdRegex("^a{0}b$", U"ab", true);
  CompareWithStdRegex("^a*?b+?$", U"ab", true);
  CompareWithStdRegex("^[a-]$", U"a-b", true);
  CompareWithStdRegex("^\\s\\S\\D\\W$", U"a 1\u00e9\t_", false);
  CompareWithStdRegex("^[^\\d]+$", U"a1\u0661", false);
}

// A bounded single-character repetition moved into length bounds gives the same language.
TEST(RegexParser, RelaxedRepetitionPlusLengthBoundsIsExact) {
  struct Case {
    const char* pattern;
    int min, max;
  };
  for (const Case& c : {Case{"^[A-Z][a-z ]{2,5}$", 3, 6}, Case{"^ab[0-9]{3,}$", 5, -1},
                        Case{"^x(yz|zy)[ab]{0,3}q$", 4, 7}, Case{"^.{2,4}$", 2, 4}}) {
    Nfa n;
    RegexParser::LengthBounds b;
    auto f = RegexParser::Compile(c.pattern, &n, &b);
    ASSERT_TRUE(f.ok()) << c.pattern;
    EXPECT_EQ(b.min, c.min) << c.pattern;
    EXPECT_EQ(b.max, c.max) << c.pattern;
    Dfa relaxed = Dfa::Determinize(n, *f, 100000)->Trimmed();
    Dfa exact = Compile(c.pattern);
    std::mt19937 rng(11);
    for (const auto& s : Samples(U"Aabyzq01 é", 20000, 9, &rng)) {
      const std::string u = Utf8(s);
      const bool within = static_cast<int>(s.size()) >= b.min && (b.max < 0 || static_cast<int>(s.size()) <= b.max);
      ASSERT_EQ(Accepts(relaxed, u) && within, Accepts(exact, u)) << c.pattern << " on '" << u << "'";
    }
  }
  // Not relaxed: two variable parts, or not anchored at both ends.
  for (const char* p : {"^a{1,3}b{1,3}$", "a{2,3}", "^a{2,3}", "^(ab){2,3}$"}) {
    Nfa n;
    RegexParser::LengthBounds b;
    ASSERT_TRUE(RegexParser::Compile(p, &n, &b).ok());
    EXPECT_EQ(b.min, 0) << p;
    EXPECT_EQ(b.max, -1) << p;
  }
}

TEST(RegexParser, NamedGroupsAreGroups) {  // std::regex lacks them, so checked by hand
  Dfa d = Compile("^(?<word>ab)+$");
  EXPECT_TRUE(Accepts(d, "ab"));
  EXPECT_TRUE(Accepts(d, "abab"));
  EXPECT_FALSE(Accepts(d, "aba"));
  EXPECT_FALSE(Accepts(d, ""));
  Dfa braces = Compile("^a{x}$");  // not a quantifier: literal braces (ECMA-262 Annex B, Python)
  EXPECT_TRUE(Accepts(braces, "a{x}"));
  EXPECT_FALSE(Accepts(braces, "a"));
}

TEST(RegexParser, RejectsWhatItDoesNotImplement) {
  for (const char* p : {"(?=a)", "(?!a)", "(?<=a)b", "(a)\\1", "\\bx", "\\Bx", "\\p{L}",
                        "a^b", "a$b", "(^a)", "\\cA", "[]", "[^]", "\\q", "\\k<n>",
                        "a{,2}"}) {  // {,n}: a quantifier in Python, literal text in ECMA-262
    Nfa n;
    auto f = RegexParser::Compile(p, &n);
    ASSERT_FALSE(f.ok()) << p;
    EXPECT_EQ(f.status().code(), StatusCode::kUnimplemented) << p << ": " << f.status().message();
  }
  for (const char* p : {"(a", "a)", "[a", "*a", "a{3,1}", "\\", "[z-a]"}) {
    Nfa n;
    auto f = RegexParser::Compile(p, &n);
    ASSERT_FALSE(f.ok()) << p;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << p << ": " << f.status().message();
  }
}

}  // namespace
}  // namespace mimo
