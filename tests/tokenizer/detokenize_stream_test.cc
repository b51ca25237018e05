// DetokenizeStream on the tiny tokenizer (every byte is a token, so every split point of a
// multi-byte character can be fed) and on tokens that end in the middle of a character.
#include "tokenizer/detokenize_stream.h"

#include <gtest/gtest.h>

#include "core/utf8.h"
#include "tokenizer/tiny_tokenizer.h"

namespace mimo {
namespace {

using testing::Added;
using testing::TinySpec;
using testing::TinyTokenizerJson;

std::unique_ptr<Tokenizer> Make(const TinySpec& spec) {
  auto t = Tokenizer::FromJson(TinyTokenizerJson(spec));
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(t).value() : nullptr;
}

// Feeds ids and checks each piece is valid UTF-8; returns the concatenation incl. Flush.
std::string StreamAll(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip = false) {
  DetokenizeStream s(t, skip);
  std::string all;
  for (int32_t id : ids) {
    std::string piece = s.Add(id);
    EXPECT_TRUE(utf8::IsValid(piece));
    all += piece;
  }
  std::string tail = s.Flush();
  EXPECT_TRUE(utf8::IsValid(tail));
  return all + tail;
}

TEST(DetokenizeStreamTest, EveryByteSplitOfMultiByteCharacters) {
  auto t = Make(TinySpec{});
  ASSERT_TRUE(t);
  const std::string text =
      "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"
      "b";  // a é 中 😀 b
  // One byte per token: output appears exactly when a character completes.
  DetokenizeStream s(*t);
  std::string got;
  const std::vector<size_t> char_ends = {1, 3, 6, 10, 11};
  for (size_t i = 0; i < text.size(); ++i) {
    const std::string piece = s.Add(static_cast<uint8_t>(text[i]));
    const bool completes = std::find(char_ends.begin(), char_ends.end(), i + 1) != char_ends.end();
    EXPECT_EQ(piece.empty(), !completes) << "byte " << i;
    got += piece;
    EXPECT_EQ(got, text.substr(0, got.size()));
  }
  EXPECT_EQ(s.pending_bytes(), 0u);
  EXPECT_EQ(got, text);
}

TEST(DetokenizeStreamTest, EmojiSplitAcrossMergedTokensAtEveryPoint) {
  const std::string emoji = "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD";  // 👍🏽 (8 bytes, 2 chars)
  for (size_t cut = 1; cut < emoji.size(); ++cut) {
    TinySpec spec;
    // Two tokens: x + emoji[:cut] and emoji[cut:] + y, built from byte merges.
    std::string left = "x", right;
    for (size_t i = 0; i < cut; ++i) {
      spec.merges.push_back({left, emoji.substr(i, 1)});
      left += emoji[i];
    }
    right = emoji.substr(cut, 1);
    for (size_t i = cut + 1; i < emoji.size(); ++i) {
      spec.merges.push_back({right, emoji.substr(i, 1)});
      right += emoji[i];
    }
    spec.nfc = false;
    auto t = Make(spec);
    ASSERT_TRUE(t);
    const int32_t a = t->TokenToId(ByteLevelEncode(left)), b = t->TokenToId(ByteLevelEncode(right));
    ASSERT_GE(a, 256);
    if (right.size() > 1) {
      ASSERT_GE(b, 256);
    }
    DetokenizeStream s(*t);
    const std::string p1 = s.Add(a);
    const size_t first_char_end = 4;
    EXPECT_EQ(p1, cut >= first_char_end ? "x" + emoji.substr(0, 4) : "x") << "cut " << cut;
    const std::string p2 = s.Add(b);
    EXPECT_EQ(p1 + p2, "x" + emoji);
    EXPECT_EQ(s.Flush(), "");
  }
}

TEST(DetokenizeStreamTest, InvalidBytesBecomeReplacementAndMatchDecode) {
  auto t = Make(TinySpec{});
  ASSERT_TRUE(t);
  // 0xFF can never start a character: replaced at once, not held.
  DetokenizeStream s(*t);
  EXPECT_EQ(s.Add('a'), "a");
  EXPECT_EQ(s.Add(0xFF), "\xEF\xBF\xBD");
  // E4 B8 then '(' : the held prefix is invalid once '(' arrives -> one U+FFFD, then "(".
  EXPECT_EQ(s.Add(0xE4), "");
  EXPECT_EQ(s.Add(0xB8), "");
  EXPECT_EQ(s.pending_bytes(), 2u);
  EXPECT_EQ(s.Add('('), "\xEF\xBF\xBD(");
  // A truncated character at the end: held, and U+FFFD only on Flush.
  EXPECT_EQ(s.Add(0xF0), "");
  EXPECT_EQ(s.Add(0x9F), "");
  EXPECT_EQ(s.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(s.Flush(), "");

  const std::vector<std::vector<int32_t>> cases = {
      {'a', 0xE4, 0xB8},  {0xC3},       {0xC3, 0xC3, 0xA9}, {0xED, 0xA0, 0x80}, {0xF4, 0x90, 'x'},
      {0xE0, 0x80, 0x80}, {0x80, 0x80}, {0xF0, 0x9F, 0x98}};
  for (const auto& ids : cases) EXPECT_EQ(StreamAll(*t, ids), t->Decode(ids));
}

TEST(DetokenizeStreamTest, AddedTokensAndSkipSpecial) {
  TinySpec spec;
  spec.added_tokens = {Added(300, "<|end|>", true), Added(301, "<think>", false)};
  auto t = Make(spec);
  ASSERT_TRUE(t);
  const std::vector<int32_t> ids = {301, 'h', 0xC3, 300, 0xA9, 'i', 300};
  EXPECT_EQ(StreamAll(*t, ids), t->Decode(ids));
  EXPECT_EQ(StreamAll(*t, ids, /*skip=*/true), t->Decode(ids, /*skip_special=*/true));
  EXPECT_EQ(StreamAll(*t, ids, /*skip=*/true), "<think>h\xC3\xA9i");  // é joins across the skip
  EXPECT_EQ(StreamAll(*t, {12345, -7}), "");                          // unknown ids add nothing
}

}  // namespace
}  // namespace mimo
