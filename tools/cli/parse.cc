// `mimo parse`: runs the mimo reasoning + tool-call parsers over a model output and prints
// {"content", "reasoning_content", "tool_calls"} as JSON (tool calls in OpenAI's shape).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_output_parser.h"
#include "cli/command.h"

namespace mimo::cli {
namespace {

constexpr const char* kUsage =
    "--text-file F [--tools T.json] [--model DIR] [--kwargs JSON] [--stream-chunk N] "
    "[--prompt-ends-in-think] [--id-seed N]";

// Byte offset after `n` UTF-8 code points from `pos` (never inside a multi-byte character).
size_t AdvanceCodePoints(const std::string& s, size_t pos, long long n) {
  for (long long k = 0; k < n && pos < s.size(); ++k) {
    ++pos;
    while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
  }
  return pos;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "mimo parse: %s\nusage: mimo parse %s\n", msg.c_str(), kUsage);
  return 2;
}

int RunParse(int argc, char** argv) {
  Args a;
  std::string err;
  if (!a.Parse(argc, argv, {"model", "tools", "text-file", "kwargs", "stream-chunk", "id-seed"},
               {"prompt-ends-in-think"}, &err))
    return Fail(err);
  if (!a.Has("text-file")) return Fail("missing --text-file");
  // --model DIR is accepted for symmetry with the other commands; nothing in it is needed.

  std::string text;
  if (!ReadFileToString(a.Get("text-file"), &text)) return Fail("cannot read '" + a.Get("text-file") + "'");

  ToolSchema schema;
  if (a.Has("tools")) {
    std::string tools_text;
    if (!ReadFileToString(a.Get("tools"), &tools_text)) return Fail("cannot read '" + a.Get("tools") + "'");
    StatusOr<ToolSchema> s = ToolSchema::FromJsonText(tools_text);
    if (!s.ok()) return Fail(a.Get("tools") + ": " + s.status().message());
    schema = std::move(*s);
  }

  nlohmann::json kwargs;
  if (a.Has("kwargs")) {
    kwargs = nlohmann::json::parse(a.Get("kwargs"), nullptr, /*allow_exceptions=*/false);
    if (kwargs.is_discarded()) return Fail("--kwargs: not valid JSON");
  }
  StatusOr<ReasoningParserOptions> reasoning = ReasoningOptionsFromKwargs(kwargs);
  if (!reasoning.ok()) return Fail("--kwargs: " + reasoning.status().message());

  ChatParserOptions options;
  options.reasoning = *reasoning;
  options.reasoning.prompt_ends_in_think = a.Has("prompt-ends-in-think");
  if (a.Has("id-seed")) options.tool_calls.id_seed = static_cast<uint64_t>(a.GetInt("id-seed", 0));

  ChatParseResult result;
  if (a.Has("stream-chunk")) {
    long long n = a.GetInt("stream-chunk", 0);
    if (n <= 0) return Fail("--stream-chunk must be a positive number of characters");
    ChatOutputParser parser(schema, options);
    for (size_t pos = 0; pos < text.size();) {
      size_t next = AdvanceCodePoints(text, pos, n);
      AccumulateChatDelta(parser.Feed(std::string_view(text).substr(pos, next - pos)), &result);
      pos = next;
    }
    AccumulateChatDelta(parser.Finish(), &result);
  } else {
    result = ChatOutputParser::Parse(schema, text, options);
  }
  std::printf("%s\n",
              result.ToJson().dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace

MIMO_CLI_COMMAND("parse", kUsage, RunParse);

}  // namespace mimo::cli
