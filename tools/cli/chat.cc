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
#include "chat/chat_template.h"
#include "cli/command.h"
#include "cli/model_loading.h"
#include "engine/sampler.h"
#include "tokenizer/bpe.h"

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

struct ChatRuntime {
  LoadedModel lm;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatTemplate> tmpl;
  std::set<int32_t> stop_ids;
};

// Generates one assistant turn for `prompt_ids`; returns the generated ids (stop token excluded).
std::vector<int32_t> GenerateTurn(ChatRuntime& rt, const Args& a,
                                  const std::vector<int32_t>& prompt_ids, int max_tokens,
                                  Sampler& sampler, double* tok_per_s) {
  const ModelConfig& cfg = rt.lm.model->config();
  auto kv = MakeKvCacheOrReport("chat", a, *rt.lm.model, 1,
                                static_cast<int64_t>(prompt_ids.size()) + max_tokens,
                                static_cast<int>(prompt_ids.size()));
  std::vector<int32_t> out;
  if (!kv) return out;
  std::vector<float> logits(cfg.vocab_size);  // [vocab]
  StepBatch b;
  b.chunks.push_back({0, 0, static_cast<int>(prompt_ids.size()), 0});
  b.num_tokens = static_cast<int>(prompt_ids.size());
  ForwardOutputs fo;
  fo.logit_rows = {b.num_tokens - 1};
  fo.logits = logits.data();
  rt.lm.model->Forward(rt.lm.ctx, b, prompt_ids.data(), *kv, fo);
  int pos = b.num_tokens;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < max_tokens; ++i) {
    const int32_t next = sampler.Sample(logits.data(), cfg.vocab_size);
    if (rt.stop_ids.count(next)) break;
    out.push_back(next);
    StepBatch d;
    d.chunks.push_back({0, 0, 1, pos++});
    d.num_tokens = 1;
    ForwardOutputs o;
    o.logits = logits.data();
    rt.lm.model->Forward(rt.lm.ctx, d, &next, *kv, o);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *tok_per_s = out.empty() ? 0.0 : out.size() / std::max(s, 1e-9);
  return out;
}

int RunChat(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = {"model", "message", "messages", "system", "tools", "tool-exec",
                                   "max-tokens", "temperature", "top-p", "seed", "threads",
                                   "max-rounds"};
  for (auto& k : KvCacheKeys()) keys.push_back(k);
  std::vector<std::string> flags = KvCacheFlags();
  flags.push_back("enable-thinking");
  flags.push_back("json");
  if (!a.Parse(argc, argv, keys, flags, &err) || !a.Has("model") ||
      (!a.Has("message") && !a.Has("messages"))) {
    std::fprintf(stderr,
                 "mimo chat: %s\nusage: mimo chat --model DIR (--message TEXT | --messages M.json) "
                 "[--system TEXT] [--tools T.json] [--tool-exec CMD] [--enable-thinking] "
                 "[--max-tokens N] [--temperature T] [--seed S] [--json]\n",
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

  ChatRuntime rt;
  auto tok = Tokenizer::FromFile(dir + "/tokenizer.json");
  if (!tok.ok()) {
    std::fprintf(stderr, "mimo chat: error: %s\n", tok.status().message().c_str());
    return 1;
  }
  rt.tok = std::move(tok).value();
  auto tmpl = ChatTemplate::FromModelDir(dir);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "mimo chat: error: %s\n", tmpl.status().message().c_str());
    return 1;
  }
  rt.tmpl = std::make_unique<ChatTemplate>(std::move(tmpl).value());
  if (!LoadModelOrReport("chat", dir, static_cast<int>(a.GetInt("threads", 0)), &rt.lm)) return 1;
  // Stop set by name as well as from config (V2.5 declares a single eos id).
  for (int id : rt.lm.model->config().eos_token_ids) rt.stop_ids.insert(id);
  for (const char* name : {"<|im_end|>", "<|endoftext|>"}) {
    const int32_t id = rt.tok->TokenToId(name);
    if (id >= 0) rt.stop_ids.insert(id);
  }

  SamplingParams sp;
  sp.temperature = static_cast<float>(a.GetDouble("temperature", 0.0));
  sp.top_p = static_cast<float>(a.GetDouble("top-p", 1.0));
  sp.seed = static_cast<uint64_t>(a.GetInt("seed", 0));
  Sampler sampler(sp);
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
    Json render_messages = messages;
    auto prompt = rt.tmpl->Render(render_messages, tools, true, kwargs);
    if (!prompt.ok()) {
      std::fprintf(stderr, "mimo chat: error: %s\n", prompt.status().message().c_str());
      return 1;
    }
    const std::vector<int32_t> ids = rt.tok->Encode(*prompt);
    double tps = 0;
    const std::vector<int32_t> out = GenerateTurn(rt, a, ids, max_tokens, sampler, &tps);
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
