// `mimo chat`: one chat turn end to end, as a server would run it: render the model's own chat
// template, tokenize, generate over the paged KV cache until <|im_end|>, parse reasoning and tool
// calls with the `mimo` parsers. With --tool-exec CMD each tool call is run (the call's JSON on
// stdin, the result on stdout), fed back as a tool message, and the model answers again.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_output_parser.h"
#include "chat/chat_prompt.h"
#include "chat/chat_template.h"
#include "cli/command.h"
#include "cli/engine_setup.h"
#include "cli/weights_memory.h"
#include "engine/request_stream.h"

namespace mimo::cli {
namespace {

using Json = nlohmann::ordered_json;

// Runs `cmd` with `input` on stdin; returns its stdout (trailing newline dropped).
bool RunToolCommand(const std::string& cmd, const std::string& input, std::string* output) {
  char path[] = "/tmp/mimo-tool-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return false;
  FILE* in = fdopen(fd, "w");
  std::fwrite(input.data(), 1, input.size(), in);
  std::fclose(in);
  const std::string full = cmd + " < " + path;
  FILE* p = popen(full.c_str(), "r");
  if (!p) return false;
  char buf[4096];
  size_t n;
  output->clear();
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  const int rc = pclose(p);
  std::remove(path);
  while (!output->empty() && output->back() == '\n') output->pop_back();
  return rc == 0;
}

// Generates one assistant turn for `prompt_ids` through the engine; returns the generated ids
// without the stop token.
std::vector<int32_t> GenerateTurn(EngineRuntime& rt, const std::vector<int32_t>& prompt_ids,
                                  const SamplingParams& sp, int max_tokens, double* tok_per_s) {
  GenerationRequest g;
  g.prompt_ids = prompt_ids;
  g.sampling = sp;
  g.stop.max_tokens = std::min<int>(max_tokens, rt.engine->max_model_len() -
                                                    static_cast<int>(prompt_ids.size()));
  std::vector<int32_t> out;
  RequestStream stream;
  auto id = rt.engine->Submit(std::move(g), stream.Sink());
  if (!id.ok()) {
    std::fprintf(stderr, "mimo chat: error: %s\n", id.status().message().c_str());
    return out;
  }
  rt.engine->RunUntilIdle();
  RequestOutput ev, last;
  while (stream.Next(&ev, 0.0)) {
    out.insert(out.end(), ev.token_ids.begin(), ev.token_ids.end());
    last = std::move(ev);
  }
  const std::vector<int32_t>& eos = rt.engine->eos_ids();
  if (!out.empty() && last.finish_reason == FinishReason::kStop &&
      std::find(eos.begin(), eos.end(), out.back()) != eos.end()) {
    out.pop_back();
  }
  const double s = last.time - last.first_token_time;
  *tok_per_s = out.size() > 1 ? (out.size() - 1) / std::max(s, 1e-9) : 0.0;
  return out;
}

int RunChat(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = {"model", "message",   "messages",   "system",
                                   "tools", "tool-exec", "max-tokens", "temperature",
                                   "top-p", "seed",      "max-rounds", "weights-memory"};
  for (auto& k : EngineKeys()) keys.push_back(k);
  std::vector<std::string> flags = EngineFlags();
  flags.push_back("enable-thinking");
  flags.push_back("json");
  flags.push_back("parse-special-in-content");
  if (!a.Parse(argc, argv, keys, flags, &err) || !a.Has("model") ||
      (!a.Has("message") && !a.Has("messages"))) {
    std::fprintf(stderr,
                 "mimo chat: %s\nusage: mimo chat --model DIR (--message TEXT | --messages M.json) "
                 "[--system TEXT] [--tools T.json] [--tool-exec CMD] [--enable-thinking] "
                 "[--max-tokens N] [--temperature T] [--seed S] [--json] "
                 "[--parse-special-in-content]\n",
                 err.empty() ? "missing --model or --message" : err.c_str());
    return 2;
  }
  const std::string dir = a.Get("model");
  // Conversation and tools.
  Json messages = Json::array();
  if (a.Has("system")) messages.push_back({{"role", "system"}, {"content", a.Get("system")}});
  if (a.Has("messages")) {
    std::string text;
    if (!ReadFileToString(a.Get("messages"), &text)) {
      std::fprintf(stderr, "mimo chat: cannot read '%s'\n", a.Get("messages").c_str());
      return 2;
    }
    Json m = Json::parse(text, nullptr, false);
    if (m.is_discarded() || !m.is_array()) {
      std::fprintf(stderr, "mimo chat: '%s' is not a JSON array of messages\n", a.Get("messages").c_str());
      return 2;
    }
    for (auto& x : m) messages.push_back(x);
  }
  if (a.Has("message")) messages.push_back({{"role", "user"}, {"content", a.Get("message")}});
  Json tools = nullptr;
  ToolSchema schema;
  if (a.Has("tools")) {
    std::string text;
    if (!ReadFileToString(a.Get("tools"), &text)) {
      std::fprintf(stderr, "mimo chat: cannot read '%s'\n", a.Get("tools").c_str());
      return 2;
    }
    tools = Json::parse(text, nullptr, false);
    auto s = ToolSchema::FromJsonText(text);
    if (tools.is_discarded() || !s.ok()) {
      std::fprintf(stderr, "mimo chat: bad tools file: %s\n", s.ok() ? "not JSON" : s.status().message().c_str());
      return 2;
    }
    schema = std::move(s).value();
  }

  auto tmpl = ChatTemplate::FromModelDir(dir);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "mimo chat: error: %s\n", tmpl.status().message().c_str());
    return 1;
  }
  EngineRuntime rt;
  if (!MakeEngineOrReport("chat", a, true, 1, &rt)) return 1;
  if (!PlaceWeightsOrReport("chat", a, rt, false)) return 1;
  SamplingParams sp;
  sp.temperature = static_cast<float>(a.GetDouble("temperature", 0.0));
  sp.top_p = static_cast<float>(a.GetDouble("top-p", 1.0));
  sp.seed = static_cast<uint64_t>(a.GetInt("seed", 0));
  const bool thinking = a.Has("enable-thinking");
  const Json kwargs = {{"enable_thinking", thinking}};
  const int max_tokens = static_cast<int>(a.GetInt("max-tokens", 256));
  const int max_rounds = static_cast<int>(a.GetInt("max-rounds", 4));
  const bool json_out = a.Has("json");
  if (!json_out) {
    for (const auto& m : messages) {
      std::printf("%s: %s\n", m.value("role", "?").c_str(),
                  m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>().c_str() : "");
    }
  }
  Json transcript = Json::array();
  for (int round = 0; round < max_rounds; ++round) {
    // Messages and tool results are text: a "<|im_end|>" in them is not the token (as in serve).
    ChatRenderRequest req;
    req.messages = &messages;
    req.tools = &tools;
    req.kwargs = &kwargs;
    auto rendered =
        RenderChatPrompt(*tmpl, req, a.Has("parse-special-in-content") ? nullptr : rt.tok.get());
    if (!rendered.ok()) {
      std::fprintf(stderr, "mimo chat: error: %s\n", rendered.status().message().c_str());
      return 1;
    }
    const std::string* prompt = &rendered->text;
    const std::vector<int32_t> ids = EncodeChatPrompt(*rt.tok, *rendered);
    double tps = 0;
    const std::vector<int32_t> out = GenerateTurn(rt, ids, sp, max_tokens, &tps);
    const std::string text = rt.tok->Decode(out);
    ChatParserOptions po;
    po.reasoning.enable_thinking = thinking;
    po.reasoning.prompt_ends_in_think = PromptEndsInThink(*prompt);
    const ChatParseResult r = ChatOutputParser::Parse(schema, text, po);
    transcript.push_back(r.ToJson());
    if (!json_out) {
      if (!r.reasoning_content.empty()) std::printf("assistant (thinking): %s\n", r.reasoning_content.c_str());
      if (!r.content.empty()) std::printf("assistant: %s\n", r.content.c_str());
      for (const ToolCall& c : r.tool_calls) {
        std::printf("assistant (tool call): %s(%s)\n", c.name.c_str(), c.arguments.c_str());
      }
      std::fprintf(stderr, "[%zu prompt tokens, %zu generated, %.1f tok/s]\n", ids.size(), out.size(), tps);
    }
    Json amsg = {{"role", "assistant"}, {"content", r.content}};
    if (!r.reasoning_content.empty()) amsg["reasoning_content"] = r.reasoning_content;
    if (r.tool_calls.empty() || !a.Has("tool-exec")) break;
    Json calls = Json::array();
    for (const ToolCall& c : r.tool_calls) {
      calls.push_back({{"id", c.id}, {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", Json::parse(c.arguments)}}}});
    }
    amsg["tool_calls"] = calls;
    messages.push_back(amsg);
    for (const ToolCall& c : r.tool_calls) {
      const Json call = {{"name", c.name}, {"arguments", Json::parse(c.arguments)}};
      std::string result;
      if (!RunToolCommand(a.Get("tool-exec"), call.dump(), &result)) {
        std::fprintf(stderr, "mimo chat: tool command failed for %s\n", c.name.c_str());
        return 1;
      }
      if (!json_out) std::printf("tool: %s\n", result.c_str());
      messages.push_back({{"role", "tool"}, {"tool_call_id", c.id}, {"content", result}});
    }
  }
  if (json_out) std::printf("%s\n", transcript.dump().c_str());
  return 0;
}

}  // namespace
MIMO_CLI_COMMAND("chat",
                 "--model DIR (--message TEXT | --messages M.json) [--tools T.json] "
                 "[--tool-exec CMD] [--enable-thinking] [--max-tokens N] [--json]",
                 RunChat);
}  // namespace mimo::cli
