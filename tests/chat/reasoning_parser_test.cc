// The mimo reasoning parser against expectations written from serving.md §1.5 and the MiMo-V2.5
// chat template, plus the streaming property: any chunking gives the one-shot result.
#include "chat/reasoning_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mimo {
namespace {

ReasoningParserOptions On() { return {.enable_thinking = true, .prompt_ends_in_think = false}; }
ReasoningParserOptions Off() { return {.enable_thinking = false, .prompt_ends_in_think = false}; }
ReasoningParserOptions Prefilled(bool thinking) {
  return {.enable_thinking = thinking, .prompt_ends_in_think = true};
}

struct Split {
  std::string reasoning, content, tool_calls;
};

// Feeds `chunks` one by one and returns the accumulated streams.
Split Stream(const std::vector<std::string>& chunks, ReasoningParserOptions o) {
  MimoReasoningParser p(o);
  Split s;
  for (const auto& c : chunks) {
    ReasoningDelta d = p.Feed(c);
    s.reasoning += d.reasoning;
    s.content += d.content;
    s.tool_calls += d.ToolCallText();
  }
  ReasoningDelta d = p.Finish();
  s.reasoning += d.reasoning;
  s.content += d.content;
  s.tool_calls += d.ToolCallText();
  return s;
}

void ExpectParse(const std::string& text, ReasoningParserOptions o, const std::string& reasoning,
                 const std::string& content, const std::string& tool_calls = "") {
  ReasoningDelta r = MimoReasoningParser::Parse(text, o);
  EXPECT_EQ(r.reasoning, reasoning) << "text: " << text;
  EXPECT_EQ(r.content, content) << "text: " << text;
  EXPECT_EQ(r.ToolCallText(), tool_calls) << "text: " << text;
}

TEST(MimoReasoningParser, ThinkBlockBecomesReasoning) {
  ExpectParse("<think>The user greets me.</think>Hello!", On(), "The user greets me.", "Hello!");
  // Verbatim on both sides: no whitespace stripping.
  ExpectParse("<think>\nplan\n</think>\n\nAnswer\n", On(), "\nplan\n", "\n\nAnswer\n");
  // Whitespace before the opening tag is dropped with it.
  ExpectParse("\n <think>a</think>b", On(), "a", "b");
  ExpectParse("<think></think>Hi", On(), "", "Hi");
}

TEST(MimoReasoningParser, NoThinkTagWithThinkingOnIsContent) {
  ExpectParse("Hello there", On(), "", "Hello there");
  ExpectParse("Say <think> later</think>", On(), "", "Say <think> later</think>");
  ExpectParse("", On(), "", "");
  ExpectParse("  ", On(), "", "  ");
}

// A call inside the think block goes to the tool-call stream; the block goes on after it, and its
// `</think>` is dropped (issue 47: it leaked into content).
TEST(MimoReasoningParser, ToolCallInsideReasoningGoesToToolCalls) {
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n"
      "</tool_call>";
  ExpectParse("<think>I need the weather.\n" + call, On(), "I need the weather.\n", "", call);
  ExpectParse("<think>plan" + call + "</think>after", On(), "plan", "after", call);
  ExpectParse("I need the weather. " + call + "</think>\nChecking.", Prefilled(true),
              "I need the weather. ", "\nChecking.", call);
  // Two calls in one block, with reasoning between and after them.
  ExpectParse("a " + call + " b " + call + " c</think>", Prefilled(false), "a  b  c", "",
              call + call);
  // A call runs to its `</tool_call>`: a `</think>` before that is the call's text (a parameter
  // value may hold it; the output constraint allows it there).
  ExpectParse("a <tool_call><function=f></function></think>x", Prefilled(true), "a ", "",
              "<tool_call><function=f></function></think>x");
  ExpectParse("a <tool_call><function=f><parameter=x>1</think>2</parameter></function></tool_call>b",
              Prefilled(true), "a b", "",
              "<tool_call><function=f><parameter=x>1</think>2</parameter></function></tool_call>");
  // Cut inside the call: what came is for the tool-call parser; a partial tag too.
  ExpectParse("a <tool_call><function=f><parameter=x>1</para", Prefilled(true), "a ", "",
              "<tool_call><function=f><parameter=x>1</para");
  ExpectParse("a <tool_call><function=f></tool_ca", Prefilled(true), "a ", "",
              "<tool_call><function=f></tool_ca");
  // Text after the call with no `</think>` by the end: the block was never closed.
  ExpectParse("a " + call + "\nmore", Prefilled(true), "a \nmore", "", call);
  // After `</think>`, a call is content for the tool-call parser, as before.
  ExpectParse("a</think>" + call, Prefilled(true), "a", call);
}

TEST(MimoReasoningParser, ToolCallPiecesMarkWhereBlocksEnd) {
  const std::string call = "<tool_call><function=f></function></tool_call>";
  ReasoningDelta d = MimoReasoningParser::Parse("a" + call + "b" + call + "</think>", Prefilled(true));
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].text, call);
  EXPECT_TRUE(d.tool_calls[0].block_ends);
  EXPECT_EQ(d.tool_calls[1].text, call);
  EXPECT_TRUE(d.tool_calls[1].block_ends);
  MimoReasoningParser p(Prefilled(true));
  d = p.Feed("<tool_call><func");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].text, "<tool_call><func");
  EXPECT_FALSE(d.tool_calls[0].block_ends);
  d = p.Feed("tion=f></function></tool_");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].text, "tion=f></function>");  // "</tool_" held: may be the end
  EXPECT_FALSE(d.tool_calls[0].block_ends);
  d = p.Feed("call></think>ok");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].text, "</tool_call>");
  EXPECT_TRUE(d.tool_calls[0].block_ends);
  EXPECT_EQ(d.content, "ok");
  EXPECT_EQ(d.reasoning, "");
}

TEST(MimoReasoningParser, TruncatedReasoningIsReasoning) {
  ExpectParse("<think>still thinking about", On(), "still thinking about", "");
  // A held partial closing tag at the end of output is reasoning text.
  ExpectParse("<think>abc</thi", On(), "abc</thi", "");
  ExpectParse("<think>abc<tool_ca", On(), "abc<tool_ca", "");
  // An unfinished opening tag is content.
  ExpectParse("<thi", On(), "", "<thi");
}

TEST(MimoReasoningParser, PromptEndingInThinkStartsInReasoning) {
  ExpectParse("plan</think>answer", Prefilled(true), "plan", "answer");
  ExpectParse("cut off", Prefilled(true), "cut off", "");
  // The prompt opened the block, so this holds even when the request did not enable thinking.
  ExpectParse("plan</think>answer", Prefilled(false), "plan", "answer");
  // A second "<think>" inside is text.
  ExpectParse("<think>x</think>y", Prefilled(true), "<think>x", "y");
}

TEST(MimoReasoningParser, ThinkingOffIsAllContent) {
  ExpectParse("Hello", Off(), "", "Hello");
  ExpectParse("<think></think>Hello", Off(), "", "Hello");
  ExpectParse("<think>\n\n</think>\n\nHello", Off(), "", "\n\nHello");
  ExpectParse("\n<think> </think>Hi", Off(), "", "Hi");
  // A non-empty think block with thinking off is plain text.
  ExpectParse("<think>real</think>answer", Off(), "", "<think>real</think>answer");
  ExpectParse("<think>", Off(), "", "<think>");
  ExpectParse("<think></thi", Off(), "", "<think></thi");
  ExpectParse("Hi <think></think>", Off(), "", "Hi <think></think>");
  // Default options are "off".
  ExpectParse("<think>x</think>y", ReasoningParserOptions{}, "", "<think>x</think>y");
}

TEST(MimoReasoningParser, StreamingHoldsPartialTags) {
  MimoReasoningParser p(On());
  ReasoningDelta d = p.Feed("<thi");
  EXPECT_TRUE(d.empty());
  d = p.Feed("nk>abc</th");
  EXPECT_EQ(d.reasoning, "abc");
  EXPECT_EQ(d.content, "");
  d = p.Feed("ink>def");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "def");
  d = p.Feed("<think>");  // after the block, tags are content
  EXPECT_EQ(d.content, "<think>");
  EXPECT_TRUE(p.Finish().empty());
}

TEST(MimoReasoningParser, StreamingHoldsPartialToolCallInReasoning) {
  MimoReasoningParser p(Prefilled(true));
  ReasoningDelta d = p.Feed("step <tool");
  EXPECT_EQ(d.reasoning, "step ");
  d = p.Feed("_call>\n<function=f>");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "");
  EXPECT_EQ(d.ToolCallText(), "<tool_call>\n<function=f>");
  // "<tool" followed by something else was reasoning after all.
  MimoReasoningParser q(Prefilled(true));
  EXPECT_EQ(q.Feed("a <tool").reasoning, "a ");
  EXPECT_EQ(q.Feed("box> b").reasoning, "<toolbox> b");
}

TEST(MimoReasoningParser, MultibyteText) {
  ExpectParse("<think>思考 🤔</think>答案 ✓", On(), "思考 🤔", "答案 ✓");
}

// Every two-chunk split and the one-character chunking equal the one-shot result.
TEST(MimoReasoningParser, SplitPointProperty) {
  const std::vector<std::string> texts = {
      "<think>The user wants the weather.\nI'll call the tool.</think>\n\nSure!",
      "\n<think>a</think>b</think>c",
      "<think>plan\n<tool_call>\n<function=f>\n<parameter=x>1</parameter>\n</function>\n"
      "</tool_call>",
      "<think>a<tool_call><function=f></function></tool_call>b<tool_call>x</think>c</think>d",
      "<think></think>Hello <think>x</think>",
      "<think>\n \n</think>Hi",
      "plan with < and </th and <tool_ but no end",
      "<thinking>not a tag</thinking>",
      "思考</think>答案",
  };
  const std::vector<ReasoningParserOptions> opts = {On(), Off(), Prefilled(true)};
  for (const auto& text : texts) {
    for (const auto& o : opts) {
      ReasoningDelta whole = MimoReasoningParser::Parse(text, o);
      for (size_t i = 0; i <= text.size(); ++i) {
        Split s = Stream({text.substr(0, i), text.substr(i)}, o);
        ASSERT_EQ(s.reasoning, whole.reasoning) << text << " split at " << i;
        ASSERT_EQ(s.content, whole.content) << text << " split at " << i;
        ASSERT_EQ(s.tool_calls, whole.ToolCallText()) << text << " split at " << i;
      }
      std::vector<std::string> chars;
      for (char c : text) chars.push_back(std::string(1, c));
      Split s = Stream(chars, o);
      EXPECT_EQ(s.reasoning, whole.reasoning) << text;
      EXPECT_EQ(s.content, whole.content) << text;
      EXPECT_EQ(s.tool_calls, whole.ToolCallText()) << text;
    }
  }
}

}  // namespace
}  // namespace mimo
