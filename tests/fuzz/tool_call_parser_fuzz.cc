// libFuzzer harness for the streaming `mimo` tool-call parser (src/chat/tool_call_parser.h); built
// and run by scripts/fuzz.sh. Input: byte 0 = how many split points (mod 16), then that many bytes
// giving split positions, then the model output text. The text is parsed one-shot and streamed in
// the chunks the split points make; the two results must be identical (the header's promise:
// "Streaming emits the same bytes for any chunking"), and every call's arguments must be a JSON
// object. A crash, a sanitizer report or a trap is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/tool_call_parser.h"
#include "core/utf8.h"

namespace {

constexpr const char* kTools = R"([
  {"type": "function", "function": {"name": "execute_bash", "parameters": {"type": "object",
    "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}}}}},
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "temp": {"type": "number"}, "metric": {"type": "boolean"},
                   "options": {"type": "object"}, "tags": {"type": "array"},
                   "note": {"type": ["string", "null"]}}}}},
  {"name": "ping"}
])";

const mimo::ToolSchema& Schema() {
  static const mimo::ToolSchema* s = [] {
    auto r = mimo::ToolSchema::FromJsonText(kTools);
    if (!r.ok()) __builtin_trap();
    return new mimo::ToolSchema(std::move(*r));
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t n_splits = data[0] % 16;
  if (size < 1 + n_splits) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1 + n_splits, size - 1 - n_splits);
  std::vector<size_t> cuts;
  for (size_t i = 0; i < n_splits; ++i) cuts.push_back(text.empty() ? 0 : data[1 + i] % (text.size() + 1));
  std::sort(cuts.begin(), cuts.end());
  cuts.push_back(text.size());

  const mimo::ToolCallParserOptions opts{.id_seed = 7};
  const mimo::ToolParseResult once = mimo::MimoToolCallParser::Parse(Schema(), text, opts);
  mimo::MimoToolCallParser p(Schema(), opts);
  mimo::ToolParseResult streamed;
  size_t at = 0;
  for (size_t c : cuts) {
    mimo::AccumulateToolDelta(p.Feed(std::string_view(text).substr(at, c - at)), &streamed);
    at = c;
  }
  mimo::AccumulateToolDelta(p.Finish(), &streamed);

  if (once.content != streamed.content) __builtin_trap();
  if (once.tool_calls.size() != streamed.tool_calls.size()) __builtin_trap();
  const bool valid_utf8 = mimo::utf8::IsValid(text);
  for (size_t i = 0; i < once.tool_calls.size(); ++i) {
    const mimo::ToolCall &a = once.tool_calls[i], &b = streamed.tool_calls[i];
    if (a.index != b.index || a.id != b.id || a.name != b.name || a.arguments != b.arguments)
      __builtin_trap();
    if (!valid_utf8) continue;  // (JSON strings must be UTF-8; the parser copies bytes through)
    auto j = nlohmann::json::parse(a.arguments, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) __builtin_trap();  // arguments are always a JSON object
  }
  return 0;
}
