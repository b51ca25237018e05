// libFuzzer harness for the Jinja renderer (src/jinja/jinja_template.h); built and run by
// scripts/fuzz.sh. The input is a template source. Parse must return a Status for any input; a
// template that parses is rendered with a chat-shaped context (messages with tool calls, tools,
// flags). Errors are fine, a crash, hang or sanitizer report is a bug. Loops over `range` are
// bounded by the engine itself; the renderer's output is capped here only by libFuzzer's -rss_limit.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/jinja_template.h"
#include "jinja/jinja_value.h"

namespace {

const std::vector<std::pair<std::string, mimo::jinja::JinjaValue>>& Context() {
  static const auto* ctx = [] {
    const auto messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are MiMo."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "reasoning_content": "think",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "user", "content": [{"type": "text", "text": "and <b>tomorrow</b>?"}]}
    ])");
    const auto tools = nlohmann::ordered_json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "d",
       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    ])");
    auto* v = new std::vector<std::pair<std::string, mimo::jinja::JinjaValue>>;
    v->emplace_back("messages", mimo::jinja::FromJson(messages));
    v->emplace_back("tools", mimo::jinja::FromJson(tools));
    v->emplace_back("add_generation_prompt", mimo::jinja::JinjaValue::Bool(true));
    v->emplace_back("enable_thinking", mimo::jinja::JinjaValue::Bool(false));
    v->emplace_back("bos_token", mimo::jinja::JinjaValue::String("<s>"));
    return v;
  }();
  return *ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = mimo::jinja::JinjaTemplate::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  (void)t->Render(Context());
  return 0;
}
