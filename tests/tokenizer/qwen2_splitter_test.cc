// The hand-written Qwen2 pre-tokenizer matcher against PCRE2 running the same pattern: the
// character classes for every code point, then the pieces of many texts.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <gtest/gtest.h>
#include <pcre2.h>

#include <random>

#include "core/utf8.h"
#include "tokenizer/qwen2_pre_tokenizer.h"
#include "tokenizer/regex_splitter.h"
#include "tokenizer/unicode_category_tables.h"

namespace mimo {
namespace {

std::vector<std::string> Pieces(const RegexSplitter& s, std::string_view text) {
  std::vector<std::string> out;
  s.Split(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

TEST(Qwen2SplitterTest, CategoryOfEveryCodePointMatchesPcre2) {
  const char* classes[] = {"\\p{L}", "\\p{N}", "\\s"};
  pcre2_code* re[3];
  for (int k = 0; k < 3; ++k) {
    int err;
    PCRE2_SIZE off;
    re[k] = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(classes[k]), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr);
    ASSERT_NE(re[k], nullptr);
    pcre2_jit_compile(re[k], PCRE2_JIT_COMPLETE);
  }
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  int mismatches = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    utf8::Append(cp, &s);
    int want = 0;
    for (int k = 0; k < 3 && want == 0; ++k) {
      if (pcre2_match(re[k], reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr) >=
          0) {
        want = k + 1;
      }
    }
    const int got = category_tables::Category(cp);
    if (got != want && ++mismatches <= 10) {
      ADD_FAILURE() << "U+" << std::hex << static_cast<uint32_t>(cp) << ": table " << got
                    << ", PCRE2 " << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
  pcre2_match_data_free(md);
  for (auto* r : re) pcre2_code_free(r);
}

TEST(Qwen2SplitterTest, PiecesEqualPcre2) {
  auto fast = RegexSplitter::Create(kQwen2PreTokenizerPattern);
  auto slow = RegexSplitter::Create(kQwen2PreTokenizerPattern);
  ASSERT_TRUE(fast.ok() && slow.ok());
  ASSERT_TRUE((*fast)->uses_qwen2_matcher());
  (*slow)->set_force_pcre2(true);
  std::vector<std::string> texts = {"Hello world",
                                    "I'm you'RE they'Ve it'S we'LL he'D 'x ''s 'ſ",
                                    "a\r\nb",
                                    "x \r\n \n  y",
                                    "  lead",
                                    "trail  ",
                                    "a  b",
                                    "a \t b",
                                    "1234 5",
                                    " ?!x",
                                    " ?!\n\ny",
                                    "\t\tword",
                                    "\nword",
                                    "é\xCC\x81x",
                                    "中文 テスト 한국어",
                                    "👍🏽 ok",
                                    "\xC2\xA0\xC2\xA0x",
                                    "\xE3\x80\x80x",
                                    "'",
                                    " '",
                                    "x's",
                                    "abc'",
                                    "don't'll",
                                    "  \n",
                                    "\n \n ",
                                    "end \n",
                                    "$$$ 12",
                                    "a\x0B\x0C"
                                    "b"};
  // Random strings over characters from every class, including the edge cases above.
  const char* alphabet[] = {"a",
                            "Z",
                            "é",
                            "中",
                            "\xCC\x81",
                            "1",
                            "٣",
                            "Ⅻ",
                            " ",
                            "  ",
                            "\t",
                            "\n",
                            "\r",
                            "\r\n",
                            "\xC2\xA0",
                            "\xE2\x80\xA8",
                            "\xE3\x80\x80",
                            "'",
                            "s",
                            "S",
                            "re",
                            "LL",
                            "ſ",
                            "!",
                            "?",
                            ".",
                            "😀",
                            "\xE2\x80\x8D",
                            "-",
                            "_",
                            "\x0B"};
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    const int n = 1 + rng() % 20;
    for (int k = 0; k < n; ++k) t += alphabet[rng() % (sizeof(alphabet) / sizeof(alphabet[0]))];
    texts.push_back(t);
  }
  int mismatches = 0;
  for (const auto& t : texts) {
    const auto a = Pieces(**fast, t), b = Pieces(**slow, t);
    if (a != b && ++mismatches <= 10) {
      std::string da, db;
      for (auto& p : a) da += "[" + p + "]";
      for (auto& p : b) db += "[" + p + "]";
      ADD_FAILURE() << "text '" << t << "'\n fast:  " << da << "\n pcre2: " << db;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace mimo
