// ChatTemplate: tokenizer_config forms, transformers' variables, the thinking alias, argument
// parsing, and the real MiMo-V2.5 template on small conversations (expected prompts written by
// hand from the template text).
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace mimo {
namespace {

using json = nlohmann::ordered_json;

std::string ReadRepoFile(const std::string& rel) {
  std::ifstream f(std::string(MIMO_SOURCE_DIR) + "/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ChatTemplate MimoTemplate(const char* name = "mimo-v2.5") {
  std::string text =
      ReadRepoFile(std::string("tests/data/chat_templates/") + name + ".jinja");
  EXPECT_FALSE(text.empty());
  auto t = ChatTemplate::FromString(text);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

const char* kDefaultSystem =
    "<|im_start|>system\nYou are MiMo, a helpful AI assistant engineered by Xiaomi.<|im_end|>";

TEST(ChatTemplate, MimoGenerationPromptAndThinkingSwitch) {
  ChatTemplate t = MimoTemplate();
  json msgs = json::parse(R"([{"role": "user", "content": "Hi"}])");
  std::string base = std::string(kDefaultSystem) + "<|im_start|>user\nHi<|im_end|>";
  auto on = t.Render(msgs, nullptr, true, json::object());
  ASSERT_TRUE(on.ok()) << on.status().message();
  EXPECT_EQ(*on, base + "<|im_start|>assistant\n");  // thinking on by default: model opens <think>
  auto off = t.Render(msgs, nullptr, true, json::parse(R"({"enable_thinking": false})"));
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, base + "<|im_start|>assistant\n<think></think>");
  // The alias `thinking` reaches the template's enable_thinking.
  auto alias = t.Render(msgs, nullptr, true, json::parse(R"({"thinking": false})"));
  ASSERT_TRUE(alias.ok());
  EXPECT_EQ(*alias, *off);
  auto none = t.Render(msgs, nullptr, false, json::object());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, base);
  // The think-prefill variant opens <think> itself when thinking is on.
  auto prefill = MimoTemplate("mimo-v2.5-think-prefill").Render(msgs, nullptr, true, json::object());
  ASSERT_TRUE(prefill.ok());
  EXPECT_EQ(*prefill, base + "<|im_start|>assistant\n<think>");
}

TEST(ChatTemplate, MimoToolCallsAndGroupedResponses) {
  ChatTemplate t = MimoTemplate();
  json msgs = json::parse(R"([
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Q"},
    {"role": "assistant", "content": "", "reasoning_content": "R",
     "tool_calls": [{"type": "function", "function": {"name": "f",
        "arguments": {"s": "a\nb", "n": 3, "x": 1.5, "b": true, "z": null, "o": {"k": [1]}}}}]},
    {"role": "tool", "content": "r1"},
    {"role": "tool", "content": "r2"}
  ])");
  auto r = t.Render(msgs, nullptr, false, json::object());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r,
            "<|im_start|>system\nS<|im_end|>"
            "<|im_start|>user\nQ<|im_end|>"
            "<|im_start|>assistant\n<think>R</think>"
            "<tool_call>\n<function=f>\n"
            "<parameter=s>a\nb</parameter>\n<parameter=n>3</parameter>\n"
            "<parameter=x>1.5</parameter>\n<parameter=b>True</parameter>\n"
            "<parameter=z>None</parameter>\n<parameter=o>{\"k\": [1]}</parameter>\n"
            "</function>\n</tool_call><|im_end|>"
            "<|im_start|>tool\n<tool_response>\nr1\n</tool_response>\n"
            "<tool_response>\nr2\n</tool_response>\n<|im_end|>");
  // keep_all_reasoning=false drops reasoning before the last user turn.
  msgs.push_back(json::parse(R"({"role": "user", "content": "Q2"})"));
  auto dropped = t.Render(msgs, nullptr, false, json::parse(R"({"keep_all_reasoning": false})"));
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(dropped->find("<think>R</think>"), std::string::npos);
  auto kept = t.Render(msgs, nullptr, false, json::object());
  ASSERT_TRUE(kept.ok());
  EXPECT_NE(kept->find("<think>R</think>"), std::string::npos);
}

TEST(ChatTemplate, MimoToolsSection) {
  ChatTemplate t = MimoTemplate();
  json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": " Weather. ", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City"}, "days": {"type": ["integer", "null"],
        "minimum": 1}}, "required": ["city"]}}}])");
  auto r = t.Render(json::parse(R"([{"role": "user", "content": "x"}])"), tools, false,
                    json::object());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NE(r->find("<tools>\n<function>\n<name>get_weather</name>\n<description>Weather."
                    "</description>\n<parameters>\n<parameter>\n<name>city</name>\n"
                    "<type>string</type>\n<description>City</description>\n</parameter>\n"
                    "<parameter>\n<name>days</name>\n<type>['integer', 'null']</type>\n"
                    "<minimum>1</minimum>\n</parameter>\n<required>[\"city\"]</required>\n"
                    "</parameters>\n</function>\n</tools>"),
            std::string::npos)
      << *r;
}

TEST(ChatTemplate, FromTokenizerConfigForms) {
  json cfg = json::parse(R"({"bos_token": "<s>", "eos_token": {"content": "</s>"},
      "pad_token": null, "chat_template": "{{ bos_token }}{{ eos_token }}{{ pad_token is defined }}"})");
  auto t = ChatTemplate::FromTokenizerConfig(cfg);
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto r = t->Render(json::array(), nullptr, false, json::object());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "<s></s>False");

  json list_cfg = json::parse(R"({"chat_template": [{"name": "rag", "template": "R"},
                                                   {"name": "default", "template": "D"}]})");
  auto l = ChatTemplate::FromTokenizerConfig(list_cfg);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l->Render(json::array(), nullptr, false, json::object()), "D");

  EXPECT_FALSE(ChatTemplate::FromTokenizerConfig(json::parse(R"({"eos_token": "x"})")).ok());
  EXPECT_FALSE(ChatTemplate::FromTokenizerConfig(
                   json::parse(R"({"chat_template": [{"name": "rag", "template": "R"}]})"))
                   .ok());
  EXPECT_FALSE(ChatTemplate::FromTokenizerConfigFile("/nonexistent/tokenizer_config.json").ok());
  auto bad = ChatTemplate::FromString("x\n{% for %}");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
}

TEST(ChatTemplate, VariablesLikeTransformers) {
  auto t = ChatTemplate::FromString(
      "{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ custom }}|"
      "{{ messages | length }}");
  ASSERT_TRUE(t.ok());
  auto r = t->Render(json::parse(R"([{"role": "user", "content": "x"}])"), nullptr, true,
                     json::parse(R"({"custom": [1, "a"]})"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "True|True|True|[1, 'a']|1");
  EXPECT_FALSE(t->Render(json::array(), nullptr, true, json::parse(R"({"messages": 1})")).ok());
  EXPECT_FALSE(t->Render(json::object(), nullptr, true, json::object()).ok());
  // Alias in the other direction: template reads `thinking`, request sends enable_thinking.
  auto th = ChatTemplate::FromString("{{ thinking }}");
  ASSERT_TRUE(th.ok());
  EXPECT_EQ(*th->Render(json::array(), nullptr, false, json::parse(R"({"enable_thinking": false})")),
            "False");
}

TEST(ChatTemplate, ParseToolCallArguments) {
  json msgs = json::parse(R"([{"role": "assistant", "tool_calls": [
      {"function": {"name": "f", "arguments": "{\"b\": 1, \"a\": [true]}"}},
      {"function": {"name": "g", "arguments": {"k": "v"}}}]}])");
  ASSERT_TRUE(ChatTemplate::ParseToolCallArguments(&msgs).ok());
  EXPECT_EQ(msgs[0]["tool_calls"][0]["function"]["arguments"].dump(), R"({"b":1,"a":[true]})");
  EXPECT_EQ(msgs[0]["tool_calls"][1]["function"]["arguments"].dump(), R"({"k":"v"})");
  json bad = json::parse(R"([{"role": "assistant", "tool_calls": [
      {"function": {"name": "f", "arguments": "{not json"}}]}])");
  Status st = ChatTemplate::ParseToolCallArguments(&bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("messages[0].tool_calls[0]"), std::string::npos);
}

}  // namespace
}  // namespace mimo

namespace mimo {
namespace {

// Omni checkpoints (V2.5, V2.6) are run as language models only: the MiMo-V2.5 template would turn
// an image part into <|image_pad|> tokens the engine cannot fill, so Render refuses every media
// part with an error naming it, and renders text parts as the template does.
TEST(ChatTemplate, MediaContentPartsAreRefusedByName) {
  ChatTemplate t = MimoTemplate();
  const char* kParts[][2] = {
      {R"({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}})", "image_url"},
      {R"({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}})",
       "input_audio"},
      {R"({"type": "image", "image": "x.png"})", "image"},
      {R"({"type": "video_url", "video_url": {"url": "v.mp4"}})", "video_url"},
      {R"({"audio_url": "a.wav"})", "audio_url"},
  };
  for (const auto& [part, kind] : kParts) {
    json msgs = json::parse(std::string(R"([{"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "Look:"}, )") + part + "]}]");
    auto r = t.Render(msgs, nullptr, true, json::object());
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_NE(r.status().message().find("messages[1].content[1]"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(std::string("'") + kind + "'"), std::string::npos)
        << r.status().message();
  }
  json text_only = json::parse(R"([{"role": "user", "content": [
      {"type": "text", "text": "A"}, {"type": "text", "text": "B"}]}])");
  auto ok = t.Render(text_only, nullptr, true, json::object());
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_NE(ok->find("<|im_start|>user\nAB<|im_end|>"), std::string::npos) << *ok;
  // Template-exact rendering (mimo render) keeps the template's placeholders.
  t.set_allow_media_parts(true);
  json image = json::parse(
      R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}])");
  auto placeholder = t.Render(image, nullptr, true, json::object());
  ASSERT_TRUE(placeholder.ok()) << placeholder.status().message();
  EXPECT_NE(placeholder->find("<|image_pad|>"), std::string::npos) << *placeholder;
}

}  // namespace
}  // namespace mimo
