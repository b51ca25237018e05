// Stop rules on the real Qwen3 tokenizer (third_party/qwen3, made by scripts/setup-tests.sh): stop
// strings that span token boundaries are found and never emitted, text that may start a stop
// string is held back until it cannot, EOS and stop ids end without their own text, max_tokens.
#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <memory>

namespace mimo {
namespace {

const Tokenizer& Qwen() {
  static std::unique_ptr<Tokenizer> t = [] {
    auto r = Tokenizer::FromFile(std::string(MIMO_SOURCE_DIR) + "/third_party/qwen3/tokenizer.json");
    EXPECT_TRUE(r.ok()) << r.status().message() << " (run scripts/setup-tests.sh)";
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return *t;
}

struct Fed {
  std::vector<std::string> pieces;  // text released per token
  std::string text;
  bool finished = false;
  bool by_length = false;
  std::string reason;
  int tokens = 0;
};

Fed Feed(const StopParams& sp, const std::vector<int32_t>& ids, int max_tokens = 1000,
         const std::vector<int32_t>& eos = {}) {
  StopChecker c(&Qwen(), sp, eos);
  Fed r;
  for (int32_t id : ids) {
    ++r.tokens;
    StopChecker::Step s = c.Append(id, r.tokens, max_tokens, false);
    r.pieces.push_back(s.text);
    r.text += s.text;
    if (s.finished) {
      r.finished = true;
      r.by_length = s.by_length;
      r.reason = s.stop_reason;
      break;
    }
  }
  return r;
}

TEST(StopChecker, StopStringSpanningTokensIsCutAndNeverEmitted) {
  const std::vector<int32_t> ids = Qwen().Encode("The answer is forty-two. Goodbye now.");
  // Find a stop string that is not a single token's text: "forty-two" spans several tokens.
  ASSERT_GT(Qwen().Encode("forty-two").size(), 1u);
  StopParams sp;
  sp.stop = {"forty-two"};
  const Fed r = Feed(sp, ids);
  EXPECT_TRUE(r.finished);
  EXPECT_FALSE(r.by_length);
  EXPECT_EQ(r.reason, "forty-two");
  EXPECT_EQ(r.text, "The answer is ");
  EXPECT_LT(r.tokens, static_cast<int>(ids.size()));  // stopped at the token completing it
  for (const std::string& p : r.pieces) EXPECT_EQ(p.find("forty"), std::string::npos) << p;
}

TEST(StopChecker, HeldBackTextIsReleasedWhenNoStopFollows) {
  const std::string text = "abc abd abe";
  const std::vector<int32_t> ids = Qwen().Encode(text);
  StopParams sp;
  sp.stop = {"abx", "zzzz"};
  const Fed r = Feed(sp, ids, static_cast<int>(ids.size()));
  EXPECT_TRUE(r.finished);
  EXPECT_TRUE(r.by_length);
  EXPECT_EQ(r.text, text);
  // While running, the last 3 bytes (longest stop string - 1) are held back.
  std::string so_far;
  for (size_t i = 0; i + 1 < r.pieces.size(); ++i) so_far += r.pieces[i];
  const std::string all_but_last = Qwen().Decode(std::vector<int32_t>(ids.begin(), ids.end() - 1));
  EXPECT_EQ(so_far, all_but_last.substr(0, all_but_last.size() - 3));
}

TEST(StopChecker, EarliestOfSeveralStopStringsWins) {
  const std::vector<int32_t> ids = Qwen().Encode("one two three four");
  StopParams sp;
  sp.stop = {"four", "two", "e t"};
  const Fed r = Feed(sp, ids);
  EXPECT_EQ(r.text, "on");  // "e t" starts at byte 2 of "one two", before "two" at byte 4
  EXPECT_EQ(r.reason, "e t");
}

TEST(StopChecker, StopStringNeverSplitsUtf8) {
  const std::string text = "héllo wörld ünd mehr";
  const std::vector<int32_t> ids = Qwen().Encode(text);
  StopParams sp;
  sp.stop = {"zzzzzz"};  // long: holds back 5 bytes, which may fall inside a character
  const Fed r = Feed(sp, ids, static_cast<int>(ids.size()));
  EXPECT_EQ(r.text, text);
  for (const std::string& p : r.pieces) {
    ASSERT_TRUE(p.empty() || (static_cast<unsigned char>(p[0]) & 0xC0) != 0x80) << "split: " << p;
  }
}

TEST(StopChecker, EosAndStopTokenIdsEndWithoutTheirText) {
  const int32_t im_end = Qwen().TokenToId("<|im_end|>");
  std::vector<int32_t> ids = Qwen().Encode("Hello there");
  ids.push_back(im_end);
  ids.push_back(Qwen().Encode("x")[0]);
  StopParams sp;
  Fed r = Feed(sp, ids, 1000, {im_end});
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.text, "Hello there");
  EXPECT_EQ(r.reason, std::to_string(im_end));
  EXPECT_EQ(r.tokens, static_cast<int>(ids.size()) - 1);
  // ignore_eos: the EOS id is an ordinary token; a stop_token_id still ends it.
  sp.ignore_eos = true;
  sp.skip_special_tokens = false;
  sp.stop_token_ids = {ids.back()};
  r = Feed(sp, ids, 1000, {im_end});
  EXPECT_EQ(r.text, "Hello there<|im_end|>");
  EXPECT_EQ(r.reason, std::to_string(ids.back()));
}

TEST(StopChecker, MaxTokensEndsByLength) {
  const std::vector<int32_t> ids = Qwen().Encode("a b c d e f g");
  StopParams sp;
  const Fed r = Feed(sp, ids, 3);
  EXPECT_TRUE(r.finished);
  EXPECT_TRUE(r.by_length);
  EXPECT_EQ(r.tokens, 3);
  EXPECT_EQ(r.text, Qwen().Decode(std::vector<int32_t>(ids.begin(), ids.begin() + 3)));
}

}  // namespace
}  // namespace mimo
