// `mimo grammar-walk`: random walks through structured-output grammars (no model needed): each
// sample takes only tokens the grammar's mask allows, until the grammar ends. Prints one JSON line
// per sample, {"grammar", "seed", "text", "tokens", "terminated", "stuck"} (and with
// --parse-tool-calls the `mimo` tool parser's "content" and "tool_calls"), so that an independent
// validator can check every output (tests/python/test_grammar_walk.py).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/tool_call_parser.h"
#include "cli/command.h"
#include "cli/grammar_setup.h"
#include "grammar/grammar_walker.h"

namespace mimo::cli {
namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "mimo grammar-walk: error: %s\n", msg.c_str());
  return 1;
}

int GrammarWalk(int argc, char** argv) {
  Args a;
  std::string err;
  std::vector<std::string> keys = GrammarKeys();
  for (const char* k : {"model", "tokenizer", "samples", "seed", "max-tokens", "steer-after"})
    keys.push_back(k);
  std::vector<std::string> flags = GrammarFlags();
  flags.push_back("parse-tool-calls");
  if (!a.Parse(argc, argv, keys, flags, &err)) return Fail(err);
  if (a.Has("model") == a.Has("tokenizer")) return Fail("give --model DIR or --tokenizer FILE");
  const std::string tok_path =
      a.Has("model") ? a.Get("model") + "/tokenizer.json" : a.Get("tokenizer");
  auto tok = Tokenizer::FromFile(tok_path);
  if (!tok.ok()) return Fail(tok.status().message());
  auto vocab = TokenVocabulary::FromTokenizer(**tok);
  auto requests = GrammarRequestsFromArgs(a);
  if (!requests.ok()) return Fail(requests.status().message());
  ToolSchema tool_schema;
  if (a.Has("parse-tool-calls")) {
    std::string tools_text;
    if (!a.Has("tools") || !ReadFileToString(a.Get("tools"), &tools_text))
      return Fail("--parse-tool-calls needs a readable --tools file");
    auto s = ToolSchema::FromJsonText(tools_text);
    if (!s.ok()) return Fail(s.status().message());
    tool_schema = std::move(*s);
  }
  const std::vector<int32_t> eos = WalkEosIds(**tok);
  const int samples = static_cast<int>(a.GetInt("samples", 1));
  const uint64_t seed = static_cast<uint64_t>(a.GetInt("seed", 1));
  WalkOptions o;
  o.max_tokens = static_cast<int>(a.GetInt("max-tokens", o.max_tokens));
  o.steer_after = static_cast<int>(a.GetInt("steer-after", o.steer_after));
  for (const GrammarRequest& req : *requests) {
    auto grammar = CompileGrammar(req, a, vocab);
    if (!grammar.ok()) return Fail(req.name + ": " + grammar.status().message());
    for (int i = 0; i < samples; ++i) {
      o.seed = seed + i;
      WalkResult r = GrammarWalker::Walk(*grammar, o, eos);
      nlohmann::json line;
      line["grammar"] = req.name;
      line["seed"] = o.seed;
      try {
        (void)nlohmann::json(r.text).dump();  // throws on invalid UTF-8
        line["text"] = r.text;
      } catch (const nlohmann::json::exception&) {
        line["text"] = nullptr;
        line["invalid_utf8"] = true;
      }
      line["tokens"] = r.tokens.size();
      line["terminated"] = r.terminated;
      line["stuck"] = r.stuck;
      if (a.Has("parse-tool-calls")) {
        ToolParseResult p = MimoToolCallParser::Parse(tool_schema, r.text, {.id_seed = o.seed});
        line["content"] = p.content;
        line["tool_calls"] = nlohmann::json::array();
        for (const ToolCall& c : p.tool_calls)
          line["tool_calls"].push_back({{"name", c.name}, {"arguments", c.arguments}});
      }
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
  }
  return 0;
}

}  // namespace

MIMO_CLI_COMMAND("grammar-walk",
                 "(--model DIR | --tokenizer FILE) (--json-schema F[,F2...] | --json-object | "
                 "--tools F [--function NAME] [--parallel] [--parse-tool-calls]) [--samples N] "
                 "[--seed S] [--whitespace none|space|any] (random walks under structured-output "
                 "grammars, one JSON line each)",
                 GrammarWalk);

}  // namespace mimo::cli
